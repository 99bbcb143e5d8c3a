# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors).
# mypy: disable-error-code="index,list-item,misc"
"""Statistics of uint8 images: per-channel histograms (atomics) and histogram equalization.

`equalize` follows torchvision's `equalize` (PIL's `ImageOps.equalize`): per channel,
`step = (pixels - count of the highest value present) // 255`, and value `i` maps to
`(step // 2 + pixels below i) // step`, saturated; a channel whose `step` is 0 is kept.
"""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.vision.layout import Image, as_nchw, dims, new_image

BINS = 256


@tc.kernel
def _histogram(image: torch.Tensor, hist: torch.Tensor) -> torch.Tensor:
    n, c, h, w = image.size()
    for tile_n, tile_c, tile_h, tile_w in tc.tile([n, c, h, w], block_size=[1, 1, None, None]):
        values = image[tile_n, tile_c, tile_h, tile_w].to(torch.int32)
        plane = tile_n.index[:, None, None, None] * c + tile_c.index[None, :, None, None]
        bins = plane * 256 + values
        # lanes past a ragged edge read 0: they must not count in bin 0
        inside = (tile_h.index < h)[:, None] & (tile_w.index < w)[None, :]
        tc.atomic_add(hist, [bins], 1, sem="relaxed", extra_mask=inside[None, None, :, :])
    return hist


@tc.kernel
def _lookup(image: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    n, c, h, w = image.size()
    for tile_n, tile_c, tile_h, tile_w in tc.tile([n, c, h, w], block_size=[1, 1, None, None]):
        values = image[tile_n, tile_c, tile_h, tile_w].to(torch.int32)
        plane = tile_n.index[:, None, None, None] * c + tile_c.index[None, :, None, None]
        out[tile_n, tile_c, tile_h, tile_w] = table[plane * 256 + values]
    return out


def _uint8(image: torch.Tensor, layout: str, what: str) -> Image:
    if image.dtype != torch.uint8:
        raise ValueError(f"{what} takes uint8 images, not {image.dtype}")
    return as_nchw(image, layout)


def histogram(image: torch.Tensor, layout: str = "NCHW") -> torch.Tensor:
    """Counts of each of the 256 values, per image and channel: int32 of shape (N, C, 256)
    ((C, 256) for one image), as `torch.bincount` over each channel would give."""
    img = _uint8(image, layout, "histogram")
    n, c, _, _ = dims(img)
    hist = torch.zeros([n * c * BINS], dtype=torch.int32, device=image.device)
    hist = _histogram(img.view, hist).view(n, c, BINS)
    return hist if img.batched else hist[0]


def equalization_table(hist: torch.Tensor) -> torch.Tensor:
    """Per-channel lookup tables (uint8, the shape of `hist`) that equalize those histograms."""
    hist = hist.to(torch.int64)
    total = hist.sum(-1, keepdim=True)
    top = BINS - 1 - (hist.flip(-1) > 0).to(torch.int64).argmax(-1, keepdim=True)
    step = (total - hist.gather(-1, top)) // 255
    below = hist.cumsum(-1) - hist
    table = ((step // 2 + below) // step.clamp(min=1)).clamp(max=255)
    identity = torch.arange(BINS, device=hist.device).expand_as(table)
    return torch.where(step > 0, table, identity).to(torch.uint8)


def equalize(image: torch.Tensor, layout: str = "NCHW") -> torch.Tensor:
    """Histogram equalization of each channel of uint8 images (torchvision's / PIL's)."""
    img = _uint8(image, layout, "equalize")
    n, c, _, _ = dims(img)
    hist = torch.zeros([n * c * BINS], dtype=torch.int32, device=image.device)
    table = equalization_table(_histogram(img.view, hist).view(n, c, BINS)).flatten()
    out = new_image(*dims(img), torch.uint8, image.device, layout)
    return img.restore(_lookup(img.view, table, out))
