# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors;
# `register_tunable` returns an object, the int its Choice picks).
# mypy: disable-error-code="index,list-item,misc,operator,arg-type,call-overload"
"""Antialiased resize + normalize as two small matrix products per tile of outputs.

Each output of an antialiased (`F.interpolate(..., antialias=True)`) resize is a weighted
sum of a window of inputs, separably: `out = Wv @ X @ Wh`, where `X` is the window of the
image a tile of outputs reads and `Wv`, `Wh` hold each output's normalized triangle
weights (mostly zeros). The kernel computes the weight matrices from indices, loads the
window once (uint8 values are exact in float16) and lets the tensor cores do the sums: no
output re-reads its taps one gathered load at a time, and no intermediate image is made.
Float16 weights and partial sums keep results within about 0.2 of a uint8 level.

Frames stored NHWC without gaps (what decoders and `torch.from_numpy` give) take the
packed kernel: it reads runs of each row's samples, all channels interleaved, in 16-byte
loads, and folds the de-interleaving into the column weights (one column per channel and
output). Other layouts take one channel per program, whose loads gather. The packed
kernel also does plain bilinear resizing (`preprocess` without antialiasing) to float32
accuracy: each float32 weight is split into two float16 halves (three products instead of
one), except where the weights are eighths, exact in float16 (1080p -> 360p).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

import tilecraft as tc
from tilecraft.language import Choice
from tilecraft.vision._device import bilinear_taps, inside, uint8_levels
from tilecraft.vision.boxes import box_scales, float32_ratio
from tilecraft.vision.memory import constant

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


def axis_bounds(
    dst: torch.Tensor,
    scale: float,
    reach: float,
    inv_reach: float,
    size: int,
    count: int,
    antialias: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """First input and end of the inputs of the outputs at `dst` (>= 0), and what their
    weights need: `bounds`'s centre and total (antialiased), or the second tap's weight
    twice (plain bilinear: two taps, `_device.bilinear_taps`); a device helper."""
    if antialias:
        low, high, centre, total = bounds(dst, scale, reach, inv_reach, size, count)
    else:
        low, last, centre = bilinear_taps(dst, scale, size)
        high, total = last + 1, centre
    return low, high, centre, total


def axis_weights(
    source: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
    centre: torch.Tensor,
    total: torch.Tensor,
    inv_reach: float,
    antialias: bool,
) -> torch.Tensor:
    """The float32 weight of input `source` in the outputs of `axis_bounds` (broadcast);
    a device helper."""
    if antialias:
        weight = torch.clamp(1.0 - torch.abs((source - centre + 0.5) * inv_reach), min=0.0)
        used = (source >= low) & (source < high) & (total > 0.0)
        weight = torch.where(used, weight / torch.where(used, total, 1.0), 0.0)
    else:  # `centre` is the second tap's weight; at the last pixel both taps are one
        weight = torch.where(source == low, 1.0 - centre, 0.0)
        weight = weight + torch.where(source == high - 1, centre, 0.0)
    return weight


def halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`x` (float32) as the sum of two float16 values, the second the first's rounding
    error: products of such pairs keep about 22 bits; a device helper."""
    high = x.to(torch.float16)
    return high, (x - high.to(torch.float32)).to(torch.float16)


def product(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, exact: bool) -> torch.Tensor:
    """`acc + a @ b` (float32 `a`, `b`) on the tensor cores: in float16, or with `exact`
    as three float16 products of the halves (float32 accuracy); a device helper."""
    a_high, a_low = halves(a)
    b_high, b_low = halves(b)
    acc = tc.dot(a_high, b_high, acc=acc)
    if exact:
        acc = tc.dot(a_high, b_low, acc=acc)
        acc = tc.dot(a_low, b_high, acc=acc)
    return acc


def row_window(
    dst: torch.Tensor,
    scale: float,
    reach: float,
    inv_reach: float,
    size: int,
    count: int,
    window: int,
    antialias: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The `window` input rows from the first one that the output rows `dst` read, which
    of them are read, and the [len(dst), window] float32 weights (antialiased or plain
    bilinear, as `axis_weights`); a device helper."""
    top, bottom, centre, total = axis_bounds(
        torch.clamp(dst, min=0), scale, reach, inv_reach, size, count, antialias
    )
    source = torch.amin(top) + tc.arange(window)
    needed = source < torch.amax(bottom)  # rows past the last window: weight 0, not read
    ends = (top[:, None], bottom[:, None], centre[:, None], total[:, None])
    w_rows = axis_weights(source[None, :], *ends, inv_reach, antialias)
    return source, needed, w_rows


def boxed(
    acc: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, box: tuple, pad: float, peak: float
) -> torch.Tensor:
    """`acc` at output `rows` x `cols`, `pad` outside `box` (top, left, height, width), over
    `peak`; a device helper."""
    top, left, height, width = box
    return torch.where(inside(rows - top, cols - left, height, width), acc, pad) / peak


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
        source_rows, needed, w_rows = row_window(
            tile_h.index - box_top, scale_h, reach_h, inv_h, h, taps_h, window
        )
        w_rows = w_rows.to(torch.float16)
        dst_w = torch.clamp(tile_w.index - box_left, min=0)
        left, right, centre_w, total_w = bounds(dst_w, scale_w, reach_w, inv_w, w, taps_w)
        first_col = torch.amin(left)
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
            ends = (left[None, :], right[None, :], centre_w[None, :], total_w[None, :])
            w_cols = axis_weights(source_cols[:, None], *ends, inv_w, True).to(torch.float16)
            acc = torch.addmm(acc, partial, w_cols)
        box = (box_top, box_left, box_height, box_width)
        value = boxed(acc, tile_h.index, tile_w.index, box, pad, peak)
        value = (value - mean[tile_c][:, None, None]) / std[tile_c][:, None, None]
        out[tile_n, tile_c, tile_h, tile_w] = value.to(out.dtype)
    return out


# samples a packed kernel's row loads start and end at multiples of (16 bytes of uint8)
ALIGN = 16
LANE_COLS = Choice(32, 16, 64)  # outputs per program along a row, each for every channel
SAMPLES = Choice(64, 32, 128)  # samples (pixels x channels) per step
MAX_STEPS = 16  # a wider step where a program's row runs would take more (unrolled) steps


def _lane_plan(c: int, cols: int, sw: float, step: int) -> tuple[int, int, int]:
    """A packed program's lanes (a column per channel, a power of two, and output) and its
    step (widened where the row runs would take more than MAX_STEPS: steps are unrolled)
    and number of steps along a row."""
    lanes = (1 << (c - 1).bit_length()) * cols
    run = c * span(cols, sw) + 2 * ALIGN  # the samples of a row a program may read
    step = max(step, 1 << (-(-run // MAX_STEPS) - 1).bit_length())
    return lanes, step, -(-run // step)


def _row_sums(
    samples: torch.Tensor,
    where: tuple,
    sample: torch.Tensor,
    w_rows: torch.Tensor,
    exact: bool,
) -> torch.Tensor:
    """`Wv @ X` of one step of a packed program: the window's rows of `sample` (of image
    `where[0]`, rows `where[1]` read where `where[2]`, samples before `where[3]`) weighted
    by `w_rows` (float32, split in float16 halves with `exact`); a device helper."""
    image, source_rows, needed, end = where
    block = tc.load(
        samples,
        [image, source_rows[:, None], sample[None, :]],
        extra_mask=needed[:, None] & (sample < end)[None, :],
    )
    # uint8 samples are exact in float16: only the weights need two halves
    block = block.to(torch.float16)
    w_high, w_low = halves(w_rows)
    partial = tc.dot(w_high, block)
    if exact:
        partial = tc.dot(w_low, block, acc=partial)
    return partial


def _lane_weights(
    sample: torch.Tensor,
    c: int,
    channel: torch.Tensor,
    ends: tuple,
    inv_w: float,
    antialias: bool,
) -> torch.Tensor:
    """The column weights of one step of a packed program: each sample's weight in the
    output of each lane of its channel (`ends`: `axis_bounds` of the lanes); a device
    helper."""
    left, right, centre_w, total_w = ends
    lane_ends = (left[None, :], right[None, :], centre_w[None, :], total_w[None, :])
    w_cols = axis_weights((sample // c)[:, None], *lane_ends, inv_w, antialias)
    return torch.where((sample % c)[:, None] == channel[None, :], w_cols, 0.0)


def _store_lanes(
    value: torch.Tensor,
    out: torch.Tensor,
    where: tuple,
    channel: torch.Tensor,
    stats: tuple,
    levels: bool,
) -> None:
    """A packed program's `value` normalized by `stats` (mean, std) per channel (or rounded
    to uint8 `levels`) and stored to `out` at `where` (image, rows, columns) in the lanes
    of real channels; a device helper."""
    mean, std = stats
    real = channel < out.size(1)
    shift = tc.load(mean, [channel], extra_mask=real)
    spread = tc.load(std, [channel], extra_mask=real, other=1.0)
    value = (value - shift[None, :]) / spread[None, :]
    if levels:  # a uint8 image: no statistics (0 and 1), rounded and saturated
        value = uint8_levels(value)
    image, rows, col = where
    index = [image, channel[None, :], rows[:, None], col[None, :]]
    tc.store(out, index, value.to(out.dtype), extra_mask=real[None, :])


@tc.kernel
def _packed_resize_normalize(
    samples: torch.Tensor,
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
    antialias: bool,
    exact: bool,
    levels: bool,
) -> torch.Tensor:
    # `samples` is (N, H, W * C), an NHWC uint8 batch with each row's values in one line: a
    # program reads whole runs of a row (every channel at once, in wide loads), and the
    # column weights pick each channel's samples, so the image is read without gathers.
    # Antialiased or plain bilinear weights; `exact` products keep float32 accuracy.
    _, h, row = samples.size()
    n, c, out_h, out_w = out.size()
    w = row // c
    rows = tc.register_tunable("rows", ROWS)
    cols = tc.register_tunable("cols", LANE_COLS)
    step = tc.register_tunable("step", SAMPLES)
    sh, sw = h / box_height, w / box_width
    reach_h, reach_w = support(sh), support(sw)
    window = window_rows(rows, sh)
    lanes, step, steps = _lane_plan(c, cols, sw, step)
    taps_h, taps_w = taps(sh), taps(sw)
    for tile_n, tile_h, tile_w in tc.tile([n, out_h, out_w], block_size=[1, rows, cols]):
        source_rows, needed, w_rows = row_window(
            tile_h.index - box_top, scale_h, reach_h, inv_h, h, taps_h, window, antialias
        )
        lane = tc.arange(lanes)
        channel = lane // cols
        col = tile_w.begin + lane % cols
        dst_w = torch.clamp(col - box_left, min=0)
        ends = axis_bounds(dst_w, scale_w, reach_w, inv_w, w, taps_w, antialias)
        first = torch.amin(ends[0]) * c // ALIGN * ALIGN
        end = (torch.amax(ends[1]) * c + ALIGN - 1) // ALIGN * ALIGN
        acc = tc.zeros([tile_h, lanes], dtype=torch.float32)
        for s in range(steps):
            sample = first + s * step + tc.arange(step)
            window_at = (tile_n.begin, source_rows, needed, end)
            partial = _row_sums(samples, window_at, sample, w_rows, exact)
            w_cols = _lane_weights(sample, c, channel, ends, inv_w, antialias)
            acc = product(partial, w_cols, acc, exact)
        box = (box_top, box_left, box_height, box_width)
        value = boxed(acc, tile_h.index, col, box, pad, peak)
        _store_lanes(value, out, (tile_n.begin, tile_h.index, col), channel, (mean, std), levels)
    return out


# Off by default: on the H200 (benchmarks/RESULTS.md, bench_vision) the packed kernel ran
# 3-4x slower than the kernels it replaces (16 frames of 1080p to 640x360: bilinear
# preprocess 0.81 ms against the gathering kernel's 0.21, antialiased 1.72 against one
# channel per program's 0.59). Kept, tested, for the layouts and tiles to be tuned later.
PACKED = False


def inverse_support(scale: float) -> float:
    """`1 / support(scale)` rounded to float32, as PyTorch's antialiased kernels take it."""
    return float32_ratio(1.0, support(scale))


def scales_and_inverses(in_size: Sequence[int], box: list[int]) -> tuple[float, ...]:
    """The kernels' `scale_h, scale_w, inv_h, inv_w` for resizing `in_size` (height,
    width) into `box`."""
    scales = box_scales(in_size, box)
    return (*scales, *(inverse_support(s) for s in scales))


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
    args = (mean, std, out, *box, *scales_and_inverses(image.shape[2:], box), pad, peak)
    samples = packed_rows(image) if PACKED else None
    if samples is not None:
        return _packed_resize_normalize(samples, *args, True, False, False)
    return _antialias_normalize(image, *args)


def bilinear_normalize(
    image: torch.Tensor,
    mean: torch.Tensor,
    std: torch.Tensor,
    out: torch.Tensor,
    box: list[int],
    pad: float,
    peak: float,
) -> torch.Tensor | None:
    """As `antialias_normalize`, with plain bilinear weights and float32 accuracy, for
    uint8 frames stored NHWC without gaps; None for others (they take the gathering
    kernel) or for shrinking too far."""
    samples = packed_rows(image) if PACKED and image.dtype == torch.uint8 else None
    if samples is None or not fits(image.shape[2:], box):
        return None
    scales = box_scales(image.shape[2:], box)
    # weights in eighths (integer and half scales: 1080p -> 360p) are exact in float16, and
    # so are the row sums of uint8 samples they give: one product per step suffices
    exact = not in_eighths(image.shape[2:], box)
    args = (mean, std, out, *box, *scales, 1.0, 1.0, pad, peak, False, exact, False)
    return _packed_resize_normalize(samples, *args)


def resize_levels(image: torch.Tensor, out: torch.Tensor, antialias: bool) -> torch.Tensor | None:
    """The uint8 NCHW view `image` resized (bilinear, antialiased or not) into the uint8
    NCHW view `out` (any layout), rounded half to even and saturated, to float32 accuracy
    (the halves' products); None where `image` is not NHWC without gaps or the shrink too
    far (the other kernels do those)."""
    samples = packed_rows(image) if PACKED and image.dtype == out.dtype == torch.uint8 else None
    box = [0, 0, *out.shape[2:]]
    if samples is None or not fits(image.shape[2:], box):
        return None
    exact = antialias or not in_eighths(image.shape[2:], box)
    c = image.shape[1]
    stats = (constant([0.0] * c, image.device), constant([1.0] * c, image.device))
    geometry = scales_and_inverses(image.shape[2:], box)
    args = (*stats, out, *box, *geometry, 0.0, 1.0, antialias, exact, True)
    return _packed_resize_normalize(samples, *args)


def in_eighths(in_size: Sequence[int], box: list[int]) -> bool:
    """Whether every bilinear weight of resizing `in_size` into `box` is in eighths."""
    return eighths(in_size[0], box[2]) and eighths(in_size[1], box[3])


@functools.lru_cache(maxsize=64)
def eighths(size: int, length: int) -> bool:
    """Whether every bilinear weight of resizing `size` inputs to `length` outputs (as
    float32 computes them) is a multiple of 1/8."""
    dst = torch.arange(length, dtype=torch.float32)
    src = torch.clamp((dst + 0.5) * float32_ratio(size, length) - 0.5, min=0.0)
    frac = src - src.floor()
    return bool(torch.equal(frac * 8, (frac * 8).floor()))


def packed_rows(image: torch.Tensor) -> torch.Tensor | None:
    """The NCHW view `image` as (N, H, W * C) when its memory is NHWC without gaps."""
    n, c, h, w = image.shape
    packed = (h * w * c, 1, w * c, c)
    for size, stride, want in zip(image.shape, image.stride(), packed, strict=True):
        if size > 1 and stride != want:  # (the stride of a dim of 1 says nothing)
            return None
    return image.permute(0, 2, 3, 1).reshape(n, h, w * c)  # a view
