# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors).
# mypy: disable-error-code="index,list-item,misc"
"""Color conversions: RGB <-> BGR, RGB -> gray, YUV 4:2:0 (NV12, I420) -> RGB.

Uint8 results are computed in float32, rounded half to even, clamped to 0..255 and stored,
except grayscale, which truncates as torchvision's `rgb_to_grayscale` does (`.to(uint8)`).
"""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.vision._device import uint8_levels
from tilecraft.vision.layout import as_nchw, check_channels, new_image

# ITU-R 601 luma weights, as torchvision's rgb_to_grayscale spells them.
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)

# BT.601 limited range ("TV" range: Y in 16..235, chroma in 16..240), what decoders give:
# R = Ys*(Y-16) + Rv*(V-128), G = Ys*(Y-16) + Gu*(U-128) + Gv*(V-128), B = Ys*(Y-16) + Bu*(U-128)
Y_SCALE = 255 / 219
R_V = 1.402 * 255 / 224
G_U = -0.114 * 1.772 / 0.587 * 255 / 224
G_V = -0.299 * 1.402 / 0.587 * 255 / 224
B_U = 1.772 * 255 / 224
# the same as one constant for `yuv_to_rgb`: an inlined function may read a module's tuple
# of floats as constants, while a bare module float would have to be a kernel argument
BT601 = (Y_SCALE, R_V, G_U, G_V, B_U)


def yuv_to_rgb(
    y: torch.Tensor, u: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """BT.601 limited-range samples (device tiles of uint8 Y, U, V) as float32 R, G, B
    levels, rounded and saturated as a uint8 image stores them; called in kernels."""
    y_scale, r_v, g_u, g_v, b_u = BT601
    luma = (y.to(torch.float32) - 16.0) * y_scale
    cb = u.to(torch.float32) - 128.0
    cr = v.to(torch.float32) - 128.0
    red = uint8_levels(luma + r_v * cr)
    green = uint8_levels(luma + g_u * cb + g_v * cr)
    blue = uint8_levels(luma + b_u * cb)
    return red, green, blue


@tc.kernel
def _reverse_channels(image: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    n, c, h, w = image.size()
    for tile_n, tile_h, tile_w in tc.tile([n, h, w], block_size=[1, None, None]):
        for k in range(c):
            out[tile_n, k, tile_h, tile_w] = image[tile_n, c - 1 - k, tile_h, tile_w]
    return out


# Measured on the H200 (16 frames of 1080p, `bench_vision.py --variants`): uint8 gray
# over 1 x 2048 tiles, 0.040 ms (3.36 TB/s) against 0.054 for the heuristic's.
@tc.kernel(default_config=tc.Config(block_sizes=[1, 2048], num_warps=4))
def _gray(image: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    n, _, h, w = image.size()
    for tile_n, tile_h, tile_w in tc.tile([n, h, w], block_size=[1, None, None]):
        r = image[tile_n, 0, tile_h, tile_w].to(torch.float32)
        g = image[tile_n, 1, tile_h, tile_w].to(torch.float32)
        b = image[tile_n, 2, tile_h, tile_w].to(torch.float32)
        luma = r * 0.2989 + g * 0.587 + b * 0.114
        out[tile_n, 0, tile_h, tile_w] = luma.to(out.dtype)
    return out


# Measured as gray: NV12 to RGB over 4 x 128 tiles, 0.140 ms against 0.181.
@tc.kernel(default_config=tc.Config(block_sizes=[4, 128], num_warps=4))
def _yuv420_to_rgb(
    y: torch.Tensor, u: torch.Tensor, v: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    n, h, w = y.size()
    for tile_n, tile_h, tile_w in tc.tile([n, h, w], block_size=[1, None, None]):
        # each chroma sample covers a 2x2 block of luma samples (nearest upsampling); a
        # shift, as the indices are not negative: `// 2` adds a sign correction to each
        rows = tile_h.index[:, None] >> 1
        cols = tile_w.index[None, :] >> 1
        luma = y[tile_n, tile_h, tile_w]
        red, green, blue = yuv_to_rgb(luma, u[tile_n, rows, cols], v[tile_n, rows, cols])
        out[tile_n, 0, tile_h, tile_w] = red.to(torch.uint8)
        out[tile_n, 1, tile_h, tile_w] = green.to(torch.uint8)
        out[tile_n, 2, tile_h, tile_w] = blue.to(torch.uint8)
    return out


def rgb_to_bgr(image: torch.Tensor, layout: str = "NCHW") -> torch.Tensor:
    """Reverse the channel order (RGB -> BGR, and BGR -> RGB), any dtype, same layout.

    >>> rgb_to_bgr(torch.tensor([[[1]], [[2]], [[3]]], dtype=torch.uint8)).flatten().tolist()
    [3, 2, 1]
    """
    img = as_nchw(image, layout)
    n, c, h, w = img.view.shape
    out = new_image(n, c, h, w, image.dtype, image.device, layout)
    return img.restore(_reverse_channels(img.view, out))


bgr_to_rgb = rgb_to_bgr


def rgb_to_gray(image: torch.Tensor, layout: str = "NCHW") -> torch.Tensor:
    """Luma of an RGB image, one channel, same dtype and layout (torchvision's weights).

    `0.2989 R + 0.587 G + 0.114 B` in float32; uint8 results are truncated, as
    torchvision's `rgb_to_grayscale` does.
    """
    img = as_nchw(image, layout)
    check_channels(img, 3, "rgb_to_gray")
    n, _, h, w = img.view.shape
    out = new_image(n, 1, h, w, image.dtype, image.device, layout)
    return img.restore(_gray(img.view, out))


def _chroma_shape(y: torch.Tensor) -> tuple[int, int, int]:
    n, h, w = y.shape
    return n, (h + 1) // 2, (w + 1) // 2


def _planes(y: torch.Tensor) -> tuple[torch.Tensor, bool]:
    if y.dtype != torch.uint8 or y.dim() not in (2, 3):
        raise ValueError(f"the Y plane is uint8 of shape (N, H, W) or (H, W), not {y.dtype}")
    return (y, True) if y.dim() == 3 else (y[None], False)


def check_yuv420(y: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> None:
    """A ValueError unless `y` is an (N, H, W) uint8 plane and `u`, `v` its chroma planes."""
    if y.dtype != torch.uint8 or y.dim() != 3:
        raise ValueError(f"the Y plane is uint8 of shape (N, H, W), not {y.dtype} {tuple(y.shape)}")
    expected = _chroma_shape(y)
    for name, plane in (("U", u), ("V", v)):
        if tuple(plane.shape) != expected or plane.dtype != torch.uint8:
            raise ValueError(
                f"the {name} plane must be uint8 of shape {expected}, not "
                f"{plane.dtype} {tuple(plane.shape)}"
            )


def _to_rgb(y: torch.Tensor, u: torch.Tensor, v: torch.Tensor, layout: str) -> torch.Tensor:
    y4, batched = _planes(y)
    u, v = (u, v) if batched else (u[None], v[None])
    check_yuv420(y4, u, v)
    n, h, w = y4.shape
    out = new_image(n, 3, h, w, torch.uint8, y.device, layout)
    out = _yuv420_to_rgb(y4, u, v, out)
    out = out.permute(0, 2, 3, 1) if layout == "NHWC" else out
    return out if batched else out[0]


def i420_to_rgb(
    y: torch.Tensor, u: torch.Tensor, v: torch.Tensor, layout: str = "NCHW"
) -> torch.Tensor:
    """Planar YUV 4:2:0 (I420) to RGB uint8, BT.601 limited range.

    `y` is (N, H, W) (or (H, W)), `u` and `v` are (N, ceil(H/2), ceil(W/2)), all uint8.
    Chroma is upsampled by nearest neighbour (each sample covers 2x2 pixels).
    """
    return _to_rgb(y, u, v, layout)


def nv12_to_rgb(y: torch.Tensor, uv: torch.Tensor, layout: str = "NCHW") -> torch.Tensor:
    """Semi-planar YUV 4:2:0 (NV12, NVDEC's output) to RGB uint8, BT.601 limited range.

    `y` is (N, H, W) (or (H, W)); `uv` is (N, ceil(H/2), ceil(W/2), 2), U and V interleaved.
    A packed NV12 buffer of even H splits with `split_nv12`.
    """
    if uv.dim() != y.dim() + 1 or uv.shape[-1] != 2:
        raise ValueError(f"the UV plane is (..., H/2, W/2, 2), not {tuple(uv.shape)}")
    return _to_rgb(y, uv[..., 0], uv[..., 1], layout)


def split_nv12(frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the Y and UV planes of packed NV12 frames of shape (..., H * 3 // 2, W)."""
    rows, w = frames.shape[-2:]
    h = rows * 2 // 3
    if h % 2 or w % 2 or rows != h * 3 // 2:
        raise ValueError(f"packed NV12 needs an even height and width, got {tuple(frames.shape)}")
    uv = frames[..., h:, :].reshape(*frames.shape[:-2], h // 2, w // 2, 2)
    return frames[..., :h, :], uv
