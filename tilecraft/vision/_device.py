"""Device helpers the vision kernels share: reflected borders, bilinear sampling, rounding.

They are plain functions called on tiles inside a kernel's `tc.tile` loop: compiled
kernels inline them (their body is compiled where they are called), eager mode calls
them as Python. Each may `return` only at its end, as inlining requires.
"""

from __future__ import annotations

from typing import Any

import torch

import tilecraft as tc


def reflect(index: torch.Tensor, size: int) -> torch.Tensor:
    """Positions `index` reflected into 0..size-1 without repeating the edge pixel
    (`...cba|abcd|dcb...`, as `F.pad(mode="reflect")`), for reaches up to `size - 1`."""
    index = torch.where(index < 0, -index, index)
    index = torch.where(index > size - 1, 2 * (size - 1) - index, index)
    # an image narrower than the reach still reads a pixel (its first)
    return torch.where(index < 0, 0, index)


def reflect_line(index: Any, size: int) -> Any:
    """`reflect` for one position: a scalar on the device, an int in eager mode (where
    `torch.where` takes no ints), through min and max, which both understand."""
    index = max(index, -index)
    index = min(index, 2 * (size - 1) - index)
    return max(index, 0)


def bilinear_taps(
    dst: torch.Tensor, scale: float, size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The two source positions bilinear interpolation reads along one axis for output
    positions `dst` (align_corners=False: `(dst + 0.5) * scale - 0.5`, clamped at 0), and
    the second one's weight: (low, high, weight), high = low at the last pixel."""
    src = torch.clamp((dst.to(torch.float32) + 0.5) * scale - 0.5, min=0.0)
    low = src.to(torch.int32)
    high = torch.where(low < size - 1, low + 1, low)
    return low, high, src - low.to(torch.float32)


def bilinear(
    image: torch.Tensor, n: Any, c: Any, rows: tuple, cols: tuple, skip: bool
) -> torch.Tensor:
    """`image[n, c]` interpolated in float32 on the grid of `rows` x `cols`, each the
    `bilinear_taps` of one axis. With `skip`, a second tap of weight 0 is not read (its
    lanes are masked off, so they ask memory for nothing): at whole scales (1080p ->
    360p samples at pixel centres) all of them. Only for images without NaN or infinity
    (uint8), whose product with that weight 0 would not be 0."""
    top, bottom, wy = rows
    left, right, wx = cols
    top, bottom, wy = top[:, None], bottom[:, None], wy[:, None]
    left, right, wx = left[None, :], right[None, :], wx[None, :]
    # tc.load, not `image[...]`: eager mode runs a helper as plain Python, where a
    # subscript is not bounded as in the kernel's own body (a letterbox's border computes
    # rows past the image, which must read 0, not raise)
    p00 = tc.load(image, [n, c, top, left]).to(torch.float32)
    if skip:
        right_read = wx != 0.0
        bottom_read = wy != 0.0
        p01 = tc.load(image, [n, c, top, right], extra_mask=right_read)
        p10 = tc.load(image, [n, c, bottom, left], extra_mask=bottom_read)
        p11 = tc.load(image, [n, c, bottom, right], extra_mask=right_read & bottom_read)
    else:
        p01 = tc.load(image, [n, c, top, right])
        p10 = tc.load(image, [n, c, bottom, left])
        p11 = tc.load(image, [n, c, bottom, right])
    upper = (1.0 - wx) * p00 + wx * p01.to(torch.float32)
    lower = (1.0 - wx) * p10.to(torch.float32) + wx * p11.to(torch.float32)
    return (1.0 - wy) * upper + wy * lower


def inside(rows: torch.Tensor, cols: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Whether each point of the grid `rows` x `cols` lies in [0, height) x [0, width)."""
    rows_in = (rows >= 0) & (rows < height)
    cols_in = (cols >= 0) & (cols < width)
    return rows_in[:, None] & cols_in[None, :]


def uint8_levels(value: torch.Tensor) -> torch.Tensor:
    """`value` rounded half to even and saturated to 0..255 (still float), as torchvision
    rounds a float32 result into a uint8 image (NaN gives 0, a uint8 has none).

    Saturated first, then rounded by adding and subtracting 2**23: the same levels as
    `torch.clamp(torch.round(value), 0, 255)` (rounding is monotone and 0 and 255 are
    integers) in four instructions on a GPU instead of about twenty (`torch.round` is
    written there with floors, compares and a float remainder, Triton having no `rint`
    outside libdevice), which the color conversions spend on every pixel."""
    value = torch.where(value > 0.0, value, 0.0)
    value = torch.where(value < 255.0, value, 255.0)
    # 2**23 + value (0..255) keeps no bits below the units: the addition itself rounds
    # half to even, and the subtraction is exact (a literal: a module float would be a
    # kernel argument)
    return (value + 8388608.0) - 8388608.0
