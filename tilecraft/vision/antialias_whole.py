# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, tiles index tensors; device code builds lists;
# `register_tunable` returns an object, the int its Choice picks).
# mypy: disable-error-code="index,list-item,misc,operator,arg-type,call-overload"
# mypy: disable-error-code="var-annotated,union-attr"
"""The antialiased resize + normalize of `antialias_batch.py` for shrinks by whole factors.

When the frames are `f_h` and `f_w` times the box (1080p -> 640x360: 3; 4K -> 1080p: 2),
every output reads the same taps, with the same triangle weights: for a factor `f`, output
`j` reads inputs `f * j + d` with weight `2f - |2d + 1 - f|` (`2f - f % 2` taps from
`d = -(f // 2)`: 2 4 6 4 2 for f = 3), normalized by their sum, which is smaller
only at the image's first and last outputs, whose taps past the edge are dropped. So this
kernel computes no weights: it sums each output's taps with small integer weights, exact
in int32 (at most 255 * 32 * 32), and divides once by the total (per row and column,
computed once per program), where `antialias_batch`'s kernels spend most of their
instructions making float16 weight matrices and the products that apply them.

A program covers a strip of output rows x columns, every channel of each column in its
lanes, the rows one after another: each input row's column sums are made once and shared
by the output rows that read it (16.5 byte loads an output for a factor of 3, where reading
each output's 5 x 5 taps takes 25 and ran 4-12x slower on the H200).
Taps past the image's edges read the edge pixel (their index clamped: no mask in the
loop) with weight 0. Shrinks past MAX_FACTOR (more than 8 x 8 taps, unrolled) and frames
not NHWC uint8 without gaps take `antialias_batch`'s kernels.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

import tilecraft as tc
from tilecraft.language import Choice
from tilecraft.vision.antialias import packed_rows
from tilecraft.vision.antialias_batch import lane_stats

# the largest factor taken (8 taps per axis); beyond, the tap loops would unroll too far
MAX_FACTOR = 4
WHOLE_ROWS = Choice(8, 4, 16, 32)  # output rows per program
WHOLE_COLS = Choice(16, 8, 32, 64, 128)  # output columns per program, each for every channel
WHOLE_FRAMES = Choice(1, 2, 4, 8, 16)  # frames a program walks
# How lanes hold a tile's outputs: "pixels" (a pixel's channels next to each other: a
# warp's tap loads read one short run of bytes), "channels" (a channel's columns next to
# each other: its stores write runs of each output plane), or "loop" (a lane per column,
# the channels one after another: no idle lanes where 3 channels take 4).
LANE_ORDER = Choice("pixels", "channels", "loop")
# Whether whole-factor shrinks take this kernel (False: `antialias_batch`'s, to compare).
ENABLED = True


@functools.lru_cache(maxsize=16)
def tap_weights(factor: int) -> tuple[int, tuple[int, ...]]:
    """The offset `d` of the first input an output `j` reads (input `factor * j + d`) and
    the integer triangle weights of its inputs from there: torchvision's antialiased
    weights `1 - |d + 0.5 - factor / 2| / factor`, times `2 * factor`."""
    weights = {d: 2 * factor - abs(2 * d + 1 - factor) for d in range(-factor, 2 * factor)}
    used = [d for d, weight in weights.items() if weight > 0]
    return used[0], tuple(weights[d] for d in used)


def whole_factors(in_size: tuple[int, ...], box: list[int]) -> tuple[int, int] | None:
    """The factors by which `in_size` (height, width) shrinks to `box`'s height and width,
    when both are whole and at most MAX_FACTOR; else None."""
    factors = (in_size[0] // box[2], in_size[1] // box[3])
    whole = all(f * b == s for f, b, s in zip(factors, box[2:], in_size, strict=True))
    return factors if whole and max(factors) <= MAX_FACTOR else None


def axis_taps(
    dst: torch.Tensor, factor: int, size: int, first: int, weights: tuple
) -> tuple[list, list, torch.Tensor]:
    """For the outputs at `dst` (clamped into 0..size/factor-1; any shape) along an axis of
    `size` inputs: each tap's input (clamped into the image), its weight (an int, or where a tap
    may fall past the edge the int where it does not and 0 where it does) and the total
    weight; a device helper."""
    base = factor * torch.clamp(dst, 0, size // factor - 1)
    inputs = []
    taps = []
    total = dst * 0
    for t in range(len(weights)):
        source = base + (first + t)
        weight = weights[t]
        if first + t < 0 or first + t >= factor:  # only the edge outputs lose this tap
            weight = ((source >= 0) & (source < size)).to(torch.int32) * weights[t]
            source = torch.clamp(source, 0, size - 1)
        inputs = inputs + [source]
        taps = taps + [weight]
        total = total + weight
    return inputs, taps, total


def line_taps(dst: Any, factor: int, size: int, first: int, weights: tuple) -> tuple[list, Any]:
    """`axis_taps`' weights and total for one output at `dst` (inside the image): a scalar on
    the device, an int in eager mode, through min and max, which both understand; a device
    helper."""
    taps = []
    total = 0
    for t in range(len(weights)):
        weight = weights[t]
        if first + t < 0 or first + t >= factor:  # 1 where the tap lies inside, else 0
            source = factor * dst + first + t
            weight = min(max(source + 1, 0), 1) * min(max(size - source, 0), 1) * weights[t]
        taps = taps + [weight]
        total = total + weight
    return taps, total


def row_sums(samples: torch.Tensor, where: tuple, sample_of: list, w_cols: list) -> torch.Tensor:
    """The int32 sums of the column taps (`sample_of`, weighted by `w_cols`) of frame
    `where[0]`'s input rows `where[1]` (a scalar, or [rows, 1]): [1 or rows, lanes]; a device
    helper."""
    frame, source = where
    part = tc.load(samples, [frame, source, sample_of[0]]).to(torch.int32) * w_cols[0]
    for t in range(1, len(w_cols)):
        part = part + tc.load(samples, [frame, source, sample_of[t]]).to(torch.int32) * w_cols[t]
    return part


def _default(args: tuple) -> tc.Config:
    """Strips of 4 output rows by 128 columns, a lane per column with the channels one after
    another (`order="loop"`), 4 warps, one frame a program: the fastest of 16 layouts timed
    on the H200 (1080p -> 640x360, 16 frames: 0.067 ms, against 0.091 for 8 x 32 strips with
    a pixel's channels in neighbouring lanes, and 0.14 for two frames a program)."""
    return tc.Config(rows=4, cols=128, frames=1, order="loop", num_warps=4)


@tc.kernel(default_config=_default)
def _whole_frames(
    samples: torch.Tensor,
    mean: torch.Tensor,
    std: torch.Tensor,
    out: torch.Tensor,
    box_top: int,
    box_left: int,
    box_height: int,
    box_width: int,
    pad: float,
    peak: float,
) -> torch.Tensor:
    # `samples` is (N, H, W * C): NHWC uint8 frames, each row's samples in one line
    _, h, row = samples.size()
    n, c, out_h, out_w = out.size()
    w = row // c
    rows = tc.register_tunable("rows", WHOLE_ROWS)
    cols = tc.register_tunable("cols", WHOLE_COLS)
    frames = tc.register_tunable("frames", WHOLE_FRAMES)
    order = tc.register_tunable("order", LANE_ORDER)
    fh, fw = h // box_height, w // box_width
    first_h, weights_h = tap_weights(fh)
    first_w, weights_w = tap_weights(fw)
    # lanes per column: every channel (their count to a power of two), or one ("loop": the
    # program's channels one after another)
    depth = 1 if order == "loop" else 1 << (c - 1).bit_length()
    for tile_g, tile_h, tile_w in tc.tile([n, out_h, out_w], block_size=[frames, rows, cols]):
        lane = tc.arange(cols * depth)
        if order == "pixels":
            channel, col = lane % depth, tile_w.begin + lane // depth
        elif order == "channels":
            channel, col = lane // cols, tile_w.begin + lane % cols
        else:
            channel, col = lane * 0, tile_w.begin + lane
        # lanes along the second axis (rows along the first): every index and weight
        # broadcasts
        at_cols, w_cols, total_cols = axis_taps(
            (col - box_left)[None, :], fw, w, first_w, weights_w
        )
        cols_in = ((col >= box_left) & (col - box_left < box_width))[None, :]
        # each output row's tap weights and total (scalars), its rows read from the strip
        w_strip = []
        inverses = []
        for r in range(rows):
            w_r, total_r = line_taps(tile_h.begin + r - box_top, fh, h, first_h, weights_h)
            w_strip = w_strip + w_r
            inverses = inverses + [1.0 / max(total_r, 1)]  # (0 outside the image)
        top = fh * (tile_h.begin - box_top) + first_h  # the strip's first input row
        for k in range(c if order == "loop" else 1):
            plane = channel + k
            sample_of = []
            for t in range(len(weights_w)):
                sample_of = sample_of + [at_cols[t] * c + torch.clamp(plane, max=c - 1)[None, :]]
            scale, shift = lane_stats(mean, std, plane, peak)
            norm = scale[None, :] / total_cols.to(torch.float32)
            border = (pad * scale - shift)[None, :]
            mask = (plane < c)[None, :] & (col < out_w)[None, :]
            for tile_n in tc.tile(tile_g.begin, tile_g.end, block_size=1):
                sums = []  # each input row of the strip: its column sums, made once
                for q in range(fh * (rows - 1) + len(weights_h)):
                    source = min(max(top + q, 0), h - 1)
                    sums = sums + [row_sums(samples, (tile_n.begin, source), sample_of, w_cols)]
                for r in range(rows):
                    acc = sums[fh * r] * w_strip[r * len(weights_h)]
                    for t in range(1, len(weights_h)):
                        acc = acc + sums[fh * r + t] * w_strip[r * len(weights_h) + t]
                    i = tile_h.begin + r  # rows past out_h are not written
                    box = cols_in & (i >= box_top) & (i - box_top < box_height)
                    value = acc.to(torch.float32) * (norm * inverses[r]) - shift[None, :]
                    value = torch.where(box, value, border)
                    index = [tile_n.begin, plane[None, :], i, col[None, :]]
                    tc.store(out, index, value.to(out.dtype), extra_mask=mask)
    return out


def resize_normalize(
    image: torch.Tensor,
    mean: torch.Tensor,
    std: torch.Tensor,
    out: torch.Tensor,
    box: list[int],
    pad: float,
    peak: float,
) -> torch.Tensor | None:
    """NCHW view `image` (uint8, NHWC memory without gaps) resized (antialiased bilinear)
    into `box` = [top, left, height, width] of the NCHW `out` by whole factors, normalized,
    `pad` around; None where the factors are not whole (or too large) or the frames not
    packed (`antialias_batch` resizes those)."""
    if not ENABLED or image.dtype != torch.uint8:
        return None
    samples = packed_rows(image)
    if samples is None or whole_factors(tuple(image.shape[2:]), box) is None:
        return None
    return _whole_frames(samples, mean, std, out, *box, pad, peak)
