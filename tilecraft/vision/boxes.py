"""Where a resized image lies in its output (its box), and the float32 scales between them.

Every resizing kernel takes a box `[top, left, height, width]` of its output (the whole
output, or a letterbox) and the scales `in / out` of each axis, rounded to float32 as
PyTorch's kernels compute them: its results then match PyTorch's to the bit where the
arithmetic allows. One place computes these for every host entry point.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def float32_ratio(size_in: float, size_out: float) -> float:
    """`size_in / size_out` rounded to float32, as PyTorch's kernels compute it."""
    return float(torch.tensor(size_in, dtype=torch.float32) / size_out)


def check_size(size: Sequence[int]) -> None:
    """Raise unless every output dim is at least 1."""
    if min(size) < 1:
        raise ValueError(f"an output size is at least 1x1, not {size}")


def letterbox_box(in_size: tuple[int, int], size: tuple[int, int]) -> list[int]:
    """[top, left, height, width] of an `in_size` image fitted, centred, into `size`."""
    ratio = min(size[0] / in_size[0], size[1] / in_size[1])
    height = min(size[0], max(1, round(in_size[0] * ratio)))
    width = min(size[1], max(1, round(in_size[1] * ratio)))
    return [(size[0] - height) // 2, (size[1] - width) // 2, height, width]


def target_box(in_size: tuple[int, int], size: tuple[int, int], letterbox: bool) -> list[int]:
    """The box an `in_size` image is resized into in an output of `size` (checked): its
    letterbox, or the whole output."""
    check_size(size)
    return letterbox_box(in_size, size) if letterbox else [0, 0, size[0], size[1]]


def box_scales(in_size: Sequence[int], box: Sequence[int]) -> tuple[float, float]:
    """The float32 scales (height, width) from `box`'s outputs to `in_size`'s inputs."""
    return float32_ratio(in_size[0], box[2]), float32_ratio(in_size[1], box[3])
