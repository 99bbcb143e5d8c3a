# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors;
# `register_tunable` returns an object, the int its Choice picks).
# mypy: disable-error-code="index,list-item,misc,operator,arg-type"
"""Antialiased resize + normalize as two small matrix products per tile of outputs.

Each output of an antialiased (`F.interpolate(..., antialias=True)`) resize is a weighted
sum of a window of inputs, separably: `out = Wv @ X @ Wh`, where `X` is the window of the
image a tile of outputs reads and `Wv`, `Wh` hold each output's normalized triangle
weights (mostly zeros). The kernel computes the weight matrices from indices, loads the
window once (uint8 values are exact in float16) and lets the tensor cores do the sums: no
output re-reads its taps one gathered load at a time, and no intermediate image is made.
Float16 weights and partial sums keep results within about 0.2 of a uint8 level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

import tilecraft as tc
from tilecraft.language import Choice

# rows of outputs, columns of outputs, and input columns per step of a program's tile
# (the first of each is the default: a 16 x 32 tile of 1080p -> 360p reads a 64-row window)
ROW_BLOCKS = (16, 32, 64)
ROWS = Choice(*ROW_BLOCKS)
COLS = Choice(32, 16, 64)
STEP = Choice(32, 16, 64)
# the most input rows and columns the smallest tile may read; beyond, `fits` says no
WINDOW_LIMIT = 256


def support(scale: float) -> float:
    """How far from an output's centre its inputs reach, in input pixels."""
    return max(scale, 1.0)


def span(block: int, scale: float) -> int:
    """The most inputs the windows of `block` consecutive outputs cover together."""
    return math.ceil((block - 1) * scale + 2 * support(scale)) + 2


def window_rows(block: int, scale: float) -> int:
    """`span` rounded up to a power of two (a tile's extent), at least 16 (tensor cores)."""
    return max(16, 1 << (span(block, scale) - 1).bit_length())


def taps(scale: float) -> int:
    """The most inputs one output reads."""
    return math.ceil(support(scale)) * 2 + 1


def bounds(
    dst: torch.Tensor, scale: float, reach: float, inv_reach: float, size: int, count: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """First input, end of inputs, centre and weight total of the outputs at `dst`
    (>= 0), as PyTorch's antialiased kernels compute them; a device helper."""
    centre = (dst.to(torch.float32) + 0.5) * scale
    low = torch.clamp(centre - reach + 0.5, min=0.0).to(torch.int32)
    high = (centre + reach + 0.5).to(torch.int32)
    high = torch.where(high < size, high, size)
    total = torch.zeros_like(centre)
    for k in range(count):
        weight = torch.clamp(1.0 - torch.abs((low + k - centre + 0.5) * inv_reach), min=0.0)
        total = total + torch.where(low + k < high, weight, 0.0)
    return low, high, centre, total


def weights(
    source: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
    centre: torch.Tensor,
    total: torch.Tensor,
    inv_reach: float,
) -> torch.Tensor:
    """The normalized weight of input `source` in the outputs of `bounds` (broadcast),
    as float16 for the tensor cores; a device helper."""
    weight = torch.clamp(1.0 - torch.abs((source - centre + 0.5) * inv_reach), min=0.0)
    used = (source >= low) & (source < high) & (total > 0.0)
    # outputs past the image's edge have no inputs (total 0): divide them by 1, unused
    return torch.where(used, weight / torch.where(used, total, 1.0), 0.0).to(torch.float16)


@tc.kernel
def _antialias_normalize(
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
    inv_h: float,
    inv_w: float,
    pad: float,
    peak: float,
) -> torch.Tensor:
    _, c, h, w = image.size()
    n, _, out_h, out_w = out.size()
    rows = tc.register_tunable("rows", ROWS)
    cols = tc.register_tunable("cols", COLS)
    step = tc.register_tunable("step", STEP)
    sh, sw = h / box_height, w / box_width
    reach_h, reach_w = support(sh), support(sw)
    window = window_rows(rows, sh)
    steps = -(-span(cols, sw) // step)
    taps_h, taps_w = taps(sh), taps(sw)
    size = [c, n, out_h, out_w]  # a tile's channels run next to each other: they share lines
    for tile_c, tile_n, tile_h, tile_w in tc.tile(size, block_size=[1, 1, rows, cols]):
        dst_h = torch.clamp(tile_h.index - box_top, min=0)
        dst_w = torch.clamp(tile_w.index - box_left, min=0)
        top, bottom, centre_h, total_h = bounds(dst_h, scale_h, reach_h, inv_h, h, taps_h)
        left, right, centre_w, total_w = bounds(dst_w, scale_w, reach_w, inv_w, w, taps_w)
        first_row = torch.amin(top)
        first_col = torch.amin(left)
        source_rows = first_row + tc.arange(window)
        # rows past the tile's last window read nothing (their weights are 0)
        needed = source_rows < torch.amax(bottom)
        w_rows = weights(
            source_rows[None, :],
            top[:, None],
            bottom[:, None],
            centre_h[:, None],
            total_h[:, None],
            inv_h,
        )
        acc = tc.zeros([tile_h, tile_w], dtype=torch.float32)
        for s in range(steps):
            source_cols = first_col + s * step + tc.arange(step)
            pixels = tc.load(
                image,
                [tile_n.begin, tile_c.begin, source_rows[:, None], source_cols[None, :]],
                extra_mask=needed[:, None] & (source_cols < torch.amax(right))[None, :],
            )
            pixels = pixels.to(torch.float16)
            partial = torch.matmul(w_rows, pixels).to(torch.float16)
            w_cols = weights(
                source_cols[:, None],
                left[None, :],
                right[None, :],
                centre_w[None, :],
                total_w[None, :],
                inv_w,
            )
            acc = torch.addmm(acc, partial, w_cols)
        inside_h = (tile_h.index >= box_top) & (tile_h.index < box_top + box_height)
        inside_w = (tile_w.index >= box_left) & (tile_w.index < box_left + box_width)
        value = torch.where(inside_h[:, None] & inside_w[None, :], acc, pad) / peak
        value = (value - mean[tile_c][:, None, None]) / std[tile_c][:, None, None]
        out[tile_n, tile_c, tile_h, tile_w] = value.to(out.dtype)
    return out


def _inverse_support(scale: float) -> float:
    return float(1.0 / torch.tensor(support(scale), dtype=torch.float32))


def fits(in_size: Sequence[int], box: list[int]) -> bool:
    """Whether the smallest tile of `_antialias_normalize` reads a window of at most
    WINDOW_LIMIT rows and columns when `in_size` is resized to `box`'s height and width."""
    scales = (in_size[0] / box[2], in_size[1] / box[3])
    return max(window_rows(min(ROW_BLOCKS), s) for s in scales) <= WINDOW_LIMIT


def antialias_normalize(
    image: torch.Tensor,
    mean: torch.Tensor,
    std: torch.Tensor,
    out: torch.Tensor,
    box: list[int],
    pad: float,
    peak: float,
) -> torch.Tensor:
    """NCHW view `image` resized (antialiased bilinear) into `box` = [top, left, height,
    width] of the NCHW `out`, normalized, `pad` around; `fits(...)` must hold."""
    h, w = image.shape[2:]
    scales = [
        float(torch.tensor(size, dtype=torch.float32) / n) for size, n in ((h, box[2]), (w, box[3]))
    ]
    inverses = [_inverse_support(s) for s in scales]
    return _antialias_normalize(image, mean, std, out, *box, *scales, *inverses, pad, peak)
