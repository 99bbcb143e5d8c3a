# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors;
# `register_tunable` returns an object, the int its Choice picks; device code builds lists
# with `[]`, as annotated assignments are host-only syntax).
# mypy: disable-error-code="index,list-item,misc,operator,var-annotated,call-overload,arg-type"
"""Filters: separable Gaussian blur, box filter, Sobel.

Borders reflect without repeating the edge pixel (`...cba|abcd|dcb...`): torch's
`F.pad(mode="reflect")`, torchvision's `gaussian_blur` and OpenCV's default
BORDER_REFLECT_101. Sums are float32; uint8 results are rounded half to even and saturated
(torchvision rounds its float32 convolution the same way).
"""

from __future__ import annotations

import math
from typing import Any

import torch

import tilecraft as tc
from tilecraft.language import Choice
from tilecraft.vision._device import reflect, reflect_line, uint8_levels
from tilecraft.vision.layout import as_nchw, dims, new_image
from tilecraft.vision.memory import constant, empty

# Sobel's 3x3 taps (cross-correlation, as F.conv2d and OpenCV apply them): d/dx, d/dy.
SOBEL_X = ((-1, 0, 1), (-2, 0, 2), (-1, 0, 1))
SOBEL_Y = ((-1, -2, -1), (0, 0, 0), (1, 2, 1))


# Filters of up to this many taps (default 25: 5x5) run in one pass over the image: each
# output reads its taps (from L1 mostly) and the image is read once from memory. Larger ones
# run in two passes through a float32 image of row sums, which moves twice the bytes but
# reads fewer taps. The autotuner may move the line (`Config(one_pass_taps=...)`). The
# default is two passes: on the H200 a 5x5 blur of 16 frames of 1080p took 3.30 ms in one
# pass against 2.19 ms in two (benchmarks/RESULTS.md, bench_vision).
ONE_PASS_TAPS = Choice(0, 25, 81)


# Output rows one program of the row-window blur computes (0, the default: off, one or two
# passes as ONE_PASS_TAPS says). Such a program walks `window_rows` rows of one strip of
# columns: it sums each input line it needs horizontally once (window_rows + 2 * radius
# lines, kept in registers) and combines them vertically, so the image is read about once
# (the halo lines again, from L2) and no float32 image of row sums is written or read. A
# knob (`Config(window_rows=8)`) until measured on the GPU; give it strips of one column
# per thread (block_w = 32 * num_warps), where its gathers read coalesced.
WINDOW_ROWS = Choice(0, 4, 8, 16)


def _row_sum(
    image: torch.Tensor,
    n: Any,
    c: Any,
    tile_h: tc.Tile,
    lines: torch.Tensor,
    tile_w: tc.Tile,
    taps_w: list,
    width: int,
    reflected: bool = True,
) -> torch.Tensor:
    """The horizontal pass over rows `lines` (one per row of `tile_h`) of `image[n, c]` at
    the columns of `tile_w`, in float32 (columns not `reflected`: all inside the image);
    a device helper."""
    radius = len(taps_w) // 2
    acc = tc.zeros([tile_h, tile_w], dtype=torch.float32)
    for k in range(2 * radius + 1):
        cols = tile_w.index + (k - radius)
        if reflected:
            cols = reflect(cols, width)
        pixels = tc.load(image, [n, c, lines[:, None], cols[None, :]])
        acc = acc + taps_w[k] * pixels.to(torch.float32)
    return acc


def _taps(weights: torch.Tensor) -> list:
    """A filter's taps, each read once; a device helper. (Reads of `weights[k]` inside the
    loops over lines would be repeated: the stores between them keep Triton from merging
    them, and they outnumbered the pixel loads of a one-pass 5x5 blur.)"""
    taps = []
    for k in range(weights.size(0)):
        taps = taps + [weights[k]]
    return taps


# Measured on the H200 (5x5 float blur of 16 frames of 1080p, `bench_vision.py --variants`):
# windows of 16 rows over 256-column strips with 8 warps, 0.320 ms (2.49 TB/s), against
# 2.23 ms for two passes over 64 x 64 tiles.
MEASURED = tc.Config(block_sizes=[None, None, None, None, 256], num_warps=8, window_rows=16)


@tc.kernel(default_config=MEASURED)
def _separable(
    image: torch.Tensor,
    weights_h: torch.Tensor,
    weights_w: torch.Tensor,
    out: torch.Tensor,
    is_uint8: bool,
    amount: float,
    sharpen: bool,
) -> torch.Tensor:
    n, c, h, w = image.size()
    radius_h = weights_h.size(0) // 2
    radius_w = weights_w.size(0) // 2
    taps = (2 * radius_h + 1) * (2 * radius_w + 1)
    window_rows = tc.register_tunable("window_rows", WINDOW_ROWS)
    one_pass = taps <= tc.register_tunable("one_pass_taps", ONE_PASS_TAPS)
    passes = 0 if window_rows else (1 if one_pass else 2)
    # the horizontal pass's float32 result, which the vertical pass reads (none in one pass)
    rows = empty([n, c, h, w] if passes == 2 else [1, 1, 1, 1], torch.float32, image.device)
    # of the three loops below, those the config does not use have no rows (no launch)
    for tile_n, tile_c, tile_h, tile_w in tc.tile(
        [n, c, h if passes else 0, w], block_size=[1, 1, None, None]
    ):
        taps_w = _taps(weights_w)
        if passes == 1:
            taps_h = _taps(weights_h)
            # tiles whose taps all fall inside the image (most) read shifted runs of rows,
            # which load wide; the others reflect each position
            if _interior(tile_h, radius_h, h) & _interior(tile_w, radius_w, w):
                acc = _window_sum(image, tile_n, tile_c, tile_h, tile_w, taps_h, taps_w, False)
            else:
                acc = _window_sum(image, tile_n, tile_c, tile_h, tile_w, taps_h, taps_w, True)
            _finish(image, out, tile_n, tile_c, tile_h, tile_w, acc, is_uint8, amount, sharpen)
        else:
            rows[tile_n, tile_c, tile_h, tile_w] = _row_sum(
                image, tile_n, tile_c, tile_h, tile_h.index, tile_w, taps_w, w
            )
    # the vertical pass of two
    for tile_n, tile_c, tile_h, tile_w in tc.tile(
        [n, c, h if passes == 2 else 0, w], block_size=[1, 1, None, None]
    ):
        taps_h = _taps(weights_h)
        acc = tc.zeros([tile_h, tile_w], dtype=torch.float32)
        for k in range(2 * radius_h + 1):
            lines = reflect(tile_h.index + (k - radius_h), h)
            acc = acc + taps_h[k] * rows[tile_n, tile_c, lines[:, None], tile_w.index[None, :]]
        _finish(image, out, tile_n, tile_c, tile_h, tile_w, acc, is_uint8, amount, sharpen)
    # the row-window blur
    for tile_n, tile_c, tile_h, tile_w in tc.tile(
        [n, c, 0 if passes else h, w], block_size=[1, 1, max(window_rows, 1), None]
    ):
        taps_h, taps_w = _taps(weights_h), _taps(weights_w)
        top = tile_h.begin
        sums = _line_sums(
            image, tile_n.begin, tile_c.begin, top, window_rows, tile_w, taps_h, taps_w
        )
        for i in range(window_rows):
            acc = tc.zeros([tile_w], dtype=torch.float32)
            for k in range(2 * radius_h + 1):
                acc = acc + taps_h[k] * sums[i + k]
            where = [tile_n.begin, tile_c.begin, top + i, tile_w]
            _finish_line(image, out, where, acc, is_uint8, amount, sharpen)
    return out


def _line_sums(
    image: torch.Tensor,
    n: Any,
    c: Any,
    top: Any,
    count: int,
    tile_w: Any,
    taps_h: list,
    taps_w: list,
) -> list:
    """The horizontal sums (float32, over the columns of `tile_w`) of the input lines that
    `count` output rows from `top` on read: lines `top - radius` to `top + count + radius
    - 1`, reflected; a device helper."""
    h, w = image.size(2), image.size(3)
    radius_h, radius_w = len(taps_h) // 2, len(taps_w) // 2
    columns = []  # each tap's columns, the same for every line
    for k in range(2 * radius_w + 1):
        columns = columns + [reflect(tile_w.index + (k - radius_w), w)]
    sums = []
    for i in range(count + 2 * radius_h):
        line = reflect_line(top + (i - radius_h), h)
        acc = tc.zeros([tile_w], dtype=torch.float32)
        for k in range(2 * radius_w + 1):
            pixels = tc.load(image, [n, c, line, columns[k]]).to(torch.float32)
            acc = acc + taps_w[k] * pixels
        sums = sums + [acc]
    return sums


def _finish_line(
    image: torch.Tensor,
    out: torch.Tensor,
    where: list,
    acc: torch.Tensor,
    is_uint8: bool,
    amount: float,
    sharpen: bool,
) -> None:
    """`_finish` for one output row (`where`: image, channel, row, columns), which may lie
    past the image's last row (then nothing is stored); a device helper."""
    n, c, row, tile_w = where
    h = image.size(2)
    # the row is clamped and masked rather than left out of range: eager mode runs this
    # with an int row, which indexes exactly (and would raise), where compiled code masks
    inside = min(row, h - 1)
    if sharpen:
        original = tc.load(image, [n, c, inside, tile_w]).to(torch.float32)
        acc = original + amount * (original - acc)
    if is_uint8:
        acc = uint8_levels(acc)
    live = (tile_w.index < image.size(3)) & (row < h)
    tc.store(out, [n, c, inside, tile_w], acc.to(out.dtype), extra_mask=live)


def _interior(tile: Any, radius: int, size: int) -> torch.Tensor:
    """Whether every position within `radius` of `tile` lies in [0, size); a device helper."""
    return (tile.begin >= radius) & (tile.end + radius <= size)


def _window_sum(
    image: torch.Tensor,
    n: Any,
    c: Any,
    tile_h: Any,
    tile_w: Any,
    taps_h: list,
    taps_w: list,
    reflected: bool,
) -> torch.Tensor:
    """Both passes of the filter on one tile, in float32: each output reads all its taps;
    a device helper."""
    h, w = image.size(2), image.size(3)
    radius = len(taps_h) // 2
    acc = tc.zeros([tile_h, tile_w], dtype=torch.float32)
    for i in range(2 * radius + 1):
        lines = tile_h.index + (i - radius)
        if reflected:
            lines = reflect(lines, h)
        row = _row_sum(image, n, c, tile_h, lines, tile_w, taps_w, w, reflected)
        acc = acc + taps_h[i] * row
    return acc


def _finish(
    image: torch.Tensor,
    out: torch.Tensor,
    tile_n: Any,
    tile_c: Any,
    tile_h: Any,
    tile_w: Any,
    acc: torch.Tensor,
    is_uint8: bool,
    amount: float,
    sharpen: bool,
) -> None:
    """Store a filtered tile: sharpened (unsharp mask: the image plus `amount` times what
    the blur took away), rounded and saturated for uint8; a device helper."""
    if sharpen:
        original = image[tile_n, tile_c, tile_h, tile_w].to(torch.float32)
        acc = original + amount * (original - acc)
    if is_uint8:
        acc = uint8_levels(acc)
    out[tile_n, tile_c, tile_h, tile_w] = acc.to(out.dtype)


@tc.kernel
def _sobel(image: torch.Tensor, grad_x: torch.Tensor, grad_y: torch.Tensor) -> torch.Tensor:
    n, c, h, w = image.size()
    for tile_n, tile_c, tile_h, tile_w in tc.tile([n, c, h, w], block_size=[1, 1, None, None]):
        gx = tc.zeros([tile_h, tile_w], dtype=torch.float32)
        gy = tc.zeros([tile_h, tile_w], dtype=torch.float32)
        for i in range(3):
            lines = reflect(tile_h.index + (i - 1), h)
            for j in range(3):
                cols = reflect(tile_w.index + (j - 1), w)
                pixels = image[tile_n, tile_c, lines[:, None], cols[None, :]].to(torch.float32)
                gx = gx + SOBEL_X[i][j] * pixels
                gy = gy + SOBEL_Y[i][j] * pixels
        grad_x[tile_n, tile_c, tile_h, tile_w] = gx.to(grad_x.dtype)
        grad_y[tile_n, tile_c, tile_h, tile_w] = gy.to(grad_y.dtype)
    return grad_x


def gaussian_kernel1d(kernel_size: int, sigma: float) -> torch.Tensor:
    """Normalized float32 Gaussian taps, as torchvision's `gaussian_blur` builds them."""
    half = (kernel_size - 1) / 2
    x = torch.linspace(-half, half, kernel_size, dtype=torch.float64)
    taps = torch.exp(-0.5 * (x / sigma) ** 2)
    return (taps / taps.sum()).to(torch.float32)


def _check_size(kernel_size: int) -> None:
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"a filter's kernel_size is odd and positive, not {kernel_size}")


def _filter(
    image: torch.Tensor,
    taps_h: torch.Tensor,
    taps_w: torch.Tensor,
    layout: str,
    amount: float | None = None,
) -> torch.Tensor:
    img = as_nchw(image, layout)
    out = new_image(*dims(img), image.dtype, image.device, layout)
    taps_h, taps_w = (
        constant(taps_h.tolist(), image.device),
        constant(taps_w.tolist(), image.device),
    )
    is_uint8, sharpen = image.dtype == torch.uint8, amount is not None
    args = (is_uint8, float(amount or 0.0), sharpen)
    out = _separable(img.view, taps_h, taps_w, out, *args)
    return img.restore(out)


def _gaussian_taps(
    kernel_size: int | tuple[int, int], sigma: float | tuple[float, float] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The vertical and horizontal taps of a Gaussian blur, as torchvision chooses them."""
    ks = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    for k in ks:
        _check_size(k)
    if sigma is None:
        sigmas = tuple(0.3 * ((k - 1) * 0.5 - 1) + 0.8 for k in ks)
    else:
        sigmas = (sigma, sigma) if isinstance(sigma, (int, float)) else tuple(sigma)
    if min(sigmas) <= 0 or any(math.isnan(s) for s in sigmas):
        raise ValueError(f"sigma must be positive, not {sigma}")
    return gaussian_kernel1d(ks[1], sigmas[1]), gaussian_kernel1d(ks[0], sigmas[0])


def gaussian_blur(
    image: torch.Tensor,
    kernel_size: int | tuple[int, int],
    sigma: float | tuple[float, float] | None = None,
    layout: str = "NCHW",
) -> torch.Tensor:
    """Separable Gaussian blur with reflected borders (torchvision's `gaussian_blur`).

    `kernel_size` and `sigma` are one value or (x, y) pairs, as torchvision takes them;
    `sigma` defaults to `0.3 * ((kernel_size - 1) * 0.5 - 1) + 0.8`, torchvision's choice.
    """
    taps_h, taps_w = _gaussian_taps(kernel_size, sigma)
    return _filter(image, taps_h, taps_w, layout)


def unsharp_mask(
    image: torch.Tensor,
    kernel_size: int | tuple[int, int] = 5,
    sigma: float | tuple[float, float] | None = None,
    amount: float = 1.0,
    layout: str = "NCHW",
) -> torch.Tensor:
    """Sharpen: `image + amount * (image - gaussian_blur(image))`, in one kernel.

    The blur is kept in float32 (not rounded in between); uint8 results are rounded and
    saturated, float results are not clamped.
    """
    taps_h, taps_w = _gaussian_taps(kernel_size, sigma)
    return _filter(image, taps_h, taps_w, layout, amount)


def box_blur(image: torch.Tensor, kernel_size: int, layout: str = "NCHW") -> torch.Tensor:
    """Mean over a `kernel_size` square with reflected borders (OpenCV's `blur`)."""
    _check_size(kernel_size)
    taps = torch.full([kernel_size], 1 / kernel_size, dtype=torch.float32)
    return _filter(image, taps, taps, layout)


def sobel(image: torch.Tensor, layout: str = "NCHW") -> tuple[torch.Tensor, torch.Tensor]:
    """Horizontal and vertical Sobel derivatives (float32, each channel apart), reflected borders.

    `grad_x` is right minus left, `grad_y` bottom minus top, as OpenCV's `Sobel(dx=1)` and
    `Sobel(dy=1)` with their default border.
    """
    img = as_nchw(image, layout)
    grad_x = new_image(*dims(img), torch.float32, image.device, layout)
    grad_y = new_image(*dims(img), torch.float32, image.device, layout)
    _sobel(img.view, grad_x, grad_y)
    return img.restore(grad_x), img.restore(grad_y)
