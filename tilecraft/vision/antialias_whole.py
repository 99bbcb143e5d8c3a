# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, tiles index tensors; device code builds lists;
# `register_tunable` returns an object, the int its Choice picks).
# mypy: disable-error-code="index,list-item,misc,operator,arg-type,call-overload"
# mypy: disable-error-code="var-annotated,union-attr"
"""The antialiased resize + normalize of `antialias_batch.py` for shrinks by whole factors.

When the frames are `f_h` and `f_w` times the box (1080p -> 640x360: 3; 4K -> 1080p: 2),
every output reads the same taps, with the same triangle weights: for a factor `f`, output
`j` reads inputs `f * j + d` with weight `2f - |2d + 1 - f|` (d from `-f // 2` to
`f + (f - 1) // 2`, e.g. 1 2 3 2 1 for f = 3), normalized by their sum, which is smaller
only at the image's first and last outputs, whose taps past the edge are dropped. So this
kernel computes no weights: it sums each output's taps with small integer weights, exact
in int32 (at most 255 * 32 * 32), and divides once by the total (per row and column,
computed once per program), where `antialias_batch`'s kernels spend most of their
instructions making float16 weight matrices and the products that apply them.

A program covers a tile of output rows x columns, every channel of each column in its
lanes, and walks `frames` frames. Taps past the image's edges read the edge pixel (their
index clamped: no mask in the loop) with weight 0. Shrinks past MAX_FACTOR (more than 8 x 8
taps, unrolled) and frames not NHWC uint8 without gaps take `antialias_batch`'s kernels.
"""

from __future__ import annotations

import functools

import torch

import tilecraft as tc
from tilecraft.language import Choice
from tilecraft.vision._device import inside
from tilecraft.vision.antialias import packed_rows
from tilecraft.vision.antialias_batch import lane_stats

# the largest factor taken (8 taps per axis); beyond, the tap loops would unroll too far
MAX_FACTOR = 4
WHOLE_ROWS = Choice(16, 8, 32, 4)  # output rows per program
WHOLE_COLS = Choice(16, 8, 32, 64)  # output columns per program, each for every channel
WHOLE_FRAMES = Choice(1, 2, 4, 8, 16)  # frames a program walks
# How lanes hold a tile's outputs: "pixels" (a pixel's channels next to each other: a
# warp's tap loads read one short run of bytes) or "channels" (a channel's columns next to
# each other: its stores write runs of each output plane).
LANE_ORDER = Choice("pixels", "channels")
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


def _default(args: tuple) -> tc.Config:
    """16 x 16 outputs (every channel) a program, one frame: nothing to share between frames
    but a few indices (not yet timed: `bench_vision.py --variants`)."""
    return tc.Config(rows=16, cols=16, frames=1, order="pixels", num_warps=4)


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
    depth = 1 << (c - 1).bit_length()  # lanes per column: channels, to a power of two
    for tile_g, tile_h, tile_w in tc.tile([n, out_h, out_w], block_size=[frames, rows, cols]):
        lane = tc.arange(cols * depth)
        if order == "pixels":
            channel, col = lane % depth, tile_w.begin + lane // depth
        else:
            channel, col = lane // cols, tile_w.begin + lane % cols
        # rows along the first axis, lanes along the second: every tap's index and weight
        # broadcasts
        dst_rows = (tile_h.index - box_top)[:, None]
        at_rows, w_rows, total_rows = axis_taps(dst_rows, fh, h, first_h, weights_h)
        dst_cols = (col - box_left)[None, :]
        at_cols, w_cols, total_cols = axis_taps(dst_cols, fw, w, first_w, weights_w)
        sample_of = []
        for t in range(len(weights_w)):
            sample_of = sample_of + [at_cols[t] * c + torch.clamp(channel, max=c - 1)[None, :]]
        scale, shift = lane_stats(mean, std, channel, peak)
        total = total_rows.to(torch.float32) * total_cols.to(torch.float32)
        norm = scale[None, :] / total
        box = inside(tile_h.index - box_top, col - box_left, box_height, box_width)
        border = pad * scale - shift
        for tile_n in tc.tile(tile_g.begin, tile_g.end, block_size=1):
            acc = tc.zeros([tile_h, cols * depth], dtype=torch.int32)
            for v in range(len(weights_h)):
                part = tc.zeros([tile_h, cols * depth], dtype=torch.int32)
                for t in range(len(weights_w)):
                    where = [tile_n.begin, at_rows[v], sample_of[t]]
                    part = part + tc.load(samples, where).to(torch.int32) * w_cols[t]
                acc = acc + part * w_rows[v]
            value = torch.where(box, acc.to(torch.float32) * norm - shift[None, :], border)
            index = [tile_n.begin, channel[None, :], tile_h.index[:, None], col[None, :]]
            mask = (channel < c)[None, :] & (col < out_w)[None, :]
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
