"""Image layouts: every vision kernel indexes an NCHW view, whatever the memory layout.

A user's image is NCHW or NHWC, batched (4-D) or not (3-D). The kernels are written once,
on a 4-D NCHW *view*: an NHWC tensor is passed as `x.permute(0, 3, 1, 2)`, so its strides
say where each pixel lies and the generated code reads channels-last memory directly, with
no copy. Outputs are allocated in the layout asked for and handed to kernels the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tilecraft.vision.memory import empty

LAYOUTS = ("NCHW", "NHWC")


@dataclass(frozen=True)
class Image:
    """A 4-D NCHW view of a user's image, and how to give a result back in its form."""

    view: torch.Tensor
    layout: str
    batched: bool

    def restore(self, view: torch.Tensor, layout: str | None = None) -> torch.Tensor:
        """`view` (NCHW) back in `layout` (this image's by default), unbatched if it was."""
        out = view.permute(0, 2, 3, 1) if (layout or self.layout) == "NHWC" else view
        return out if self.batched else out[0]


def check_layout(layout: str) -> str:
    """`layout` itself, or a ValueError naming the layouts there are."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    return layout


def as_nchw(image: torch.Tensor, layout: str = "NCHW") -> Image:
    """Wrap `image` (3-D or 4-D, in `layout`) as an NCHW view."""
    check_layout(layout)
    if image.dim() not in (3, 4):
        raise ValueError(f"an image is 3-D (CHW/HWC) or 4-D (NCHW/NHWC), not {image.dim()}-D")
    batched = image.dim() == 4
    x = image if batched else image[None]
    view = x.permute(0, 3, 1, 2) if layout == "NHWC" else x
    return Image(view, layout, batched)


def new_image(
    n: int, c: int, h: int, w: int, dtype: torch.dtype, device: torch.device, layout: str
) -> torch.Tensor:
    """An uninitialized image allocated in `layout` (from the active buffer pool, if any),
    returned as its NCHW view."""
    if check_layout(layout) == "NHWC":
        return empty([n, h, w, c], dtype, device).permute(0, 3, 1, 2)
    return empty([n, c, h, w], dtype, device)


def check_channels(image: Image, channels: int, what: str) -> None:
    """A ValueError unless `image` has `channels` channels."""
    if image.view.shape[1] != channels:
        raise ValueError(
            f"{what} needs {channels} channels, got {image.view.shape[1]} "
            f"(an image in layout {image.layout} of shape {tuple(image.view.shape)} as NCHW)"
        )


def dims(image: Image) -> tuple[int, int, int, int]:
    """(N, C, H, W) of an image."""
    n, c, h, w = image.view.shape
    return n, c, h, w
