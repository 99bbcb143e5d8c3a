# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors;
# device code builds lists with `[]`, as annotated assignments are host-only syntax).
# mypy: disable-error-code="index,list-item,misc,var-annotated"
"""Geometry: flip, crop, resize (nearest, bilinear, area, antialiased) and letterbox.

Resizing follows `torch.nn.functional.interpolate` (and torchvision's `resize` with
`antialias=False`): nearest takes `min(floor(i * in / out), in - 1)`, bilinear samples at
`(i + 0.5) * in / out - 0.5` (align_corners=False, clamped at 0) in float32. Uint8 images
are interpolated in float32, rounded half to even and clamped, as torchvision does.
"""

from __future__ import annotations

from typing import Any

import torch

import tilecraft as tc
from tilecraft.language import Choice
from tilecraft.vision._device import bilinear, bilinear_taps, inside, uint8_levels
from tilecraft.vision.antialias import resize_levels
from tilecraft.vision.boxes import box_scales, check_size, letterbox_box
from tilecraft.vision.downscale import average_resize
from tilecraft.vision.layout import Image, as_nchw, dims, new_image


@tc.kernel
def _flip(image: torch.Tensor, out: torch.Tensor, vertical: bool, horizontal: bool) -> torch.Tensor:
    n, c, h, w = image.size()
    for tile_n, tile_c, tile_h, tile_w in tc.tile([n, c, h, w], block_size=[1, 1, None, None]):
        rows = tile_h.index
        cols = tile_w.index
        if vertical:
            rows = (h - 1) - tile_h.index
        if horizontal:
            cols = (w - 1) - tile_w.index
        out[tile_n, tile_c, tile_h, tile_w] = image[tile_n, tile_c, rows[:, None], cols[None, :]]
    return out


@tc.kernel
def _crop(image: torch.Tensor, out: torch.Tensor, top: int, left: int) -> torch.Tensor:
    n, c, h, w = out.size()
    for tile_n, tile_c, tile_h, tile_w in tc.tile([n, c, h, w], block_size=[1, 1, None, None]):
        rows = tile_h.index + top
        cols = tile_w.index + left
        # positions outside the image read 0: torchvision's crop pads with zeros there too
        out[tile_n, tile_c, tile_h, tile_w] = image[tile_n, tile_c, rows[:, None], cols[None, :]]
    return out


@tc.kernel
def _resize_nearest(
    image: torch.Tensor, out: torch.Tensor, scale_h: float, scale_w: float
) -> torch.Tensor:
    _, _, h, w = image.size()
    n, c, out_h, out_w = out.size()
    size = [n, c, out_h, out_w]
    for tile_n, tile_c, tile_h, tile_w in tc.tile(size, block_size=[1, 1, None, None]):
        rows = torch.floor(tile_h.index.to(torch.float32) * scale_h).to(torch.int32)
        cols = torch.floor(tile_w.index.to(torch.float32) * scale_w).to(torch.int32)
        rows = torch.where(rows < h - 1, rows, h - 1)
        cols = torch.where(cols < w - 1, cols, w - 1)
        out[tile_n, tile_c, tile_h, tile_w] = image[tile_n, tile_c, rows[:, None], cols[None, :]]
    return out


# How many planes (images x channels) one program of `_resize_bilinear` resizes: "one"
# (the default), "channels" (every channel of its pixels: the taps and weights are computed
# once per pixel, and an NHWC pixel's channels are read together) or "all" (every channel of
# every image, walking the batch in a loop, as PyTorch's kernel does: the taps once per
# position). A knob (`Config(planes="channels")`) until measured on the GPU. Whatever the
# choice, a gather reads coalesced only where a tile holds one output per thread (block_h *
# block_w = 32 * num_warps): Triton gives each thread as many adjacent outputs as a store
# writes at once (4 float32), so with more, the lanes of a warp gather 4 outputs apart.
PLANES = Choice("one", "channels", "all")
# Whether `_resize_bilinear` reads the second tap of an axis where its weight is 0 (uint8
# images only: see `_device.bilinear`): "skip" masks those lanes off, so a resize by a
# whole factor (1080p -> 360p: every sample at a pixel centre) reads one tap in four and
# a third of the rows; "read" reads every tap. A knob until timed on the H200.
ZERO_TAPS = Choice("skip", "read")
# Measured on the H200 (16 frames of 1080p, `bench_vision.py --variants`): every channel of
# a pixel per program, over 2 x 128 output tiles with 8 warps, ran a half-size float resize
# in 0.128 ms (0.424 for 64 x 64 tiles of one plane) and uint8 NHWC to 640x360 in 0.042
# (0.297): narrow row tiles keep neighbouring threads on neighbouring taps.
MEASURED = tc.Config(block_sizes=[None, None, 2, 128, None, None], num_warps=8, planes="channels")


@tc.kernel(default_config=MEASURED)
def _resize_bilinear(
    image: torch.Tensor,
    out: torch.Tensor,
    box_top: int,
    box_left: int,
    box_height: int,
    box_width: int,
    scale_h: float,
    scale_w: float,
    pad: float,
    is_uint8: bool,
) -> torch.Tensor:
    # the resized image lies in `out` at (box_top, box_left) (letterbox), padded around
    _, _, h, w = image.size()
    n, c, out_h, out_w = out.size()
    planes = tc.register_tunable("planes", PLANES)
    zero_taps = tc.register_tunable("zero_taps", ZERO_TAPS)
    skip = is_uint8 and zero_taps == "skip"
    # only the loop of the chosen `planes` has rows, so only it launches
    size = [n, c, out_h if planes == "one" else 0, out_w]
    for tile_n, tile_c, tile_h, tile_w in tc.tile(size, block_size=[1, 1, None, None]):
        dst_h = tile_h.index - box_top
        dst_w = tile_w.index - box_left
        rows = bilinear_taps(dst_h, scale_h, h)
        cols = bilinear_taps(dst_w, scale_w, w)
        value = bilinear(image, tile_n, tile_c, rows, cols, skip)
        value = torch.where(inside(dst_h, dst_w, box_height, box_width), value, pad)
        if is_uint8:
            value = uint8_levels(value)
        out[tile_n, tile_c, tile_h, tile_w] = value.to(out.dtype)
    size = [n, out_h if planes == "channels" else 0, out_w]
    for tile_n, tile_h, tile_w in tc.tile(size, block_size=[1, None, None]):
        rows, cols, box = _resize_taps(
            tile_h, tile_w, box_top, box_left, box_height, box_width, scale_h, scale_w, h, w
        )
        _resize_channels(image, out, (tile_n, tile_h, tile_w), rows, cols, box, pad, is_uint8, skip)
    for tile_h, tile_w in tc.tile([out_h if planes == "all" else 0, out_w]):
        rows, cols, box = _resize_taps(
            tile_h, tile_w, box_top, box_left, box_height, box_width, scale_h, scale_w, h, w
        )
        for tile_n in tc.tile(n, block_size=1):
            at = (tile_n, tile_h, tile_w)
            _resize_channels(image, out, at, rows, cols, box, pad, is_uint8, skip)
    return out


def _resize_taps(
    tile_h: Any,
    tile_w: Any,
    top: int,
    left: int,
    height: int,
    width: int,
    scale_h: float,
    scale_w: float,
    h: int,
    w: int,
) -> tuple[tuple, tuple, torch.Tensor]:
    """The bilinear taps of the rows and columns of a tile of the output whose box (the
    resized image) lies at (`top`, `left`), `height` x `width`, and which outputs lie in
    the box; a device helper."""
    dst_h = tile_h.index - top
    dst_w = tile_w.index - left
    rows = bilinear_taps(dst_h, scale_h, h)
    cols = bilinear_taps(dst_w, scale_w, w)
    return rows, cols, inside(dst_h, dst_w, height, width)


def _resize_channels(
    image: torch.Tensor,
    out: torch.Tensor,
    where: tuple,
    rows: tuple,
    cols: tuple,
    box: torch.Tensor,
    pad: float,
    is_uint8: bool,
    skip: bool,
) -> None:
    """Store every channel of the tile `where` (image, rows, columns), resized (`pad`
    outside `box`); `skip`: see `_device.bilinear`; a device helper."""
    n, tile_h, tile_w = where
    values = gather_channels(image, n, rows, cols, box, pad, skip)
    for k in range(image.size(1)):
        value = values[k]
        if is_uint8:
            value = uint8_levels(value)
        out[n, k, tile_h, tile_w] = value.to(out.dtype)


def gather_channels(
    image: torch.Tensor,
    n: Any,
    rows: tuple,
    cols: tuple,
    box: torch.Tensor,
    pad: float,
    skip: bool,
) -> list:
    """Every channel of image `n` interpolated on the grid of `rows` x `cols` (`pad` outside
    `box`), all loaded before the caller stores any (a store between them would hold the
    next channel's loads back, as they might read what it wrote); `skip`: see
    `_device.bilinear`; a device helper."""
    values = []
    for k in range(image.size(1)):
        value = bilinear(image, n, k, rows, cols, skip)
        values = values + [torch.where(box, value, pad)]
    return values


def hflip(image: torch.Tensor, layout: str = "NCHW") -> torch.Tensor:
    """Mirror left-right (the last spatial axis), any dtype, same layout."""
    return _flipped(image, layout, vertical=False, horizontal=True)


def vflip(image: torch.Tensor, layout: str = "NCHW") -> torch.Tensor:
    """Mirror top-bottom, any dtype, same layout."""
    return _flipped(image, layout, vertical=True, horizontal=False)


def _flipped(image: torch.Tensor, layout: str, vertical: bool, horizontal: bool) -> torch.Tensor:
    img = as_nchw(image, layout)
    out = new_image(*dims(img), image.dtype, image.device, layout)
    return img.restore(_flip(img.view, out, vertical, horizontal))


def crop(
    image: torch.Tensor, top: int, left: int, height: int, width: int, layout: str = "NCHW"
) -> torch.Tensor:
    """The `height` x `width` window at (`top`, `left`), copied; zeros where it leaves the image."""
    if height < 0 or width < 0:
        raise ValueError(f"a crop's height and width are >= 0, not {height} x {width}")
    img = as_nchw(image, layout)
    n, c = img.view.shape[:2]
    out = new_image(n, c, height, width, image.dtype, image.device, layout)
    return img.restore(_crop(img.view, out, top, left))


def _output(img: Image, size: tuple[int, int]) -> torch.Tensor:
    check_size(size)
    n, c = img.view.shape[:2]
    return new_image(n, c, size[0], size[1], img.view.dtype, img.view.device, img.layout)


def resize(
    image: torch.Tensor,
    size: tuple[int, int],
    interpolation: str = "bilinear",
    layout: str = "NCHW",
    antialias: bool = False,
) -> torch.Tensor:
    """Resize to `size` = (height, width), `interpolation` "nearest", "bilinear" or "area".

    As `F.interpolate(..., align_corners=False, antialias=antialias)`: bilinear without
    antialiasing (the default here; torchvision's `resize` defaults to `antialias=True`)
    samples 2x2 pixels, with it averages every pixel an output covers when shrinking.
    Uint8 is rounded half to even and saturated.
    """
    img = as_nchw(image, layout)
    out = _output(img, size)
    if interpolation == "bilinear":  # NHWC uint8 frames: products on the tensor cores
        packed = resize_levels(img.view, out, antialias)
        if packed is not None:
            return img.restore(packed)
    if interpolation == "area" or (antialias and interpolation == "bilinear"):
        return img.restore(average_resize(img.view, out, interpolation == "area"))
    box = (0, 0, size[0], size[1])
    scales = box_scales(img.view.shape[2:], box)
    if interpolation == "nearest":
        return img.restore(_resize_nearest(img.view, out, *scales))
    if interpolation != "bilinear":
        raise ValueError(f"interpolation is nearest, bilinear or area, not {interpolation!r}")
    is_uint8 = image.dtype == torch.uint8
    return img.restore(_resize_bilinear(img.view, out, *box, *scales, 0.0, is_uint8))


def letterbox(
    image: torch.Tensor, size: tuple[int, int], pad: float = 114.0, layout: str = "NCHW"
) -> torch.Tensor:
    """Resize (bilinear) keeping the aspect ratio to fit `size`, centred, padded with `pad`.

    The same as `resize` to `letterbox_box(...)`'s height and width followed by
    `F.pad(..., value=pad)` around it, in one pass.
    """
    img = as_nchw(image, layout)
    out = _output(img, size)
    _, _, h, w = img.view.shape
    box = letterbox_box((h, w), size)
    scales = box_scales((h, w), box)
    is_uint8 = image.dtype == torch.uint8
    return img.restore(_resize_bilinear(img.view, out, *box, *scales, float(pad), is_uint8))
