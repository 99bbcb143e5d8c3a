# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors;
# device code builds lists with `[]`, as annotated assignments are host-only syntax;
# `register_tunable` returns an object, the int its Choice picks).
# mypy: disable-error-code="index,list-item,misc,var-annotated,operator,call-overload"
"""Normalization, and the fused preprocessing kernel a detector or classifier needs.

`normalize` computes `(x / max - mean) / std` in float32 (max = 255 for uint8 images,
1 for float ones, as torchvision's `to_dtype(scale=True)` then `normalize`) and stores
float16, bfloat16 or float32 in either layout: NHWC uint8 in, NCHW float out is one pass.
`preprocess` resizes (bilinear or antialiased) or letterboxes and normalizes in the same
pass, with no intermediate image. NHWC uint8 frames stored without gaps (what decoders
give) take `antialias.py`'s kernels: whole runs of rows in wide loads, the interpolation
as small matrix products on the tensor cores. Other frames take `_resize_normalize`, whose
outputs each gather their four source pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import tilecraft as tc
from tilecraft.language import Choice
from tilecraft.vision import antialias_batch, antialias_whole
from tilecraft.vision._device import bilinear, bilinear_taps, inside
from tilecraft.vision.antialias import bilinear_normalize, fits, packed_rows
from tilecraft.vision.boxes import box_scales, target_box
from tilecraft.vision.color import byte_float, check_yuv420, words, yuv_to_rgb
from tilecraft.vision.downscale import average_resize
from tilecraft.vision.geometry import ZERO_TAPS, _resize_taps, gather_channels
from tilecraft.vision.layout import as_nchw, check_layout, new_image
from tilecraft.vision.memory import constant, empty

FLOAT_OUTPUTS = (torch.float16, torch.bfloat16, torch.float32)
# The planes one program of `_resize_normalize` covers: every channel of one image (the
# default) or of every image, walking the batch ("all"); see geometry.PLANES.
BATCH_PLANES = Choice("channels", "all")


# How a `_normalize` program covers channels: a block of them in its tile ("tile", the
# default), or one program per pixel tile looping over every channel ("loop"), all loaded
# before any store. With "tile" an NHWC uint8 tile reads 1-byte lanes along the channels
# (a fourth of them masked off for RGB) and is transposed through shared memory for the
# NCHW stores; with "loop" each channel is a stride-3 load whose sectors the next
# channel's load reuses, and, on tiles of one output per thread (block_h * block_w ==
# 32 * num_warps), lanes read adjacent pixels (a knob until measured: `bench_vision.py
# --variants --only normalize`).
CHANNEL_MODES = Choice("tile", "loop")


# Measured on the H200 (uint8 NHWC 1080p -> float16 NCHW, 16 frames, `bench_vision.py
# --variants`): every channel of 1 x 512 pixels per program, 0.101 ms (2.96 TB/s), against
# 0.171 for 4 channels x 64 x 64 tiles.
@tc.kernel(
    default_config=tc.Config(block_sizes=[None, None, None, 1, 512], num_warps=4, channels="loop")
)
def _normalize(
    image: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, out: torch.Tensor, peak: float
) -> torch.Tensor:
    n, c, h, w = image.size()
    channels = tc.register_tunable("channels", CHANNEL_MODES)
    # "tile": a program may hold several channels (by default all, up to 4): an NHWC
    # pixel's bytes are then read together, and the tile is transposed on chip for the
    # NCHW stores
    size = [n, c if channels == "tile" else 0, h, w]
    for tile_n, tile_c, tile_h, tile_w in tc.tile(size, block_size=[1, None, None, None]):
        x = image[tile_n, tile_c, tile_h, tile_w].to(torch.float32) / peak
        scaled = (x - mean[tile_c][None, :, None, None]) / std[tile_c][None, :, None, None]
        out[tile_n, tile_c, tile_h, tile_w] = scaled.to(out.dtype)
    # "loop": every channel of the pixels of a tile, loaded before any store (a store in
    # between would hold the next channel's loads back: they might read what it wrote)
    for tile_n, tile_h, tile_w in tc.tile(
        [n, h if channels == "loop" else 0, w], block_size=[1, None, None]
    ):
        means, stds = _channel_stats(mean, std)
        values = []
        for k in range(c):
            values = values + [image[tile_n, k, tile_h, tile_w].to(torch.float32)]
        for k in range(c):
            out[tile_n, k, tile_h, tile_w] = ((values[k] / peak - means[k]) / stds[k]).to(out.dtype)
    return out


# How `_normalize_words` stores the four pixels of a group per channel: "stacked" (a
# [rows, groups, 4] tile whose last dim is 4 adjacent outputs: 8-byte float16 stores) or
# "strided" (four stores, each every fourth output). A knob until timed on the H200.
STORES = Choice("stacked", "strided")
# How `_normalize_words` normalizes: "divide" as the formula reads (`(x / peak - mean) /
# std`, two float32 divisions: the results of the other kernels, bit for bit), or
# "multiply": `x * scale + shift`, with `scale = 1 / (peak * std)` and `shift = -mean / std`
# computed once per program: one fused multiply-add instead of two divisions (each about
# ten instructions on a GPU) per value, within a few float32 ulps (a float16 result
# within one ulp). A knob until timed on the H200.
ARITHMETIC = Choice("divide", "multiply")
# How `_normalize_words` makes floats of bytes: "float" converts (`.to()`), "bits" puts the
# byte under 2**23's exponent and subtracts 2**23 (exact; an integer operation where the
# GPU converts at a quarter of the rate it adds; see color.LEVELS). A knob until timed.
CONVERT = Choice("float", "bits")
# Pixels per group of `_normalize_words`: 4 (C words; float16 stores of 8 bytes) or 8 (2 C
# words; 16-byte stores). A knob until timed on the H200.
GROUP = Choice(4, 8)


# NHWC uint8 rows read as 32-bit words: four pixels of C channels are C words (4 C bytes),
# loaded whole (a load per word every C words, where reading each channel's bytes
# separately takes 4 C one-byte loads), their bytes picked out by shifts (all static).
# A knob until timed on the H200 (`bench_vision.py --variants --only normalize`).
@tc.kernel(default_config=tc.Config(block_sizes=[1, 128], num_warps=4))
def _normalize_words(
    words: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, out: torch.Tensor, peak: float
) -> torch.Tensor:
    # words: (N, H, C * W / 4) int32, the NHWC uint8 rows; out: (N, C, H, W) float
    n, c, h, w = out.size()
    stores = tc.register_tunable("stores", STORES)
    arithmetic = tc.register_tunable("arithmetic", ARITHMETIC)
    bits = tc.register_tunable("convert", CONVERT) == "bits"
    size = tc.register_tunable("group", GROUP)
    groups = (w + size - 1) // size  # (past the last pixel, loads and stores are masked)
    for tile_n, tile_h, tile_g in tc.tile([n, h, groups], block_size=[1, None, None]):
        means, stds = _channel_stats(mean, std)
        scales = []
        shifts = []
        for k in range(c):
            scales = scales + [1.0 / (peak * stds[k])]
            shifts = shifts + [-means[k] / stds[k]]
        rows = tile_h.index[:, None]
        first = tile_g.index[None, :] * (c * size // 4)
        group = []
        for k in range(c * size // 4):
            group = group + [words[tile_n, rows, first + k].to(torch.int32)]
        for k in range(c):
            pixels = []
            for j in range(size):
                byte = (group[(j * c + k) // 4] >> (8 * ((j * c + k) % 4))) & 255
                byte = byte_float(byte, 0.0, bits)
                if arithmetic == "divide":
                    value = (byte / peak - means[k]) / stds[k]
                else:
                    value = byte * scales[k] + shifts[k]
                pixels = pixels + [value.to(out.dtype)]
            where = (tile_n, k, tile_h, tile_g)
            _store_group(out, where, pixels, stores == "stacked")
    return out


def _store_group(out: torch.Tensor, where: tuple, pixels: list, stacked: bool) -> None:
    """Store channel `k` of groups of pixels (`pixels`: the first of each group, the
    second, ...) at `where` = (image, k, rows, groups) of `out`; a device helper."""
    n, k, tile_h, tile_g = where
    size = len(pixels)
    if stacked:
        rows = tile_h.index[:, None, None]
        cols = tile_g.index[None, :, None] * size + tc.arange(size)[None, None, :]
        out[n, k, rows, cols] = torch.stack(pixels, dim=-1)
    else:
        rows = tile_h.index[:, None]
        for j in range(size):
            out[n, k, rows, tile_g.index[None, :] * size + j] = pixels[j]


# Measured on the H200 (uint8 NHWC 1080p -> 640x360 float16 NCHW, 16 frames): 1 x 128
# output tiles with 4 warps, 0.041 ms, against 0.212 for 64 x 64 (`bench_vision.py
# --variants`).
MEASURED = tc.Config(block_sizes=[1, 128, None, None], num_warps=4)


@tc.kernel(default_config=MEASURED)
def _resize_normalize(
    image: torch.Tensor,
    mean: torch.Tensor,
    std: torch.Tensor,
    out: torch.Tensor,
    box_top: int,
    box_left: int,
    box_height: int,
    box_width: int,
    scale_h: float,
    scale_w: float,
    pad: float,
    peak: float,
    is_uint8: bool,
) -> torch.Tensor:
    # geometry.py's _resize_bilinear, with normalization instead of uint8 rounding; one
    # program does every channel (frames have 1 to 4), so the source positions and weights
    # are computed once and an NHWC pixel's bytes are read together; with `planes="all"`
    # (a knob, off until measured) it walks the whole batch too, computing them once per
    # position (geometry.PLANES says more)
    _, c, h, w = image.size()
    n, _, out_h, out_w = out.size()
    planes = tc.register_tunable("planes", BATCH_PLANES)
    zero_taps = tc.register_tunable("zero_taps", ZERO_TAPS)
    skip = is_uint8 and zero_taps == "skip"  # (see geometry.ZERO_TAPS)
    size = [n, out_h if planes == "channels" else 0, out_w]
    for tile_n, tile_h, tile_w in tc.tile(size, block_size=[1, None, None]):
        dst_h = tile_h.index - box_top
        dst_w = tile_w.index - box_left
        rows = bilinear_taps(dst_h, scale_h, h)
        cols = bilinear_taps(dst_w, scale_w, w)
        box = inside(dst_h, dst_w, box_height, box_width)
        for k in range(c):
            value = torch.where(box, bilinear(image, tile_n, k, rows, cols, skip), pad) / peak
            out[tile_n, k, tile_h, tile_w] = ((value - mean[k]) / std[k]).to(out.dtype)
    for tile_h, tile_w in tc.tile([out_h if planes == "all" else 0, out_w]):
        rows, cols, box = _resize_taps(
            tile_h, tile_w, box_top, box_left, box_height, box_width, scale_h, scale_w, h, w
        )
        means, stds = _channel_stats(mean, std)
        for tile_n in tc.tile(n, block_size=1):
            # every channel's loads before any store: stores in between would hold them back
            values = gather_channels(image, tile_n, rows, cols, box, pad, skip)
            for k in range(c):
                normalized = (values[k] / peak - means[k]) / stds[k]
                out[tile_n, k, tile_h, tile_w] = normalized.to(out.dtype)
    return out


def _channel_stats(mean: torch.Tensor, std: torch.Tensor) -> tuple[list, list]:
    """Each channel's mean and std, read once (not once per image); a device helper."""
    means = []
    stds = []
    for k in range(mean.size(0)):
        means = means + [mean[k]]
        stds = stds + [std[k]]
    return means, stds


@tc.kernel
def _nv12_resize_normalize(
    y: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    mean: torch.Tensor,
    std: torch.Tensor,
    out: torch.Tensor,
    box_top: int,
    box_left: int,
    box_height: int,
    box_width: int,
    scale_h: float,
    scale_w: float,
    pad: float,
    interleaved: bool,
) -> torch.Tensor:
    # Each of the four bilinear taps is converted to RGB and rounded to uint8 levels, as
    # `nv12_to_rgb` would store it, then blended: equal to converting first, in one pass.
    # With `interleaved`, `u` is NV12's UV plane as 16-bit words (U low; `v` is not read):
    # one gather per tap for both chroma samples. A tap of weight 0 is not read (its lanes
    # are masked off; the planes are uint8, without NaN): at whole scales three in four.
    _, h, w = y.size()
    n, _, out_h, out_w = out.size()
    for tile_n, tile_h, tile_w in tc.tile([n, out_h, out_w], block_size=[1, None, None]):
        dst_h = tile_h.index - box_top
        dst_w = tile_w.index - box_left
        y0, y1, wy = bilinear_taps(dst_h, scale_h, h)
        x0, x1, wx = bilinear_taps(dst_w, scale_w, w)
        wy = wy[:, None]
        wx = wx[None, :]
        red = tc.zeros([tile_h, tile_w], dtype=torch.float32)
        green = tc.zeros([tile_h, tile_w], dtype=torch.float32)
        blue = tc.zeros([tile_h, tile_w], dtype=torch.float32)
        for dy in range(2):
            rows = y0[:, None]
            weight_y = 1.0 - wy
            if dy == 1:
                rows = y1[:, None]
                weight_y = wy
            for dx in range(2):
                cols = x0[None, :]
                weight = weight_y * (1.0 - wx)
                if dx == 1:
                    cols = x1[None, :]
                    weight = weight_y * wx
                read = weight != 0.0
                luma = tc.load(y, [tile_n, rows, cols], extra_mask=read)
                cb, cr = _tap_chroma(u, v, tile_n, rows >> 1, cols >> 1, read, interleaved)
                tap_r, tap_g, tap_b = yuv_to_rgb(luma, cb, cr)
                red = red + weight * tap_r
                green = green + weight * tap_g
                blue = blue + weight * tap_b
        box = inside(dst_h, dst_w, box_height, box_width)
        red = torch.where(box, red, pad) / 255.0
        green = torch.where(box, green, pad) / 255.0
        blue = torch.where(box, blue, pad) / 255.0
        out[tile_n, 0, tile_h, tile_w] = ((red - mean[0]) / std[0]).to(out.dtype)
        out[tile_n, 1, tile_h, tile_w] = ((green - mean[1]) / std[1]).to(out.dtype)
        out[tile_n, 2, tile_h, tile_w] = ((blue - mean[2]) / std[2]).to(out.dtype)
    return out


def _tap_chroma(
    u: torch.Tensor,
    v: torch.Tensor,
    n: Any,
    rows: torch.Tensor,
    cols: torch.Tensor,
    read: torch.Tensor,
    interleaved: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The U and V samples (uint8 levels, int32) at chroma `rows` x `cols` where `read`
    (0 elsewhere): one word of NV12's interleaved plane (`interleaved`) or a byte of each
    planar one; a device helper."""
    if interleaved:
        word = tc.load(u, [n, rows, cols], extra_mask=read).to(torch.int32)
        cb = word & 255
        cr = (word >> 8) & 255
    else:
        cb = tc.load(u, [n, rows, cols], extra_mask=read).to(torch.int32)
        cr = tc.load(v, [n, rows, cols], extra_mask=read).to(torch.int32)
    return cb, cr


def _stats(values: Sequence[float] | torch.Tensor, channels: int, device: torch.device):
    if isinstance(values, torch.Tensor):
        stats = values.to(device, torch.float32).flatten()
        stats = stats.expand(channels).contiguous() if stats.numel() == 1 else stats
    else:  # built once per values and device (see memory.constant)
        flat = torch.as_tensor(values, dtype=torch.float64).flatten().tolist()
        stats = constant(flat * channels if len(flat) == 1 else flat, device)
    if stats.numel() != channels:
        raise ValueError(f"mean and std have one value per channel ({channels}), not {values}")
    return stats


def _destination(
    out: torch.Tensor | None,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    batched: bool,
) -> torch.Tensor:
    """`out` (a caller's buffer, reused so a steady stream of frames allocates nothing) as
    a 4-D view, checked; or a new contiguous NCHW tensor."""
    if out is None:
        return empty(shape, dtype, device)
    view = out if batched else out[None]
    if tuple(view.shape) != shape or out.dtype != dtype or out.device != device:
        raise ValueError(
            f"out must be {dtype} of shape {shape if batched else shape[1:]} on {device}, "
            f"not {out.dtype} {tuple(out.shape)} on {out.device}"
        )
    return view


def _check_dtype(dtype: torch.dtype) -> None:
    if dtype not in FLOAT_OUTPUTS:
        raise ValueError(f"the output dtype is one of {FLOAT_OUTPUTS}, not {dtype}")


def normalize(
    image: torch.Tensor,
    mean: Sequence[float] | torch.Tensor,
    std: Sequence[float] | torch.Tensor,
    dtype: torch.dtype = torch.float32,
    layout: str = "NCHW",
    out_layout: str = "NCHW",
) -> torch.Tensor:
    """`(image / 255 - mean) / std` per channel for uint8 (`(image - mean) / std` for float).

    Reads `layout`, writes `out_layout` in `dtype` (float16, bfloat16 or float32): an NHWC
    uint8 batch becomes the NCHW float batch a model takes, in one pass.
    """
    _check_dtype(dtype)
    img = as_nchw(image, layout)
    n, c, h, w = img.view.shape
    out = new_image(n, c, h, w, dtype, image.device, check_layout(out_layout))
    peak = 255.0 if image.dtype == torch.uint8 else 1.0
    mean_t, std_t = _stats(mean, c, image.device), _stats(std, c, image.device)
    packed = _word_rows(img.view) if out_layout == "NCHW" else None
    if packed is not None:
        return img.restore(_normalize_words(packed, mean_t, std_t, out, peak), out_layout)
    return img.restore(_normalize(img.view, mean_t, std_t, out, peak), out_layout)


def _word_rows(image: torch.Tensor) -> torch.Tensor | None:
    """The uint8 NCHW view `image` of NHWC memory without gaps as (N, H, C * W / 4) int32
    words (a view), for `_normalize_words`; None for other images, widths not a multiple
    of 4, or more than 4 channels."""
    n, c, h, w = image.shape
    rows = packed_rows(image) if image.dtype == torch.uint8 and c <= 4 else None
    if rows is None or w % 4 or rows.numel() == 0:
        return None
    try:
        return rows.view(torch.int32)
    except RuntimeError:  # an offset or a row not aligned to a word
        return None


def preprocess(
    frames: torch.Tensor,
    size: tuple[int, int],
    mean: Sequence[float] | torch.Tensor,
    std: Sequence[float] | torch.Tensor,
    dtype: torch.dtype = torch.float16,
    layout: str = "NHWC",
    letterbox: bool = False,
    pad: float = 114.0,
    out: torch.Tensor | None = None,
    antialias: bool = False,
) -> torch.Tensor:
    """Frames (NHWC uint8 by default) -> bilinear resize -> normalize -> NCHW `dtype`, one pass.

    With `letterbox=True` the frames keep their aspect ratio inside `size` and the border
    is `pad` (a pixel value, normalized like the others). Equal, within rounding, to
    `normalize(resize(frames.float(), size), ...)`: the resized values are not rounded to
    uint8 in between, so it is more exact than resizing uint8 images first. Given `out`
    (NCHW, the result's shape and dtype), the result is written there: nothing is allocated.

    With `antialias=True` the resize averages every pixel an output covers, as torchvision's
    `resize` does by default (`F.interpolate(..., antialias=True)`), as two small matrix
    products per tile on the tensor cores (`tilecraft/vision/antialias.py`): float16 weights,
    within about 0.2 of a uint8 level of the float32 reference before normalizing. NHWC
    uint8 frames shrunk by whole factors (1080p -> 640x360) sum their taps with integer
    weights instead (`antialias_whole.py`), exact until the float16 store.
    """
    _check_dtype(dtype)
    img = as_nchw(frames, layout)
    n, c, h, w = img.view.shape
    box = target_box((h, w), size, letterbox)
    scales = box_scales((h, w), box)
    out = _destination(out, (n, c, *size), dtype, frames.device, img.batched)
    peak = 255.0 if frames.dtype == torch.uint8 else 1.0
    mean_t, std_t = _stats(mean, c, frames.device), _stats(std, c, frames.device)
    if antialias:
        out = _antialiased(img.view, mean_t, std_t, out, box, float(pad), peak)
    else:
        packed = bilinear_normalize(img.view, mean_t, std_t, out, box, float(pad), peak)
        if packed is None:
            args = (*box, *scales, float(pad), peak, frames.dtype == torch.uint8)
            packed = _resize_normalize(img.view, mean_t, std_t, out, *args)
        out = packed
    return img.restore(out, "NCHW")


def _antialiased(
    image: torch.Tensor,
    mean: torch.Tensor,
    std: torch.Tensor,
    out: torch.Tensor,
    box: list[int],
    pad: float,
    peak: float,
) -> torch.Tensor:
    """The antialiased resize into `box` of `out`, normalized: one kernel (for shrinks by
    whole factors, one without weights to compute), or, for shrinking too far for its
    windows, the two averaging passes and then a copy into the box."""
    whole = antialias_whole.resize_normalize(image, mean, std, out, box, pad, peak)
    if whole is not None:
        return whole
    # float16 products of uint8 samples; float frames (of any range) take the passes
    if image.dtype == torch.uint8 and fits(tuple(image.shape[2:]), box):
        return antialias_batch.resize_normalize(image, mean, std, out, box, pad, peak)
    n, c = image.shape[:2]
    inner = empty([n, c, box[2], box[3]], torch.float32, image.device)
    inner = average_resize(image, inner, area=False)
    # bilinear at scale 1 samples each pixel exactly: a copy into the box, with the border
    return _resize_normalize(inner, mean, std, out, *box, 1.0, 1.0, pad, peak, False)


def preprocess_nv12(
    y: torch.Tensor,
    uv: torch.Tensor,
    size: tuple[int, int],
    mean: Sequence[float] | torch.Tensor,
    std: Sequence[float] | torch.Tensor,
    dtype: torch.dtype = torch.float16,
    letterbox: bool = False,
    pad: float = 114.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """NV12 frames (a decoder's output) -> RGB -> bilinear resize -> normalize -> NCHW, one pass.

    `y` is (N, H, W) uint8 and `uv` (N, ceil(H/2), ceil(W/2), 2), as `nv12_to_rgb` takes
    them; the result equals `preprocess(nv12_to_rgb(y, uv), ..., layout="NCHW")` within
    rounding, without the RGB image in between. `out` as for `preprocess`.
    """
    _check_dtype(dtype)
    if uv.dim() != y.dim() + 1 or uv.shape[-1] != 2:
        raise ValueError(f"the UV plane is (..., H/2, W/2, 2), not {tuple(uv.shape)}")
    batched = y.dim() == 3
    y, uv = (y, uv) if batched else (y[None], uv[None])
    u, v = uv[..., 0], uv[..., 1]
    check_yuv420(y, u, v)
    n, h, w = y.shape
    box = target_box((h, w), size, letterbox)
    scales = box_scales((h, w), box)
    out = _destination(out, (n, 3, *size), dtype, y.device, batched)
    mean_t, std_t = _stats(mean, 3, y.device), _stats(std, 3, y.device)
    chroma = words(uv)
    planes = (u, v) if chroma is None else (chroma[..., 0], chroma[..., 0])
    args = (*box, *scales, float(pad), chroma is not None)
    out = _nv12_resize_normalize(y, *planes, mean_t, std_t, out, *args)
    return out if batched else out[0]
