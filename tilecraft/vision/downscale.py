# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors;
# device code builds lists with `[]`, as annotated assignments are host-only syntax).
# mypy: disable-error-code="index,list-item,misc,var-annotated"
"""Resizing that averages: antialiased bilinear (torchvision's default) and area.

Both are separable, two passes (rows, then columns) through a float32 intermediate, as
PyTorch computes them. Antialiased bilinear (`F.interpolate(..., antialias=True)`): output
`i` averages the inputs within `support = max(scale, 1)` of its centre `(i + 0.5) * scale`
with triangle weights `1 - |x| / max(scale, 1)`, normalized. Area (`mode="area"`,
adaptive average pooling): output `i` is the mean of inputs `floor(i * in / out)` to
`ceil((i + 1) * in / out) - 1`.
"""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.language import Choice
from tilecraft.vision import antialias
from tilecraft.vision._device import uint8_levels
from tilecraft.vision.boxes import float32_ratio
from tilecraft.vision.memory import empty


def _tap_weight(
    tile: tc.Tile, source: torch.Tensor, centre: torch.Tensor, inv_scale: float, area: bool
) -> torch.Tensor:
    """The weight, before normalizing, of input `source` in outputs centred at `centre`:
    1 (area) or the triangle `1 - |distance| / support`; a device helper of `_average_rows`."""
    if area:
        weight = tc.full([tile], 1.0, dtype=torch.float32)
    else:
        distance = torch.abs((source - centre + 0.5) * inv_scale)
        weight = torch.clamp(1.0 - distance, min=0.0)
    return weight


def _measured(args: tuple) -> tc.Config | None:
    """Row passes over 1 x 128 tiles with 4 warps, the column pass on the heuristic 64 x 64.
    On the H200, 16 frames of 1080p: a half-size antialiased float resize (planar rows,
    read along the last axis) took 0.411 ms, against 1.420 with 64 x 64 for both passes;
    uint8 NHWC to 640x360 (rows of interleaved channels, all of a pixel's per program)
    0.394 ms, against 2.20."""
    image = args[0]
    if image.stride(3) == 1:
        return tc.Config(block_sizes=[1, 128], num_warps=4)
    if image.stride(1) == 1 and image.stride(2) != 1:
        return tc.Config(block_sizes=[None, None, 1, 128], num_warps=4, channels="all")
    return None


# What an `_average_rows` program covers: one channel's tile ("one", the default), or the
# same pixels in every channel ("all"): the window and weights are computed once for all
# channels and, for NHWC frames, a pixel's interleaved channels are loaded together,
# every channel before any store (a knob until measured: `bench_vision.py --variants
# --only "resize antialiased u8"`).
AVERAGE_CHANNELS = Choice("one", "all")


@tc.kernel(default_config=_measured)
def _average_rows(
    image: torch.Tensor,
    out: torch.Tensor,
    area: bool,
    taps: int,
    scale: float,
    support: float,
    inv_scale: float,
) -> torch.Tensor:
    # resamples the last axis of `image` into `out`'s; pass a transposed view for columns
    n, c, h, w = image.size()
    out_w = out.size(3)
    channels = tc.register_tunable("channels", AVERAGE_CHANNELS)
    size = [n, c if channels == "one" else 0, h, out_w]
    for tile_n, tile_c, tile_h, tile_w in tc.tile(size, block_size=[1, 1, None, None]):
        start, weights = _window(tile_w, w, out_w, area, taps, scale, support, inv_scale)
        acc = tc.zeros([tile_h, tile_w], dtype=torch.float32)
        for k in range(taps):
            cols = (start + k)[None, :]
            pixels = image[tile_n, tile_c, tile_h.index[:, None], cols].to(torch.float32)
            acc = acc + weights[k][None, :] * pixels
        out[tile_n, tile_c, tile_h, tile_w] = acc
    for tile_n, tile_h, tile_w in tc.tile(
        [n, h if channels == "all" else 0, out_w], block_size=[1, None, None]
    ):
        start, weights = _window(tile_w, w, out_w, area, taps, scale, support, inv_scale)
        sums = []
        for ch in range(c):
            acc = tc.zeros([tile_h, tile_w], dtype=torch.float32)
            for k in range(taps):
                cols = (start + k)[None, :]
                pixels = image[tile_n, ch, tile_h.index[:, None], cols].to(torch.float32)
                acc = acc + weights[k][None, :] * pixels
            sums = sums + [acc]
        for ch in range(c):
            out[tile_n, ch, tile_h, tile_w] = sums[ch]
    return out


def _window(
    tile_w: tc.Tile,
    w: int,
    out_w: int,
    area: bool,
    taps: int,
    scale: float,
    support: float,
    inv_scale: float,
) -> tuple[torch.Tensor, list]:
    """The first input of each output of `tile_w` and the normalized weight of each of its
    `taps` inputs (0 past its window); a device helper of `_average_rows`."""
    centre = (tile_w.index.to(torch.float32) + 0.5) * scale
    if area:
        start = (tile_w.index * w) // out_w
        stop = ((tile_w.index + 1) * w + out_w - 1) // out_w
    else:
        start = torch.clamp(centre - support + 0.5, min=0.0).to(torch.int32)
        stop = (centre + support + 0.5).to(torch.int32)
        stop = torch.where(stop < w, stop, w)
    total = tc.zeros([tile_w], dtype=torch.float32)
    for k in range(taps):
        weight = _tap_weight(tile_w, start + k, centre, inv_scale, area)
        total = total + torch.where(start + k < stop, weight, 0.0)
    weights = []
    for k in range(taps):
        weight = _tap_weight(tile_w, start + k, centre, inv_scale, area)
        weights = weights + [torch.where(start + k < stop, weight / total, 0.0)]
    return start, weights


@tc.kernel
def _store(value: torch.Tensor, out: torch.Tensor, is_uint8: bool) -> torch.Tensor:
    n, c, h, w = value.size()
    for tile_n, tile_c, tile_h, tile_w in tc.tile([n, c, h, w], block_size=[1, 1, None, None]):
        pixels = value[tile_n, tile_c, tile_h, tile_w]
        if is_uint8:
            pixels = uint8_levels(pixels)
        out[tile_n, tile_c, tile_h, tile_w] = pixels.to(out.dtype)
    return out


def _axis(
    image: torch.Tensor, size: int, area: bool, out: torch.Tensor | None = None
) -> torch.Tensor:
    """`image` (N, C, H, W) resampled along W to `size`, into float32 (or `out`)."""
    n, c, h, w = image.shape
    scale = float32_ratio(w, size)
    taps = -(-w // size) + 1 if area else antialias.taps(scale)
    if out is None:
        out = empty([n, c, h, size], torch.float32, image.device)
    reach = antialias.support(scale)
    return _average_rows(image, out, area, taps, scale, reach, antialias.inverse_support(scale))


def average_resize(image: torch.Tensor, out: torch.Tensor, area: bool) -> torch.Tensor:
    """NCHW view `image` resized into the NCHW view `out`, by area or antialiased bilinear."""
    out_h, out_w = out.shape[2:]
    rows = _axis(image, out_w, area)  # (N, C, H, out_w)
    if out.dtype == torch.float32:  # the column pass writes the result in place
        _axis(rows.transpose(2, 3), out_h, area, out.transpose(2, 3))
        return out
    columns = _axis(rows.transpose(2, 3), out_h, area).transpose(2, 3)
    return _store(columns, out, out.dtype == torch.uint8)
