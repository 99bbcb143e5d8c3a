# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors;
# device code builds lists with `[]`, as annotated assignments are host-only syntax).
# mypy: disable-error-code="index,list-item,misc,var-annotated"
"""Color conversions: RGB <-> BGR, RGB -> gray, YUV 4:2:0 (NV12, I420) -> RGB.

Uint8 results are computed in float32, rounded half to even, clamped to 0..255 and stored,
except grayscale, which truncates as torchvision's `rgb_to_grayscale` does (`.to(uint8)`).
"""

from __future__ import annotations

from typing import Any

import torch

import tilecraft as tc
from tilecraft.language import Choice
from tilecraft.vision._device import uint8_levels
from tilecraft.vision.layout import as_nchw, check_channels, new_image

# ITU-R 601 luma weights, as torchvision's rgb_to_grayscale spells them.
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)

# BT.601 limited range ("TV" range: Y in 16..235, chroma in 16..240), what decoders give:
# R = Ys*(Y-16) + Rv*(V-128), G = Ys*(Y-16) + Gu*(U-128) + Gv*(V-128), B = Ys*(Y-16) + Bu*(U-128)
Y_SCALE = 255 / 219
R_V = 1.402 * 255 / 224
G_U = -0.114 * 1.772 / 0.587 * 255 / 224
G_V = -0.299 * 1.402 / 0.587 * 255 / 224
B_U = 1.772 * 255 / 224
# the same as one constant for `yuv_to_rgb`: an inlined function may read a module's tuple
# of floats as constants, while a bare module float would have to be a kernel argument
BT601 = (Y_SCALE, R_V, G_U, G_V, B_U)


def yuv_to_rgb(
    y: torch.Tensor, u: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """BT.601 limited-range samples (device tiles of uint8 Y, U, V) as float32 R, G, B
    levels, rounded and saturated as a uint8 image stores them; called in kernels."""
    y_scale, r_v, g_u, g_v, b_u = BT601
    luma = (y.to(torch.float32) - 16.0) * y_scale
    cb = u.to(torch.float32) - 128.0
    cr = v.to(torch.float32) - 128.0
    red = uint8_levels(luma + r_v * cr)
    green = uint8_levels(luma + g_u * cb + g_v * cr)
    blue = uint8_levels(luma + b_u * cb)
    return red, green, blue


@tc.kernel
def _reverse_channels(image: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    n, c, h, w = image.size()
    for tile_n, tile_h, tile_w in tc.tile([n, h, w], block_size=[1, None, None]):
        for k in range(c):
            out[tile_n, k, tile_h, tile_w] = image[tile_n, c - 1 - k, tile_h, tile_w]
    return out


# Measured on the H200 (16 frames of 1080p, `bench_vision.py --variants`): uint8 gray
# over 1 x 2048 tiles, 0.040 ms (3.36 TB/s) against 0.054 for the heuristic's.
@tc.kernel(default_config=tc.Config(block_sizes=[1, 2048], num_warps=4))
def _gray(image: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    n, _, h, w = image.size()
    for tile_n, tile_h, tile_w in tc.tile([n, h, w], block_size=[1, None, None]):
        r = image[tile_n, 0, tile_h, tile_w].to(torch.float32)
        g = image[tile_n, 1, tile_h, tile_w].to(torch.float32)
        b = image[tile_n, 2, tile_h, tile_w].to(torch.float32)
        luma = r * 0.2989 + g * 0.587 + b * 0.114
        out[tile_n, 0, tile_h, tile_w] = luma.to(out.dtype)
    return out


# Measured as gray: NV12 to RGB over 4 x 128 tiles, 0.140 ms against 0.181. Now only for
# what `_yuv420_words` cannot read as words (odd widths, planes with odd strides): each
# output gathers its chroma samples, one byte at a time.
@tc.kernel(default_config=tc.Config(block_sizes=[4, 128], num_warps=4))
def _yuv420_to_rgb(
    y: torch.Tensor, u: torch.Tensor, v: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    n, h, w = y.size()
    for tile_n, tile_h, tile_w in tc.tile([n, h, w], block_size=[1, None, None]):
        # each chroma sample covers a 2x2 block of luma samples (nearest upsampling); a
        # shift, as the indices are not negative: `// 2` adds a sign correction to each
        rows = tile_h.index[:, None] >> 1
        cols = tile_w.index[None, :] >> 1
        luma = y[tile_n, tile_h, tile_w]
        red, green, blue = yuv_to_rgb(luma, u[tile_n, rows, cols], v[tile_n, rows, cols])
        out[tile_n, 0, tile_h, tile_w] = red.to(torch.uint8)
        out[tile_n, 1, tile_h, tile_w] = green.to(torch.uint8)
        out[tile_n, 2, tile_h, tile_w] = blue.to(torch.uint8)
    return out


# How `_yuv420_words` converts between integers and floats: "float" with conversion
# instructions (`.to()`), or "bits": a byte b under the exponent of 2**23 is the float
# 2**23 + b, and a float v (|v| < 2**22) plus 1.5 * 2**23 holds round(v) (half to even)
# in its low bits, so both ways are an integer operation and a bit cast. The GPU converts
# at a quarter of the rate it adds, four times a pixel here. The same levels either way.
# A knob until timed on the H200.
LEVELS = Choice("float", "bits")
TWO_23 = 0x4B000000  # the bits of 2.0**23
ROUNDER = 0x4B400000  # the bits of 1.5 * 2.0**23


# YUV 4:2:0 as 16-bit words: a word of luma is two neighbouring pixels, which share one
# chroma sample (NV12's UV word, or one byte of each I420 plane), and a word of an output
# channel is the same two pixels. A program covers a tile of chroma samples (rows of
# chroma x words) and both luma rows under it: every load and store is a contiguous run
# of whole words along a row (wide vector accesses, no gathers), and the chroma products
# are computed once per 2x2 pixels. Words are little-endian (the left pixel in the low
# byte), as on every GPU and CPU PyTorch runs on. Timed on the H200 (16 frames of 1080p,
# `bench_vision.py --variants --only nv12`): 1 x 1024 words with 4 warps 0.048 ms (82% of
# a copy's bandwidth), 1 x 512 0.051, the per-pixel gathers before 0.090.
@tc.kernel(default_config=tc.Config(block_sizes=[1, 1024], num_warps=4))
def _yuv420_words(
    y: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    interleaved: bool,
    channels_last: bool,
) -> torch.Tensor:
    # y: (N, H, W/2) int16; u, v: (N, ceil(H/2), W/2) uint8 planes, or with `interleaved`
    # `u` is NV12's UV plane as int16 words (U in the low byte; `v` is not read); out:
    # (N, 3, H, W/2) int16 words of NCHW planes, or with `channels_last` (N, H, 3 * W/2),
    # the words of NHWC rows (three per pair of pixels: R0 G0, B0 R1, G1 B1)
    n, _, pairs = y.size()
    bits = tc.register_tunable("levels", LEVELS) == "bits"
    for tile_n, tile_r, tile_w in tc.tile([n, u.size(1), pairs], block_size=[1, None, None]):
        cb, cr = _chroma(u, v, tile_n, tile_r, tile_w, interleaved, bits)
        top = tile_r.index[:, None] * 2
        cols = tile_w.index[None, :]
        # both luma rows before any store (a store in between would hold the second
        # row's load back: it might read what the store wrote); past an odd height, the
        # second row is masked off
        upper = y[tile_n, top, cols].to(torch.int32)
        lower = y[tile_n, top + 1, cols].to(torch.int32)
        rgb = _pair_levels(upper, cb, cr, bits)
        _store_words(out, tile_n, top, cols, rgb, channels_last)
        rgb = _pair_levels(lower, cb, cr, bits)
        _store_words(out, tile_n, top + 1, cols, rgb, channels_last)
    return out


def _chroma(
    u: torch.Tensor, v: torch.Tensor, n: Any, rows: Any, cols: Any, interleaved: bool, bits: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The centred chroma (Cb, Cr: U - 128, V - 128, float32) of a tile of chroma samples;
    a device helper."""
    if interleaved:
        word = u[n, rows, cols].to(torch.int32)
        cb = byte_float(word & 255, 128.0, bits)
        cr = byte_float((word >> 8) & 255, 128.0, bits)
    else:
        cb = byte_float(u[n, rows, cols].to(torch.int32), 128.0, bits)
        cr = byte_float(v[n, rows, cols].to(torch.int32), 128.0, bits)
    return cb, cr


def byte_float(byte: torch.Tensor, offset: float, bits: bool) -> torch.Tensor:
    """`byte - offset` in float32 (exact) for int32 bytes, converted or, with `bits`,
    through 2**23's exponent; a device helper."""
    if bits:
        value = (byte | TWO_23).view(torch.float32) - (8388608.0 + offset)
    else:
        value = byte.to(torch.float32) - offset
    return value


def _level(value: torch.Tensor, bits: bool) -> torch.Tensor:
    """The uint8 level of float32 `value` (rounded half to even, saturated) as int32: the
    level itself, or with `bits` ROUNDER + the level (|value| < 2**22); a device helper."""
    if bits:
        level = torch.clamp((value + 12582912.0).view(torch.int32), ROUNDER, ROUNDER + 255)
    else:
        level = uint8_levels(value).to(torch.int32)
    return level


def _pair_levels(word: torch.Tensor, cb: torch.Tensor, cr: torch.Tensor, bits: bool) -> list:
    """R, G and B words (int32, two uint8 levels each, the left pixel low) of luma words
    (int32 holding two uint8 samples) over chroma `cb`, `cr`; a device helper."""
    _, r_v, g_u, g_v, b_u = BT601
    # once per chroma sample; each pixel adds them in the order `yuv_to_rgb` does
    products = (r_v * cr, g_u * cb, g_v * cr, b_u * cb)
    left = _levels(word & 255, products, bits)
    right = _levels((word >> 8) & 255, products, bits)
    packed = []
    for k in range(3):
        if bits:  # ROUNDER's low 16 bits are 0: the low byte is the level
            packed = packed + [(left[k] & 255) | ((right[k] & 255) << 8)]
        else:
            packed = packed + [left[k] | (right[k] << 8)]
    return packed


def _levels(sample: torch.Tensor, products: tuple, bits: bool) -> list:
    """R, G, B levels (`_level`s) of luma `sample` (int32 0..255) plus the chroma
    `products` of `_pair_levels`, the sums `yuv_to_rgb` makes; a device helper."""
    red_v, green_u, green_v, blue_u = products
    y_scale, _, _, _, _ = BT601
    luma = byte_float(sample, 16.0, bits) * y_scale
    red = _level(luma + red_v, bits)
    green = _level(luma + green_u + green_v, bits)
    blue = _level(luma + blue_u, bits)
    return [red, green, blue]


def _store_words(
    out: torch.Tensor, n: Any, rows: torch.Tensor, cols: torch.Tensor, rgb: list, nhwc: bool
) -> None:
    """Store the R, G, B words `rgb` of pixel pairs at `rows` x `cols` (word columns) of
    `out` (see `_yuv420_words`); a device helper."""
    red, green, blue = rgb
    if nhwc:  # R0 G0 | B0 R1 | G1 B1: bytes regrouped across the three channel words
        out[n, rows, 3 * cols] = ((red & 255) | ((green & 255) << 8)).to(torch.int16)
        out[n, rows, 3 * cols + 1] = ((blue & 255) | (red & 0xFF00)).to(torch.int16)
        out[n, rows, 3 * cols + 2] = ((green >> 8) | (blue & 0xFF00)).to(torch.int16)
    else:
        out[n, 0, rows, cols] = red.to(torch.int16)
        out[n, 1, rows, cols] = green.to(torch.int16)
        out[n, 2, rows, cols] = blue.to(torch.int16)


def rgb_to_bgr(image: torch.Tensor, layout: str = "NCHW") -> torch.Tensor:
    """Reverse the channel order (RGB -> BGR, and BGR -> RGB), any dtype, same layout.

    >>> rgb_to_bgr(torch.tensor([[[1]], [[2]], [[3]]], dtype=torch.uint8)).flatten().tolist()
    [3, 2, 1]
    """
    img = as_nchw(image, layout)
    n, c, h, w = img.view.shape
    out = new_image(n, c, h, w, image.dtype, image.device, layout)
    return img.restore(_reverse_channels(img.view, out))


bgr_to_rgb = rgb_to_bgr


def rgb_to_gray(image: torch.Tensor, layout: str = "NCHW") -> torch.Tensor:
    """Luma of an RGB image, one channel, same dtype and layout (torchvision's weights).

    `0.2989 R + 0.587 G + 0.114 B` in float32; uint8 results are truncated, as
    torchvision's `rgb_to_grayscale` does.
    """
    img = as_nchw(image, layout)
    check_channels(img, 3, "rgb_to_gray")
    n, _, h, w = img.view.shape
    out = new_image(n, 1, h, w, image.dtype, image.device, layout)
    return img.restore(_gray(img.view, out))


def _chroma_shape(y: torch.Tensor) -> tuple[int, int, int]:
    n, h, w = y.shape
    return n, (h + 1) // 2, (w + 1) // 2


def _planes(y: torch.Tensor) -> tuple[torch.Tensor, bool]:
    if y.dtype != torch.uint8 or y.dim() not in (2, 3):
        raise ValueError(f"the Y plane is uint8 of shape (N, H, W) or (H, W), not {y.dtype}")
    return (y, True) if y.dim() == 3 else (y[None], False)


def check_yuv420(y: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> None:
    """A ValueError unless `y` is an (N, H, W) uint8 plane and `u`, `v` its chroma planes."""
    if y.dtype != torch.uint8 or y.dim() != 3:
        raise ValueError(f"the Y plane is uint8 of shape (N, H, W), not {y.dtype} {tuple(y.shape)}")
    expected = _chroma_shape(y)
    for name, plane in (("U", u), ("V", v)):
        if tuple(plane.shape) != expected or plane.dtype != torch.uint8:
            raise ValueError(
                f"the {name} plane must be uint8 of shape {expected}, not "
                f"{plane.dtype} {tuple(plane.shape)}"
            )


def _to_rgb(
    y: torch.Tensor, u: torch.Tensor, v: torch.Tensor, layout: str, uv: torch.Tensor | None = None
) -> torch.Tensor:
    """RGB of the planes (`uv`: NV12's interleaved plane, whose views `u` and `v` are)."""
    y4, batched = _planes(y)
    u, v = (u, v) if batched else (u[None], v[None])
    uv = uv if uv is None or batched else uv[None]
    check_yuv420(y4, u, v)
    n, h, w = y4.shape
    out = new_image(n, 3, h, w, torch.uint8, y.device, layout)
    if not _by_words(y4, u, v, uv, out, layout):
        out = _yuv420_to_rgb(y4, u, v, out)
    out = out.permute(0, 2, 3, 1) if layout == "NHWC" else out
    return out if batched else out[0]


def words(plane: torch.Tensor) -> torch.Tensor | None:
    """uint8 `plane` (..., 2k) as int16 words (..., k) of neighbouring pairs, a view; None
    where its memory has no such view (an odd last size or a stride or offset)."""
    if plane.shape[-1] % 2 or (plane.shape[-1] > 1 and plane.stride(-1) != 1):
        return None
    try:
        return plane.view(torch.int16)
    except RuntimeError:  # an odd stride or storage offset
        return None


def _by_words(
    y: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    uv: torch.Tensor | None,
    out: torch.Tensor,
    layout: str,
) -> bool:
    """Convert with `_yuv420_words` into `out` (an NCHW view of a new image in `layout`),
    or say it cannot (False) for planes that cannot be read as words."""
    nhwc = layout == "NHWC"
    n, _, h, w = out.shape
    target = words(out.permute(0, 2, 3, 1).reshape(n, h, 3 * w) if nhwc else out)
    luma = words(y)
    if uv is not None:
        chroma = words(uv)
        chroma = None if chroma is None else chroma[..., 0]
        planes = (chroma, chroma)
    else:
        planes = (u, v)
    if target is None or luma is None or planes[0] is None or u.shape[-1] * 2 != w:
        return False
    _yuv420_words(luma, planes[0], planes[1], target, uv is not None, nhwc)
    return True


def i420_to_rgb(
    y: torch.Tensor, u: torch.Tensor, v: torch.Tensor, layout: str = "NCHW"
) -> torch.Tensor:
    """Planar YUV 4:2:0 (I420) to RGB uint8, BT.601 limited range.

    `y` is (N, H, W) (or (H, W)), `u` and `v` are (N, ceil(H/2), ceil(W/2)), all uint8.
    Chroma is upsampled by nearest neighbour (each sample covers 2x2 pixels).
    """
    return _to_rgb(y, u, v, layout)


def nv12_to_rgb(y: torch.Tensor, uv: torch.Tensor, layout: str = "NCHW") -> torch.Tensor:
    """Semi-planar YUV 4:2:0 (NV12, NVDEC's output) to RGB uint8, BT.601 limited range.

    `y` is (N, H, W) (or (H, W)); `uv` is (N, ceil(H/2), ceil(W/2), 2), U and V interleaved.
    A packed NV12 buffer of even H splits with `split_nv12`.
    """
    if uv.dim() != y.dim() + 1 or uv.shape[-1] != 2:
        raise ValueError(f"the UV plane is (..., H/2, W/2, 2), not {tuple(uv.shape)}")
    return _to_rgb(y, uv[..., 0], uv[..., 1], layout, uv)


def split_nv12(frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the Y and UV planes of packed NV12 frames of shape (..., H * 3 // 2, W)."""
    rows, w = frames.shape[-2:]
    h = rows * 2 // 3
    if h % 2 or w % 2 or rows != h * 3 // 2:
        raise ValueError(f"packed NV12 needs an even height and width, got {tuple(frames.shape)}")
    uv = frames[..., h:, :].reshape(*frames.shape[:-2], h // 2, w // 2, 2)
    return frames[..., :h, :], uv
