# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors;
# `register_tunable` returns an object, the int its Choice picks; device code builds lists).
# mypy: disable-error-code="index,list-item,misc,operator,arg-type,call-overload"
# mypy: disable-error-code="var-annotated,union-attr"
"""The antialiased resize + normalize of `antialias.py`, with each program walking frames.

A resize's weights depend only on the output position, never on the frame or channel:
these kernels compute a tile's weight matrices once and then walk `frames` frames of the
batch (a tunable: more frames, fewer programs) and every channel with them, so the weights,
which cost far more instructions than the products they feed, are paid once per tile of
outputs instead of once per frame and channel. The sums are `antialias.py`'s: `Wv @ X @ Wh`
on the tensor cores, float16 operands (uint8 samples are exact), float32 accumulation, so
results are the same within float16 rounding.

`_planes_frames` reads one channel plane at a time (any layout; for NHWC frames, loads
that step over the other channels, whose bytes the next channel's loads find in cache).
`_packed_frames` reads NHWC frames stored without gaps as rows of interleaved samples, in
16-byte loads, and de-interleaves in its column weights (one column per channel and
output, computed once per tile too).
"""

from __future__ import annotations

import functools

import torch

import tilecraft as tc
from tilecraft.language import Choice
from tilecraft.vision._device import inside
from tilecraft.vision.antialias import (
    ALIGN,
    COLS,
    ROWS,
    SAMPLES,
    STEP,
    _lane_plan,
    antialias_normalize,
    bounds,
    packed_rows,
    scales_and_inverses,
    span,
    support,
    taps,
    window_rows,
)

# frames a program walks with its weights (its tile of the batch)
FRAMES = Choice(16, 1, 2, 4, 8, 32)
# outputs per packed program along a row (each for every channel): its column weights grow
# as the square of it (samples x lanes), and are held through the frames
PACKED_COLS = Choice(8, 16, 32)
# How uint8 samples become float16 operands: "bits", each byte `x` put under the exponent of
# 1024 (the float16 bits 0x6400 | x are 1024 + x, exactly: one integer op per sample, the
# 1024s taken off the row sums once), or "direct" (a conversion, which on the GPU runs on
# the slow pipe at an eighth of the float32 rate).
CONVERT = Choice("bits", "direct")
OFFSET = 1024.0
# How the packed kernel stages a step's samples for the row sums: as the bytes loaded
# ("bytes": each operand element then read back from shared memory on its own), or
# converted to float16 first ("halves": read back as 8x8 matrices, twice the bytes staged).
STAGE = Choice("bytes", "halves")
# Which operand of the column sums the packed kernel's column weights are: "rows" (acc[rows,
# lanes] += partial @ Wc: the weights the second operand, which the compiler reloads from
# shared memory every frame) or "lanes" (acc[lanes, rows] += Wc^T @ partial^T: the first
# operand, which it keeps in registers through the frames); "samples" also transposes the
# row sums (partial^T = X^T @ Wv^T): both products then have 64-row first operands, which
# on Hopper the compiler gives to warpgroup MMAs reading shared memory directly.
ORDER = Choice("rows", "lanes", "samples")


def operand(pixels: torch.Tensor, convert: str) -> torch.Tensor:
    """uint8 `pixels` as exact float16 tensor-core operands: `pixels`, or with "bits"
    `OFFSET + pixels` (`CONVERT`); a device helper."""
    if convert == "bits":
        pixels = (pixels.to(torch.int16) | 0x6400).view(torch.float16)
    else:
        pixels = pixels.to(torch.float16)
    return pixels


def staged(block: torch.Tensor, mask: torch.Tensor, convert: str, stage: str) -> torch.Tensor:
    """The loaded uint8 `block` (read where `mask`) as row-sum operands (`operand`), with
    `stage="halves"` and "bits" converted where the compiler cannot move the conversion
    past the staging in shared memory (the OFFSET only where read: elsewhere the operand is
    0.0, whose weights are 0 too); a device helper."""
    if stage == "halves" and convert == "bits":
        block = (block.to(torch.int16) | (mask.to(torch.int16) * 0x6400)).view(torch.float16)
    else:
        block = operand(block, convert)
    return block


def row_sums_start(w_rows: torch.Tensor, tile: tc.Tile, step: int, convert: str) -> torch.Tensor:
    """The [tile, step] float32 start of the row sums `w_rows @ operand(...)`: minus the
    `OFFSET`s that "bits" operands add (the float16 weights' sums times OFFSET), or 0; a
    device helper."""
    offset = torch.sum(w_rows.to(torch.float32), dim=1) * OFFSET
    if convert != "bits":
        offset = offset * 0.0
    return tc.zeros([tile, step], dtype=torch.float32) - offset[:, None]


def affine_stats(mean: torch.Tensor, std: torch.Tensor, peak: float) -> tuple[list, list]:
    """Each channel's `1 / (peak * std)` and `mean / std`: `(x / peak - mean) / std` as one
    multiply-add per output (within float32 rounding); a device helper, read once."""
    scales = []
    shifts = []
    for k in range(mean.size(0)):
        spread = std[k]
        scales = scales + [1.0 / (spread * peak)]
        shifts = shifts + [mean[k] / spread]
    return scales, shifts


def taps_of(
    dst: torch.Tensor, scale: float, reach: float, inv_reach: float, size: int, count: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """First input, end of inputs, centre and the reciprocal of the weight total (0 for
    none) of the outputs at `dst` (clamped at 0), as `antialias.bounds`; a device helper."""
    low, high, centre, total = bounds(torch.clamp(dst, min=0), scale, reach, inv_reach, size, count)
    return low, high, centre, torch.where(total > 0.0, 1.0 / total, 0.0)


def triangles(source: torch.Tensor, taps: tuple, inv_reach: float) -> torch.Tensor:
    """The normalized float32 weight of inputs `source` ([k, 1]) in outputs with `taps`
    (`taps_of`, each [1, m]): [k, m]. `antialias.axis_weights` in fewer instructions per
    weight (a product by the total's reciprocal, the half pixel added to `source` first),
    equal within float32 rounding; a device helper."""
    low, high, centre, inverse = taps
    distance = torch.abs((source.to(torch.float32) + 0.5 - centre) * inv_reach)
    weight = torch.clamp(1.0 - distance, min=0.0) * inverse
    return torch.where((source >= low) & (source < high), weight, 0.0)


def row_weights(
    dst: torch.Tensor,
    scale: float,
    reach: float,
    inv_reach: float,
    size: int,
    count: int,
    window: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """As `antialias.row_window` (antialiased): the `window` input rows from the first
    one the output rows `dst` read, which are read, and their [len(dst), window] float16
    weights; a device helper."""
    taps = taps_of(dst, scale, reach, inv_reach, size, count)
    source = torch.amin(taps[0]) + tc.arange(window)
    needed = source < torch.amax(taps[1])  # rows past the last window: weight 0, not read
    ends = (taps[0][:, None], taps[1][:, None], taps[2][:, None], taps[3][:, None])
    return source, needed, triangles(source[None, :], ends, inv_reach).to(torch.float16)


def column_steps(
    dst: torch.Tensor,
    scale: float,
    reach: float,
    inv_reach: float,
    size: int,
    count: int,
    step: int,
    steps: int,
) -> tuple[list, list, list]:
    """For each of `steps` steps of `step` input columns from the first one the output
    columns `dst` read: the columns, which are read, and the [step, len(dst)] float16
    weights; a device helper."""
    taps = taps_of(dst, scale, reach, inv_reach, size, count)
    first, end = torch.amin(taps[0]), torch.amax(taps[1])
    ends = (taps[0][None, :], taps[1][None, :], taps[2][None, :], taps[3][None, :])
    columns = []
    used = []
    weights = []
    for s in range(steps):
        source = first + s * step + tc.arange(step)
        columns = columns + [source]
        used = used + [source < end]
        weights = weights + [triangles(source[:, None], ends, inv_reach).to(torch.float16)]
    return columns, used, weights


@functools.lru_cache(maxsize=64)
def divider(c: int, limit: int) -> tuple[int, int]:
    """(magic, shift) with `(x * magic) >> shift == x // c` for 0 <= x < limit, in int32
    without overflow: a division by a constant in two instructions, where the compiler
    emits a dozen for Python's flooring `//` (it cannot tell that x >= 0)."""
    x = torch.arange(limit, dtype=torch.int64)
    for shift in range(30, 0, -1):
        magic = -(-(1 << shift) // c)
        if (limit - 1) * magic < 2**31 and torch.equal((x * magic) >> shift, x // c):
            return magic, shift
    raise ValueError(f"no int32 division by {c} below {limit}")


def lane_steps(
    lanes: tuple, c: int, taps: tuple, divide: tuple, step: int, steps: int
) -> tuple[list, torch.Tensor, list]:
    """A packed program's runs of `step` samples from the first its lanes (`lanes`: each
    lane's channel and output column) read, the end of the samples read, and each run's
    [step, lanes] float16 column weights: each sample's weight in the outputs of the lanes
    of its channel (`taps`: `taps_of` the lanes' columns; `divide`: `divider(c, ...)` for
    every sample read, and 1 / support); a device helper."""
    channel, _ = lanes
    (magic, shift), inv_reach = divide
    first = torch.amin(taps[0]) * c // ALIGN * ALIGN
    end = (torch.amax(taps[1]) * c + ALIGN - 1) // ALIGN * ALIGN
    ends = (taps[0][None, :], taps[1][None, :], taps[2][None, :], taps[3][None, :])
    runs = []
    weights = []
    for s in range(steps):
        sample = first + s * step + tc.arange(step)
        pixel = (sample * magic) >> shift  # sample // c
        weight = triangles(pixel[:, None], ends, inv_reach)
        weight = torch.where((sample - pixel * c)[:, None] == channel[None, :], weight, 0.0)
        runs = runs + [sample]
        weights = weights + [weight.to(torch.float16)]
    return runs, end, weights


# Not measured yet: the configs `bench_vision.py --variants --only "preprocess antialiased"`
# times. Read from the SASS (sm_90, 16 frames of 1080p -> 640x360, lane-instructions per
# output): the packed kernel's loop over frames about 80 (16-byte loads) and its weights
# about 35 more; the planes kernel's loop about 180 (each sample its own load, address
# and shared-memory store).
@tc.kernel(default_config=tc.Config(rows=16, cols=32, step=32, frames=16, num_warps=4))
def _planes_frames(
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
    frames = tc.register_tunable("frames", FRAMES)
    convert = tc.register_tunable("convert", CONVERT)
    sh, sw = h / box_height, w / box_width
    window = window_rows(rows, sh)
    steps = -(-span(cols, sw) // step)
    reach_h, reach_w = support(sh), support(sw)
    taps_h, taps_w = taps(sh), taps(sw)
    for tile_g, tile_h, tile_w in tc.tile([n, out_h, out_w], block_size=[frames, rows, cols]):
        source_rows, needed, w_rows = row_weights(
            tile_h.index - box_top, scale_h, reach_h, inv_h, h, taps_h, window
        )
        start = row_sums_start(w_rows, tile_h, step, convert)
        columns, used, w_cols = column_steps(
            tile_w.index - box_left, scale_w, reach_w, inv_w, w, taps_w, step, steps
        )
        box = inside(tile_h.index - box_top, tile_w.index - box_left, box_height, box_width)
        scales, shifts = affine_stats(mean, std, peak)
        for tile_n in tc.tile(tile_g.begin, tile_g.end, block_size=1):
            for k in range(c):
                acc = tc.zeros([tile_h, tile_w], dtype=torch.float32)
                for s in range(steps):
                    where = [tile_n.begin, k, source_rows[:, None], columns[s][None, :]]
                    pixels = tc.load(image, where, extra_mask=needed[:, None] & used[s][None, :])
                    pixels = operand(pixels, convert)
                    partial = torch.addmm(start, w_rows, pixels).to(torch.float16)
                    acc = torch.addmm(acc, partial, w_cols[s])
                value = torch.where(box, acc, pad) * scales[k] - shifts[k]
                out[tile_n, k, tile_h, tile_w] = value.to(out.dtype)
    return out


def lane_stats(mean: torch.Tensor, std: torch.Tensor, channel: torch.Tensor, peak: float):
    """Each lane's `1 / (peak * std)` and `mean / std` (`affine_stats` for the lanes of a
    packed program, whose channel is `channel`; 0 in lanes past the last channel); a device
    helper."""
    real = channel < mean.size(0)
    spread = tc.load(std, [channel], extra_mask=real, other=1.0)
    shift = tc.load(mean, [channel], extra_mask=real)
    return 1.0 / (spread * peak), shift / spread


def _packed_default(args: tuple) -> tc.Config:
    """16 x 16 output tiles walking 16 frames, at most 72 registers a thread: 7 programs an
    SM, so 1080p -> 640x360 (920 programs) runs in one wave on 132 SMs, where 96 registers
    (5 an SM) take two, the second 40% full (read from the SASS, not yet timed). Past a
    shrink of 4 (4K frames), 8 columns (the column weights, held in registers, grow with
    the scale) and the frames loop software-pipelined (the next frame's samples load
    while this one's sums run)."""
    samples, out, width = args[0], args[3], args[7]
    scale = samples.shape[-1] * samples.element_size() / out.shape[1] / width
    if scale <= 4:
        return tc.Config(rows=16, cols=16, step=64, frames=16, num_warps=4, maxnreg=72)
    return tc.Config(rows=16, cols=8, step=64, frames=16, num_warps=4, range_num_stages=[2])


@tc.kernel(default_config=_packed_default)
def _packed_frames(
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
) -> torch.Tensor:
    # `samples` is (N, H, W * C): NHWC uint8 frames, each row's samples in one line (see
    # antialias._packed_resize_normalize, whose sums this is, less its weights per frame)
    _, h, row = samples.size()
    n, c, out_h, out_w = out.size()
    w = row // c
    rows = tc.register_tunable("rows", ROWS)
    cols = tc.register_tunable("cols", PACKED_COLS)
    step = tc.register_tunable("step", SAMPLES)
    frames = tc.register_tunable("frames", FRAMES)
    convert = tc.register_tunable("convert", CONVERT)
    stage = tc.register_tunable("stage", STAGE)
    order = tc.register_tunable("order", ORDER)
    sh, sw = h / box_height, w / box_width
    window = window_rows(rows, sh)
    lanes, step, steps = _lane_plan(c, cols, sw, step)
    reach_h, reach_w = support(sh), support(sw)
    taps_h, taps_w = taps(sh), taps(sw)
    for tile_g, tile_h, tile_w in tc.tile([n, out_h, out_w], block_size=[frames, rows, cols]):
        source_rows, needed, w_rows = row_weights(
            tile_h.index - box_top, scale_h, reach_h, inv_h, h, taps_h, window
        )
        start = row_sums_start(w_rows, tile_h, step, convert)
        lane = tc.arange(lanes)
        channel = lane // cols
        col = tile_w.begin + lane % cols
        taps_of_lanes = taps_of(col - box_left, scale_w, reach_w, inv_w, w, taps_w)
        divide = (divider(c, row + steps * step + ALIGN), inv_w)
        runs, end, w_cols = lane_steps((channel, col), c, taps_of_lanes, divide, step, steps)
        if order != "rows":
            w_lanes = []
            for s in range(steps):
                w_lanes = w_lanes + [w_cols[s].permute(1, 0)]
            w_rows_t = w_rows.permute(1, 0)
            start_t = start.permute(1, 0)
        box = inside(tile_h.index - box_top, col - box_left, box_height, box_width)
        scale, shift = lane_stats(mean, std, channel, peak)
        for tile_n in tc.tile(tile_g.begin, tile_g.end, block_size=1):
            if order != "rows":
                acc = tc.zeros([lanes, tile_h], dtype=torch.float32)
            else:
                acc = tc.zeros([tile_h, lanes], dtype=torch.float32)
            for s in range(steps):
                where = [tile_n.begin, source_rows[:, None], runs[s][None, :]]
                mask = needed[:, None] & (runs[s] < end)[None, :]
                block = staged(tc.load(samples, where, extra_mask=mask), mask, convert, stage)
                if order == "samples":  # both products with 64-row first operands
                    partial_t = torch.addmm(start_t, block.permute(1, 0), w_rows_t)
                    acc = torch.addmm(acc, w_lanes[s], partial_t.to(torch.float16))
                else:
                    partial = torch.addmm(start, w_rows, block).to(torch.float16)
                    if order == "lanes":
                        acc = torch.addmm(acc, w_lanes[s], partial.permute(1, 0))
                    else:
                        acc = torch.addmm(acc, partial, w_cols[s])
            if order != "rows":
                acc = acc.permute(1, 0)
            value = torch.where(box, acc, pad) * scale[None, :] - shift[None, :]
            index = [tile_n.begin, channel[None, :], tile_h.index[:, None], col[None, :]]
            tc.store(out, index, value.to(out.dtype), extra_mask=(channel < c)[None, :])
    return out


# Which kernel `resize_normalize` runs: "packed" (NHWC frames stored without gaps; other
# frames take "planes"), "planes" (one channel plane at a time), or "tile" (antialias.py's
# kernel, one program per frame and channel and tile, weights computed in each).
KERNEL = "packed"


def resize_normalize(
    image: torch.Tensor,
    mean: torch.Tensor,
    std: torch.Tensor,
    out: torch.Tensor,
    box: list[int],
    pad: float,
    peak: float,
) -> torch.Tensor:
    """NCHW view `image` (uint8) resized (antialiased bilinear) into `box` = [top, left,
    height, width] of the NCHW `out`, normalized, `pad` around, by the kernel `KERNEL`
    names; `antialias.fits(...)` must hold."""
    if KERNEL == "tile":
        return antialias_normalize(image, mean, std, out, box, pad, peak)
    args = (mean, std, out, *box, *scales_and_inverses(image.shape[2:], box), pad, peak)
    samples = packed_rows(image) if KERNEL == "packed" else None
    if samples is not None:
        return _packed_frames(samples, *args)
    return _planes_frames(image, *args)
