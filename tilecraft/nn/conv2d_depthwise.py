# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors).
# mypy: disable-error-code="index,list-item,misc,arg-type,operator,union-attr,call-overload"
"""The depthwise stencil of `tilecraft.nn.conv2d` over positions by channels (the kernel for
channels-last images; NCHW ones run over planes, `conv2d_kernels.conv2d_depthwise_planes`).

It tiles the output three ways, one tunable each: tiles of consecutive positions (the
default at strides above 1), tiles of `tile_rows` output rows by a block of columns, or
(`stream_rows`, stride 1 only, the default there) a block of `stream_cols` columns by
`stream_channels` channels that walks down `stream_rows` output rows, keeping the input rows
it has read: each output row then reads one new input row (its `kernel_w` shifted tiles) instead
of `kernel_h`, so a program reads each pixel once per column shift rather than `kernel_h`
times. The walk is unrolled while compiling: the rolling window of input rows is a list of
tiles that lives in registers, loaded `stream_ahead` rows ahead of the row being summed.
"""

from __future__ import annotations

from typing import Any

import torch

import tilecraft as tc
from tilecraft.exc import InvalidConfig
from tilecraft.language.tunables import Choice
from tilecraft.nn.conv2d_kernels import (
    _epilogue,
    _outputs,
    _positions,
    input_at,
)
from tilecraft.runtime.budget import pow2_ceil

# output rows per tile (1: tiles of consecutive positions, the default; more: rows by a
# block of columns)
DEPTHWISE_ROWS = Choice(1, 2, 4, 8)
# output rows a streaming program walks down at stride 1 (0: no streaming), and its block
# of columns by channels: 4 rows of 16 x 32 came within 14% of the best streaming config on
# MobileNetV2's stride-1 layers on an H200 (bf16, batch 32), and 1.27-1.45x faster than
# tiles of positions (benchmarks/RESULTS.md); other strides cannot stream
STREAM_ROWS, NO_STREAM = Choice(4, 0, 8, 16), Choice(0)
STREAM_COLS, STREAM_CHANNELS = Choice(16, 8, 32, 64), Choice(32, 16, 64)
# input rows a streaming program loads ahead of the output row it sums: their loads are in
# flight while it sums and stores that row (stores end the reordering of loads, which might
# read what they write); each costs kernel_w tiles of registers
STREAM_AHEAD = Choice(1, 0, 2)


def check_stream(stream: int, ahead: int, rows: int, strides: tuple[int, int]) -> None:
    """Streaming rows needs stride 1 (one new input row per output row), and replaces the
    tiles of rows; `stream_ahead` means nothing without it. A config asking for more is
    refused, so the tuner skips it."""
    if not stream and ahead != STREAM_AHEAD.values[0]:
        raise InvalidConfig(f"stream_ahead={ahead} needs stream_rows > 0")
    if stream and strides != (1, 1):
        raise InvalidConfig(f"stream_rows={stream} needs stride 1, not {strides}")
    if stream and rows > 1:
        raise InvalidConfig(f"stream_rows={stream} and tile_rows={rows} exclude each other")


def _row_taps(x: torch.Tensor, at: tuple, cols: Any, kernel_w: int, geometry: tuple) -> list:
    """The `kernel_w` shifted tiles `[columns, channels]` of one input row that a row of
    outputs reads (zeros outside the image): `at` is (image, input row, channels), `geometry`
    (stride_w, dil_w, pad_w); a device helper."""
    image, ih, channel = at
    stride_w, dil_w, pad_w = geometry
    taps: list[Any] = []
    for j in range(kernel_w):
        iw = input_at(cols, j, stride_w, dil_w, pad_w)[:, None]
        # a row above the image reads 0 (a negative scalar index alone would wrap around,
        # as in PyTorch; one past the bottom is out of bounds, masked by the load)
        shifted = tc.load(x, [image, channel, ih, iw], extra_mask=(iw >= 0) & (ih >= 0))
        taps = taps + [shifted.to(torch.float32)]
    return taps


def _tap_weights(filters: torch.Tensor, tile_c: Any, taps: int) -> list:
    """The per-channel weights of each tap, `[channels]` each in float32; a device helper."""
    weights: list[Any] = []
    for t in range(taps):
        weights = weights + [filters[tile_c, t].to(torch.float32)]
    return weights


def _row_sum(window: list, taps_w: list, first: int, dil_h: int, kernel_w: int) -> Any:
    """One output row: the taps of the input rows `first`, `first + dil_h`, ... of `window`
    against their per-channel weights `taps_w` (`[channels]` each, by tap); a device helper."""
    acc = window[first][0] * taps_w[0][None, :]
    for t in range(1, len(taps_w)):
        i, j = t // kernel_w, t % kernel_w
        acc = acc + window[first + i * dil_h][j] * taps_w[t][None, :]
    return acc


def _positions_program(
    x: torch.Tensor, filters: torch.Tensor, tiles: tuple, shape: tuple, at: tuple, ends: tuple
) -> None:
    """One program of tiles of consecutive positions: the positions `tiles[0]` (flat over
    images and output rows) by the channels `tiles[1]`. `shape` is (out_h, out_w, kernel_h,
    kernel_w), `at` `input_at`'s (stride, dilation, padding) of rows and of columns, `ends`
    what `_epilogue` takes after the columns."""
    tile_m, tile_c = tiles
    out_h, out_w, kernel_h, kernel_w = shape
    image, oh, ow = _positions(tile_m.index, out_h, out_w)
    acc = tc.zeros([tile_m, tile_c], dtype=torch.float32)
    for i in range(kernel_h):
        ih = input_at(oh, i, *at[0])
        for j in range(kernel_w):
            iw = input_at(ow, j, *at[1])
            shifted = x[image[:, None], tile_c.index[None, :], ih[:, None], iw[:, None]]
            taps_w = filters[tile_c, i * kernel_w + j].to(torch.float32)
            acc = acc + shifted.to(torch.float32) * taps_w[None, :]
    where = [image[:, None], tile_c.index[None, :], oh[:, None], ow[:, None]]
    _epilogue(acc, where, tile_c.index[None, :], *ends)


def _rows_program(
    x: torch.Tensor, filters: torch.Tensor, tiles: tuple, shape: tuple, at: tuple, ends: tuple
) -> None:
    """One program of row tiles: the output rows `tiles[0]` (flat over images) by the
    columns `tiles[1]` by the channels `tiles[2]`; the rest as `_positions_program` takes
    it."""
    tile_r, tile_w, tile_c = tiles
    out_h, _, kernel_h, kernel_w = shape
    image, oh = tile_r.index // out_h, tile_r.index % out_h
    acc = tc.zeros([tile_r, tile_w, tile_c], dtype=torch.float32)
    for i in range(kernel_h):
        ih = input_at(oh, i, *at[0])[:, None, None]
        for j in range(kernel_w):
            iw = input_at(tile_w.index, j, *at[1])[None, :, None]
            shifted = x[image[:, None, None], tile_c.index[None, None, :], ih, iw]
            taps_w = filters[tile_c, i * kernel_w + j].to(torch.float32)
            acc = acc + shifted.to(torch.float32) * taps_w[None, None, :]
    channel = tile_c.index[None, None, :]
    where = [image[:, None, None], channel, oh[:, None, None], tile_w.index[None, :, None]]
    _epilogue(acc, where, channel, *ends)


def _stream_program(
    x: torch.Tensor,
    filters: torch.Tensor,
    tiles: tuple,
    shape: tuple,
    at: tuple,
    walk: tuple[int, int, int],
    ends: tuple,
) -> None:
    """One streaming program: run `tiles[0]` of an image's output rows (`walk`: rows per
    run, runs per image, rows loaded ahead) by the columns `tiles[1]` by the channels
    `tiles[2]`; the rest as `_positions_program` takes it (stride 1)."""
    tile_s, tile_w, tile_c = tiles
    _, _, kernel_h, kernel_w = shape
    (_, dil_h, pad_h), cols_at = at
    stream, runs, ahead = walk
    image, first = tile_s.begin // runs, tile_s.begin % runs * stream
    top = first - pad_h  # the input row the first output row's first taps read
    reach = (kernel_h - 1) * dil_h  # input rows an output row reads past its first
    channel = tile_c.index[None, :]
    weights = _tap_weights(filters, tile_c, kernel_h * kernel_w)
    shifts = (tile_w.index, kernel_w, cols_at)
    window: list[Any] = []  # window[k]: the shifted tiles of input row `top + k`
    for k in range(reach + stream + ahead):  # one more input row per output row
        if k < reach + stream:  # (unrolled: decided while compiling)
            window = window + [_row_taps(x, (image, top + k, channel), *shifts)]
        r = k - reach - ahead  # the output row whose taps are all loaded
        if r >= 0:
            acc = _row_sum(window, weights, r, dil_h, kernel_w)
            where = [image, channel, first + r, tile_w.index[:, None]]
            _epilogue(acc, where, channel, *ends)


@tc.kernel
def conv2d_depthwise(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dil_h: int,
    dil_w: int,
    groups: int,
    out_h: int,
    out_w: int,
    act: int,
    has_bias: bool,
    has_residual: bool,
    channels_last: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A depthwise convolution (one filter per channel) as a direct stencil: each output
    tile of positions by channels sums its taps, each a shifted image tile times a vector of
    per-channel weights; no GEMM. It takes `conv2d_gemm`'s arguments (groups == channels).

    Tunables shape the tiles. `stream_rows` > 0 (stride 1; 4 by default there) has each
    program walk that many output rows of a block of `stream_cols` columns by
    `stream_channels` channels, one row at a time, reading each input row once (see the
    module's docstring), `stream_ahead` input rows ahead of the row it sums. Without it,
    `tile_rows` 1 runs consecutive positions (a tile's rows of the image run on into each
    other); more runs tiles of that many output rows by a block of columns, whose taps read
    a smaller halo of pixels around the tile (fewer pixels re-read from L2 by neighbouring
    tiles, no per-position division). (At stride 1 the default streams, so the default
    config sizes the tiles of positions for no programs: a config that turns streaming off
    there names their block sizes too.)"""
    batch, channels, height, width = x.size()
    kernel_h = tc.specialize(weight.size(2))
    kernel_w = tc.specialize(weight.size(3))
    filters = weight.reshape(channels, kernel_h * kernel_w)  # a view: no copy per call
    out, pre = _outputs(x, channels, out_h, out_w, channels_last, act)
    flags = (act, has_bias, has_residual)
    rows = tc.register_tunable("tile_rows", DEPTHWISE_ROWS)
    unit = stride_h == 1 and stride_w == 1
    stream = tc.register_tunable("stream_rows", STREAM_ROWS if unit else NO_STREAM)
    cols = tc.register_tunable("stream_cols", STREAM_COLS)
    chans = tc.register_tunable("stream_channels", STREAM_CHANNELS)
    ahead = tc.register_tunable("stream_ahead", STREAM_AHEAD)
    check_stream(stream, ahead, rows, (stride_h, stride_w))
    shape = (out_h, out_w, kernel_h, kernel_w)
    at = ((stride_h, dil_h, pad_h), (stride_w, dil_w, pad_w))  # input_at's, rows and columns
    flat = batch * out_h * out_w if rows == 1 and stream == 0 else 0  # (no programs if not)
    for tile_m, tile_c in tc.tile([flat, channels]):
        ends = (out, pre, bias, residual, flags)  # (tensors: grouped on the device)
        _positions_program(x, filters, (tile_m, tile_c), shape, at, ends)
    size = [batch * out_h if rows > 1 else 0, out_w, channels]  # (no programs when flat)
    for tile_r, tile_w, tile_c in tc.tile(size, block_size=[rows, None, None]):
        ends = (out, pre, bias, residual, flags)
        _rows_program(x, filters, (tile_r, tile_w, tile_c), shape, at, ends)
    # streaming: a program per image, run of `stream` output rows, block of columns and of
    # channels (no programs when off)
    runs = -(-out_h // max(stream, 1))
    size = [batch * runs if stream else 0, out_w, channels]
    blocks = [1, min(cols, pow2_ceil(out_w)), min(chans, pow2_ceil(channels))]  # no more than fit
    for tile_s, tile_w, tile_c in tc.tile(size, block_size=blocks):
        walk, ends = (stream, runs, ahead), (out, pre, bias, residual, flags)
        _stream_program(x, filters, (tile_s, tile_w, tile_c), shape, at, walk, ends)
    return out, pre
