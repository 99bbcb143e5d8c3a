"""tilecraft.vision against plain-PyTorch references (torchvision's formulas), both CPU modes."""

from __future__ import annotations

import json
import types

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE

import tilecraft as tc
import tilecraft.vision as vision
from tilecraft.vision import (
    antialias,
    antialias_batch,
    color,
    downscale,
    filters,
    geometry,
    preprocessing,
    statistics,
)
from tilecraft.vision._device import uint8_levels
from tilecraft.vision.color import B_U, G_U, G_V, R_V, Y_SCALE

# the GPU contracts a*b + c into one fused multiply-add, which can move a value across a
# rounding (or truncation) boundary: one level there, exact on the CPU
EXACT = 0 if DEVICE == "cpu" else 1
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture
def vmode(mode):
    """Put every vision kernel in the test's mode."""
    modules = (antialias, antialias_batch, color, downscale, filters, geometry, preprocessing)
    for module in (*modules, statistics):
        kernels = [k for k in vars(module).values() if isinstance(k, tc.Kernel)]
        assert kernels, module
        for kernel in kernels:
            mode(kernel)
    return mode


@pytest.fixture(params=[False, True], ids=["gather", "packed"])
def packed(request, monkeypatch):
    """The uint8 NHWC resizes through the packed tensor-core kernel, or not (the default)."""
    monkeypatch.setattr(antialias, "PACKED", request.param)
    return request.param


def images(shape=(2, 3, 3, 5), layout="NCHW") -> tuple[torch.Tensor, torch.Tensor]:
    """A uint8 NCHW batch, and the same pixels in `layout`."""
    x = torch.randint(0, 256, shape, dtype=torch.uint8, device=DEVICE)
    return x, (x.permute(0, 2, 3, 1).contiguous() if layout == "NHWC" else x)


def nchw(image: torch.Tensor, layout: str) -> torch.Tensor:
    return image.permute(0, 3, 1, 2) if layout == "NHWC" else image


def reflect_conv(image: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """Depthwise cross-correlation with `taps` (2-D) over reflect-padded float32 images."""
    ry, rx = taps.shape[0] // 2, taps.shape[1] // 2
    padded = F.pad(image.float(), (rx, rx, ry, ry), mode="reflect")
    c = image.shape[1]
    return F.conv2d(padded, taps.float()[None, None].expand(c, 1, *taps.shape), groups=c)


def assert_levels(actual: torch.Tensor, expected: torch.Tensor, levels: int = 0) -> None:
    assert actual.dtype == torch.uint8 and actual.shape == expected.shape
    assert (actual.int() - expected.int()).abs().max().item() <= levels


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_rgb_bgr_gray(vmode, layout):
    x, xl = images(layout=layout)
    assert torch.equal(nchw(vision.rgb_to_bgr(xl, layout), layout), x.flip(1))
    gray = x[:, :1].float() * 0.2989 + x[:, 1:2].float() * 0.587 + x[:, 2:].float() * 0.114
    assert_levels(nchw(vision.rgb_to_gray(xl, layout), layout), gray.to(torch.uint8), EXACT)
    xf = x[0, :, :1, :1].float() / 255  # one float pixel, unbatched CHW
    torch.testing.assert_close(vision.rgb_to_gray(xf), gray[0, :, :1, :1] / 255)


def yuv_reference(y: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    h, w = y.shape[-2:]

    def up(p: torch.Tensor) -> torch.Tensor:
        return p.repeat_interleave(2, -2).repeat_interleave(2, -1)[..., :h, :w].float() - 128

    luma, cb, cr = (y.float() - 16) * Y_SCALE, up(u), up(v)
    rgb = (luma + R_V * cr, luma + G_U * cb + G_V * cr, luma + B_U * cb)
    return torch.stack(rgb, 1).round().clamp(0, 255).to(torch.uint8)


def test_yuv420(vmode):
    y = torch.randint(0, 256, (2, 3, 5), dtype=torch.uint8, device=DEVICE)  # odd: chroma is 2x3
    uv = torch.randint(0, 256, (2, 2, 3, 2), dtype=torch.uint8, device=DEVICE)
    expected = yuv_reference(y, uv[..., 0], uv[..., 1])  # saturates on random values
    assert_levels(vision.nv12_to_rgb(y, uv), expected, EXACT)
    planar = vision.i420_to_rgb(y, uv[..., 0].contiguous(), uv[..., 1].contiguous(), "NHWC")
    assert_levels(planar.permute(0, 3, 1, 2), expected, EXACT)
    # BT.601 limited range: white, black and red, as a decoder's output means them
    yuv = torch.tensor(
        [[235, 128, 128], [16, 128, 128], [81, 90, 240]], dtype=torch.uint8, device=DEVICE
    )
    one = [vision.i420_to_rgb(*(p.view(1, 1) for p in row)).flatten() for row in yuv]
    assert [t.tolist() for t in one[:2]] == [[255, 255, 255], [0, 0, 0]]
    assert (one[2].cpu().int() - torch.tensor([255, 0, 0])).abs().max() <= 1


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_yuv420_words(vmode, layout, monkeypatch):
    """Even widths go through `_yuv420_words` (16-bit words, one program per tile of chroma
    samples): an odd height (the last chroma row covers one luma row), rows of words that
    are no multiple of a block, one frame; both formats, both layouts, equal to the
    reference, as the per-pixel kernel's results are."""
    for n, h, w in [(2, 5, 14), (1, 1, 2), (1, 6, 1030)]:
        y = torch.randint(0, 256, (n, h, w), dtype=torch.uint8, device=DEVICE)
        uv = torch.randint(0, 256, (n, (h + 1) // 2, w // 2, 2), dtype=torch.uint8, device=DEVICE)
        expected = yuv_reference(y, uv[..., 0], uv[..., 1])
        with monkeypatch.context() as patch:  # the words kernel, or a TypeError
            patch.setattr(color, "_yuv420_to_rgb", None)
            nv12 = nchw(vision.nv12_to_rgb(y, uv, layout), layout)
            u, v = uv[..., 0].contiguous(), uv[..., 1].contiguous()
            planar = vision.i420_to_rgb(y, u, v, layout)
        assert_levels(nv12, expected, EXACT)
        assert_levels(nchw(planar, layout), expected, EXACT)
        # unbatched, and planes at odd offsets (no word view): the per-pixel kernel
        one = nchw(vision.nv12_to_rgb(y[0], uv[0], layout)[None], layout)
        assert_levels(one, expected[:1], EXACT)
        shifted = torch.empty(y.numel() + 1, dtype=torch.uint8, device=DEVICE)
        shifted[1:] = y.flatten()
        odd = vision.nv12_to_rgb(shifted[1:].view(y.shape), uv, layout)
        assert_levels(nchw(odd, layout), expected, EXACT)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_yuv420_words_bits(vmode, layout, monkeypatch):
    """`levels="bits"`: integers and floats converted through 2**23's exponent, the same
    levels (every Y, U and V agree in eager mode on the CPU; checked once, too slow here):
    every luma over chroma at the edges of the range, on 2 x 4 word tiles."""
    config = tc.Config(block_sizes=[2, 4], levels="bits")
    kernel = vmode(tc.kernel(color._yuv420_words.fn, config=config))
    monkeypatch.setattr(color, "_yuv420_words", kernel)
    y = torch.arange(256, dtype=torch.uint8, device=DEVICE).view(1, 4, 64)
    edges = torch.tensor([0, 16, 127, 128, 129, 235, 240, 255], dtype=torch.uint8)
    grid = torch.stack(torch.meshgrid(edges, edges, indexing="ij"), -1).view(2, 32, 2)
    uv = grid.to(DEVICE)[None]
    expected = yuv_reference(y, uv[..., 0], uv[..., 1])
    assert_levels(nchw(vision.nv12_to_rgb(y, uv, layout), layout), expected, EXACT)
    u, v = uv[..., 0].contiguous(), uv[..., 1].contiguous()
    assert_levels(nchw(vision.i420_to_rgb(y, u, v, layout), layout), expected, EXACT)


def test_uint8_levels_round_half_to_even():
    values = torch.tensor([-300.0, -0.5, 0.5, 1.5, 2.5, 2.4999, 254.5, 255.5, 1e9, -1e9])
    expected = torch.clamp(torch.round(values), 0, 255)
    assert torch.equal(uint8_levels(values), expected)


def test_split_nv12():
    frames = torch.arange(2 * 6 * 4, dtype=torch.uint8).view(2, 6, 4)  # H=4, W=4
    y, uv = vision.split_nv12(frames)
    assert y.shape == (2, 4, 4) and uv.shape == (2, 2, 2, 2)
    assert uv[0, 1, 0].tolist() == frames[0, 5, :2].tolist()
    with pytest.raises(ValueError, match="even"):
        vision.split_nv12(torch.zeros(7, 5, dtype=torch.uint8))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_normalize_nhwc_to_nchw(vmode, dtype):
    x, xl = images(layout="NHWC")
    got = vision.normalize(xl, MEAN, STD, dtype=dtype, layout="NHWC")
    assert got.dtype == dtype and got.shape == x.shape and got.is_contiguous()
    mean, std = (torch.tensor(v, device=DEVICE)[:, None, None] for v in (MEAN, STD))
    torch.testing.assert_close(got, ((x.float() / 255 - mean) / std).to(dtype))
    floats = vision.normalize(x.float(), 0.5, 2.0, layout="NCHW", out_layout="NHWC")
    torch.testing.assert_close(floats, ((x.float() - 0.5) / 2).permute(0, 2, 3, 1))
    # channel blocks that do not divide the channels (5), and one pixel of one channel
    five = torch.rand(1, 7, 1, 5, device=DEVICE)  # NHWC: 5 channels
    got = vision.normalize(five, 0.5, 2.0, layout="NHWC")
    torch.testing.assert_close(got, ((five - 0.5) / 2).permute(0, 3, 1, 2))
    pixel = x[:1, :1, :1, :1]
    torch.testing.assert_close(vision.normalize(pixel, [0.5], [2.0]), (pixel / 255 - 0.5) / 2)


def test_flip_crop(vmode):
    x, xl = images(layout="NHWC")
    assert torch.equal(nchw(vision.hflip(xl, "NHWC"), "NHWC"), x.flip(-1))
    assert torch.equal(vision.vflip(x), x.flip(-2))
    # a window leaving the image reads zeros there, as torchvision's crop pads
    window = vision.crop(x, 1, -1, 3, 4)
    assert torch.equal(window, F.pad(x, (1, 1, 0, 1))[:, :, 1:4, 0:4])
    assert vision.crop(x[0], 0, 0, 1, 1).shape == (3, 1, 1)


@pytest.mark.parametrize("size", [(7, 4), (2, 9), (1, 1)])
def test_resize(vmode, packed, size):
    x, xl = images(layout="NHWC")
    assert torch.equal(
        nchw(vision.resize(xl, size, "nearest", "NHWC"), "NHWC"), F.interpolate(x, size)
    )
    expected = F.interpolate(x.float(), size, mode="bilinear", align_corners=False)
    torch.testing.assert_close(vision.resize(x.float(), size), expected)
    assert_levels(nchw(vision.resize(xl, size, layout="NHWC"), "NHWC"), expected.round(), 1)


def averaged(x: torch.Tensor, size: tuple[int, int], interpolation: str) -> torch.Tensor:
    if interpolation == "area":
        return F.interpolate(x.float(), size, mode="area")
    return F.interpolate(x.float(), size, mode="bilinear", antialias=True, align_corners=False)


@pytest.mark.parametrize("interpolation", ["bilinear", "area"])
def test_resize_averaging(vmode, packed, interpolation):
    x, xl = images(shape=(1, 2, 9, 11), layout="NHWC")
    for size in ((4, 5), (15, 3)):  # shrinking both ways, and growing one axis
        expected = averaged(x, size, interpolation)
        got = vision.resize(x.float(), size, interpolation, antialias=True)
        torch.testing.assert_close(got, expected)
        got = vision.resize(xl, size, interpolation, layout="NHWC", antialias=True)
        assert_levels(nchw(got, "NHWC"), expected.round(), 1)
    half = vision.resize(x.half(), (4, 5), interpolation, antialias=True)
    torch.testing.assert_close(half, averaged(x, (4, 5), interpolation).half())


@pytest.mark.parametrize("interpolation", ["bilinear", "area"])
def test_average_rows_all_channels(vmode, monkeypatch, interpolation):
    # every channel of a pixel tile per program, on 4 x 8 tiles that do not divide the
    # images, in both passes: uint8 NHWC (the row pass gathers along the channel stride)
    # and float NCHW
    config = tc.Config(block_sizes=[4, 8, 4, 8], channels="all")
    kernel = vmode(tc.kernel(downscale._average_rows.fn, config=config))
    monkeypatch.setattr(downscale, "_average_rows", kernel)
    x, xl = images(shape=(2, 3, 9, 11), layout="NHWC")
    for size in ((4, 5), (15, 3)):
        expected = averaged(x, size, interpolation)
        got = vision.resize(xl, size, interpolation, layout="NHWC", antialias=True)
        assert_levels(nchw(got, "NHWC"), expected.round(), 1)
        got = vision.resize(x.float(), size, interpolation, antialias=True)
        torch.testing.assert_close(got, expected)


def test_resize_rounds_half_to_even(vmode):
    # (j + 0.5) * 2/3 - 0.5 = 0.5 for j = 1: halfway between 2 and 3 (and 5 and 6)
    x = torch.tensor([[[2, 3]], [[5, 6]]], dtype=torch.uint8, device=DEVICE)
    assert vision.resize(x, (1, 3))[:, 0, 1].tolist() == [2, 6]


def test_letterbox(vmode):
    x, xl = images(layout="NHWC")
    top, left, h, w = box = vision.letterbox_box((3, 5), (8, 8))
    assert box == [1, 0, 5, 8]
    inner = F.interpolate(x.float(), (h, w), mode="bilinear", align_corners=False)
    expected = F.pad(inner, (left, 8 - left - w, top, 8 - top - h), value=114.0)
    assert_levels(nchw(vision.letterbox(xl, (8, 8), layout="NHWC"), "NHWC"), expected.round(), 1)
    torch.testing.assert_close(vision.letterbox(x.float(), (8, 8)), expected)


@pytest.mark.parametrize("zero_taps", ["skip", "read"])
def test_resize_zero_taps(vmode, monkeypatch, zero_taps):
    # a uint8 NHWC resize by whole factors (every second tap has weight 0, which "skip"
    # does not read) and by others, on 2 x 8 tiles of every channel; float images read
    # every tap whatever the knob: a NaN there still spreads, as in F.interpolate
    config = tc.Config(block_sizes=[4, 8, 2, 8, 4, 8], planes="channels", zero_taps=zero_taps)
    kernel = vmode(tc.kernel(geometry._resize_bilinear.fn, config=config))
    monkeypatch.setattr(geometry, "_resize_bilinear", kernel)
    x, xl = images(shape=(2, 3, 12, 33), layout="NHWC")
    for size in ((4, 11), (4, 3), (5, 7)):
        expected = F.interpolate(x.float(), size, mode="bilinear", align_corners=False)
        assert_levels(nchw(vision.resize(xl, size, layout="NHWC"), "NHWC"), expected.round(), 1)
    floats = x.float()
    floats[:, :, 2, 5] = float("nan")  # weight 0 at a third of the size
    expected = F.interpolate(floats, (4, 11), mode="bilinear", align_corners=False)
    assert expected.isnan().any()
    torch.testing.assert_close(vision.resize(floats, (4, 11)), expected, equal_nan=True)
    code = kernel.bind((x, x, 0, 0, 4, 11, 3.0, 3.0, 0.0, True)).to_triton_code(config)
    assert ("!= 0.0" in code) == (zero_taps == "skip")


@pytest.mark.parametrize("planes", ["one", "channels", "all"])
def test_resize_planes(vmode, monkeypatch, planes):
    # every choice of the planes a program resizes, on tiles of 4 x 8 (32 in eager mode)
    # that do not divide the image: uint8 NHWC and float NCHW, resized and letterboxed
    config = tc.Config(block_sizes=[4, 8, 4, 8, 4, 8], planes=planes)
    kernel = vmode(tc.kernel(geometry._resize_bilinear.fn, config=config))
    monkeypatch.setattr(geometry, "_resize_bilinear", kernel)
    x, xl = images(shape=(2, 3, 11, 21), layout="NHWC")
    for size in ((5, 9), (13, 26)):
        expected = F.interpolate(x.float(), size, mode="bilinear", align_corners=False)
        torch.testing.assert_close(vision.resize(x.float(), size), expected)
        assert_levels(nchw(vision.resize(xl, size, layout="NHWC"), "NHWC"), expected.round(), 1)
    top, left, h, w = vision.letterbox_box((11, 21), (9, 9))
    inner = F.interpolate(x.float(), (h, w), mode="bilinear", align_corners=False)
    expected = F.pad(inner, (left, 9 - left - w, top, 9 - top - h), value=114.0)
    assert_levels(nchw(vision.letterbox(xl, (9, 9), layout="NHWC"), "NHWC"), expected.round(), 1)
    torch.testing.assert_close(vision.letterbox(x[:1, :1].float(), (9, 9)), expected[:1, :1])


def test_filters(vmode):
    x, _ = images(shape=(1, 2, 4, 5))
    taps = filters.gaussian_kernel1d(3, 0.8)[:, None] * filters.gaussian_kernel1d(5, 1.1)
    taps = taps.to(DEVICE)
    expected = reflect_conv(x, taps)
    torch.testing.assert_close(vision.gaussian_blur(x.float(), (5, 3), (1.1, 0.8)), expected)
    assert_levels(vision.gaussian_blur(x, (5, 3), (1.1, 0.8)), expected.round(), 1)
    box = vision.box_blur(x.float(), 3)
    torch.testing.assert_close(box, reflect_conv(x, torch.full((3, 3), 1 / 9, device=DEVICE)))
    grad_x, grad_y = vision.sobel(x)
    torch.testing.assert_close(
        grad_x, reflect_conv(x, torch.tensor(filters.SOBEL_X, device=DEVICE))
    )
    torch.testing.assert_close(
        grad_y, reflect_conv(x, torch.tensor(filters.SOBEL_Y, device=DEVICE))
    )
    sharp = reflect_conv(x, taps)
    sharp = x.float() + 1.5 * (x.float() - sharp)  # saturates both ways on random pixels
    assert_levels(vision.unsharp_mask(x, (5, 3), (1.1, 0.8), 1.5), sharp.round().clamp(0, 255), 1)
    one = x[:, :, :1, :1]  # a 1x1 image is its own blur (every tap reads the one pixel)
    assert torch.equal(vision.gaussian_blur(one, 3), one)
    # 5x7 = 35 taps, more than filters.ONE_PASS_TAPS's default: the two-pass kernel
    taps = filters.gaussian_kernel1d(7, 1.5)[:, None] * filters.gaussian_kernel1d(5, 1.1)
    expected = reflect_conv(x, taps.to(DEVICE))
    torch.testing.assert_close(vision.gaussian_blur(x.float(), (5, 7), (1.1, 1.5)), expected)


@pytest.mark.parametrize(
    "one_pass_taps, window_rows", [(25, 0), (0, 0), (0, 4), (0, 8)], ids=["1", "2", "w4", "w8"]
)
def test_blur_tiles(vmode, monkeypatch, one_pass_taps, window_rows):
    # tiles of 16 x 32 (32 x 32 in eager mode), or windows of rows over strips of 32
    # columns: some lie inside the image (shifted loads), the others reflect at borders,
    # and the last window of rows reaches past the image
    config = tc.Config(
        block_sizes=[16, 32, 16, 32, 32], one_pass_taps=one_pass_taps, window_rows=window_rows
    )
    monkeypatch.setattr(
        filters, "_separable", vmode(tc.kernel(filters._separable.fn, config=config))
    )
    x, _ = images(shape=(1, 2, 37, 67))
    taps = filters.gaussian_kernel1d(5, 1.1)[:, None] * filters.gaussian_kernel1d(3, 0.8)
    expected = reflect_conv(x, taps.to(DEVICE))
    torch.testing.assert_close(vision.gaussian_blur(x.float(), (3, 5), (0.8, 1.1)), expected)
    assert_levels(vision.gaussian_blur(x, (3, 5), (0.8, 1.1)), expected.round(), 1)
    sharp = (x.float() + 0.5 * (x.float() - expected)).round().clamp(0, 255)
    assert_levels(vision.unsharp_mask(x, (3, 5), (0.8, 1.1), 0.5), sharp, 1)
    small = x[:, :, :3, :4].float()  # a 5 x 5 window reaches the far side of 3 x 4 pixels
    torch.testing.assert_close(vision.gaussian_blur(small, 5), reflect_conv(small, _taps2d(5)))


def _taps2d(size: int) -> torch.Tensor:
    taps = filters.gaussian_kernel1d(size, 0.3 * ((size - 1) * 0.5 - 1) + 0.8)
    return (taps[:, None] * taps[None, :]).to(DEVICE)


@pytest.mark.parametrize("letterbox", [False, True])
def test_preprocess(vmode, letterbox):
    x, xl = images(shape=(2, 3, 5, 3), layout="NHWC")
    got = vision.preprocess(xl, (4, 7), MEAN, STD, letterbox=letterbox)
    assert got.dtype == torch.float16 and got.shape == (2, 3, 4, 7) and got.is_contiguous()
    if letterbox:
        resized = vision.letterbox(x.float(), (4, 7), pad=114.0)
    else:
        resized = F.interpolate(x.float(), (4, 7), mode="bilinear", align_corners=False)
    mean, std = (torch.tensor(v, device=DEVICE)[:, None, None] for v in (MEAN, STD))
    torch.testing.assert_close(got, ((resized / 255 - mean) / std).half())
    buffer = torch.empty_like(got)  # a steady stream of frames reuses one output buffer
    again = vision.preprocess(xl, (4, 7), MEAN, STD, letterbox=letterbox, out=buffer)
    assert again.data_ptr() == buffer.data_ptr() and torch.equal(again, got)
    with pytest.raises(ValueError, match="out must be torch.float16 of shape"):
        vision.preprocess(xl, (4, 7), MEAN, STD, out=buffer[:1])


@pytest.mark.parametrize("planes", ["channels", "all"])
def test_preprocess_planes(vmode, monkeypatch, planes):
    # one image's channels per program, or the whole batch, on tiles of 4 x 8 that do not
    # divide the frames: resized and letterboxed, NHWC uint8 in, NCHW float16 out
    config = tc.Config(block_sizes=[4, 8, 4, 8], planes=planes)
    kernel = vmode(tc.kernel(preprocessing._resize_normalize.fn, config=config))
    monkeypatch.setattr(preprocessing, "_resize_normalize", kernel)
    x, xl = images(shape=(3, 3, 11, 19), layout="NHWC")
    mean = torch.tensor(MEAN, device=DEVICE)[:, None, None]
    std = torch.tensor(STD, device=DEVICE)[:, None, None]
    for letterbox in (False, True):
        got = vision.preprocess(xl, (9, 10), MEAN, STD, letterbox=letterbox)
        if letterbox:
            resized = vision.letterbox(x.float(), (9, 10), pad=114.0)
        else:
            resized = F.interpolate(x.float(), (9, 10), mode="bilinear", align_corners=False)
        torch.testing.assert_close(got, ((resized / 255 - mean) / std).half())


def antialiased_reference(x, size, letterbox, pad=114.0, stats=(MEAN, STD)):
    """torchvision's antialiased resize (into the letterbox), normalized, in float32."""
    top, left, h, w = vision.letterbox_box(x.shape[2:], size) if letterbox else (0, 0, *size)
    inner = F.interpolate(x.float(), (h, w), mode="bilinear", antialias=True)
    resized = F.pad(inner, (left, size[1] - left - w, top, size[0] - top - h), value=pad)
    mean, std = (torch.tensor(v, device=DEVICE)[:, None, None] for v in stats)
    return (resized / 255 - mean) / std


@pytest.mark.parametrize(
    "shape, size, letterbox, layout",
    [
        ((1, 3, 37, 53), (11, 19), False, "NHWC"),  # shrinking, tiles not filled
        ((1, 3, 37, 53), (12, 9), True, "NCHW"),  # letterboxed: borders around it
        ((1, 3, 1, 1), (3, 5), False, "NHWC"),  # one pixel, grown (plain bilinear weights)
        ((1, 3, 19, 6), (1, 1), False, "NCHW"),  # to one pixel: the mean of triangles
        ((1, 3, 33, 4), (1, 3), True, "NHWC"),  # too far for a tile's window: two passes
        ((1, 4, 9, 13), (4, 5), False, "NHWC"),  # RGBA: four channels in a packed row
    ],
)
def test_preprocess_antialias(vmode, packed, shape, size, letterbox, layout):
    x, xl = images(shape=shape, layout=layout)
    # NHWC rows are read whole (the packed kernel), NCHW planes a channel at a time
    assert (antialias.packed_rows(nchw(xl, layout)) is None) == (layout == "NCHW")
    stats = (MEAN, STD) if shape[1] == 3 else ([0.5] * shape[1], [0.224] * shape[1])
    args = (xl, size, *stats)
    got = vision.preprocess(*args, layout=layout, letterbox=letterbox, antialias=True)
    assert got.dtype == torch.float16 and got.shape == (shape[0], shape[1], *size)
    expected = antialiased_reference(x, size, letterbox, stats=stats)
    # float16 weights and partial sums: within 0.25 of a level of 255, over std 0.224
    torch.testing.assert_close(got.float(), expected, atol=0.25 / 255 / 0.224, rtol=0)
    wrong = vision.preprocess(*args, layout=layout, letterbox=letterbox)
    if shape[2] > size[0] > 1:  # the check can fail: plain bilinear is not antialiased
        assert (wrong.float() - expected).abs().max() > 0.25 / 255 / 0.224


@pytest.mark.parametrize("shape, size", [((1, 3, 8, 12), (4, 6)), ((2, 3, 1, 1), (3, 5))])
def test_preprocess_bilinear_products(vmode, packed, shape, size):
    # NHWC uint8 frames: the packed kernel's products, one per step when the weights are
    # eighths (half size), three (the halves) otherwise (one pixel grown to 3x5)
    assert antialias.eighths(shape[2], size[0]) == (shape[2] > 1)
    x, xl = images(shape=shape, layout="NHWC")
    got = vision.preprocess(xl, size, MEAN, STD)
    resized = F.interpolate(x.float(), size, mode="bilinear", align_corners=False)
    mean, std = (torch.tensor(v, device=DEVICE)[:, None, None] for v in (MEAN, STD))
    torch.testing.assert_close(got, ((resized / 255 - mean) / std).half())


@pytest.mark.parametrize("letterbox", [False, True])
def test_preprocess_nv12(vmode, letterbox):
    y = torch.randint(0, 256, (2, 5, 7), dtype=torch.uint8, device=DEVICE)
    uv = torch.randint(0, 256, (2, 3, 4, 2), dtype=torch.uint8, device=DEVICE)
    got = vision.preprocess_nv12(y, uv, (4, 9), MEAN, STD, letterbox=letterbox)
    rgb = vision.nv12_to_rgb(y, uv)
    expected = vision.preprocess(rgb, (4, 9), MEAN, STD, layout="NCHW", letterbox=letterbox)
    assert got.shape == (2, 3, 4, 9)
    torch.testing.assert_close(got, expected)
    # one frame, unbatched, written into the second slot of a batch buffer
    one = vision.preprocess_nv12(y[0], uv[0], (4, 9), MEAN, STD, letterbox=letterbox, out=got[1])
    assert one.data_ptr() == got[1].data_ptr()
    torch.testing.assert_close(got[1], expected[0])
    # a UV plane with gaps (no 16-bit words: U and V read apart), shrunk by whole factors
    # (taps of weight 0, not read), the same as converting first
    y = torch.randint(0, 256, (1, 6, 12), dtype=torch.uint8, device=DEVICE)
    planes = torch.randint(0, 256, (1, 2, 3, 6), dtype=torch.uint8, device=DEVICE)
    uv = planes.permute(0, 2, 3, 1)
    assert color.words(uv) is None
    for chroma in (uv, uv.contiguous()):
        got = vision.preprocess_nv12(y, chroma, (2, 4), MEAN, STD, letterbox=letterbox)
        rgb = vision.nv12_to_rgb(y, chroma)
        expected = vision.preprocess(rgb, (2, 4), MEAN, STD, layout="NCHW", letterbox=letterbox)
        torch.testing.assert_close(got, expected)


def test_errors():
    x = torch.zeros(1, 2, 3, 3, dtype=torch.uint8)
    with pytest.raises(ValueError, match="layout"):
        vision.hflip(x, "HWCN")
    with pytest.raises(ValueError, match="3 channels"):
        vision.rgb_to_gray(x)
    with pytest.raises(ValueError, match="odd"):
        vision.box_blur(x, 4)
    with pytest.raises(ValueError, match="dtype"):
        vision.normalize(x, 0, 1, dtype=torch.int32)
    with pytest.raises(ValueError, match="uint8"):
        vision.equalize(x.float())
    with pytest.raises(ValueError, match="Y plane"):
        chroma = torch.zeros(2, 2, 2, dtype=torch.uint8)
        vision.preprocess_nv12(x[0, 0].float(), chroma, (2, 2), 0, 1)
    with pytest.raises(ValueError, match="U plane"):
        vision.i420_to_rgb(x[0], x[0], x[0])


def test_pipeline(vmode):
    _, frames = images(shape=(2, 3, 5, 6), layout="NHWC")
    pipeline = vision.Pipeline.parse("crop=5:4:1:0, hflip, blur=3, gray")
    expected = vision.crop(frames, 0, 1, 4, 5, layout="NHWC")
    expected = vision.gaussian_blur(vision.hflip(expected, "NHWC"), 3, layout="NHWC")
    assert torch.equal(pipeline(frames), vision.rgb_to_gray(expected, "NHWC"))
    # a resize followed by normalize runs as the fused kernel: equal to the two passes
    fused = vision.Pipeline.parse("resize=7x4,normalize=float32")(frames)
    resized = vision.resize(frames.float(), (4, 7), layout="NHWC")
    torch.testing.assert_close(fused, vision.normalize(resized / 255, MEAN, STD, layout="NHWC"))
    assert fused.shape == (2, 3, 4, 7) and fused.dtype == torch.float32
    shrunk = vision.Pipeline.parse("resize_aa=2x3")(frames)
    assert torch.equal(shrunk, vision.resize(frames, (3, 2), layout="NHWC", antialias=True))
    fused = vision.Pipeline.parse("resize_aa=2x3,normalize")(frames)  # the antialiased kernel
    expected = antialiased_reference(frames.permute(0, 3, 1, 2), (3, 2), False)
    torch.testing.assert_close(fused.float(), expected, atol=0.25 / 255 / 0.224, rtol=0)


def test_pipeline_from_nv12(vmode):
    y = torch.randint(0, 256, (2, 5, 7), dtype=torch.uint8, device=DEVICE)
    uv = torch.randint(0, 256, (2, 3, 4, 2), dtype=torch.uint8, device=DEVICE)
    rgb = vision.nv12_to_rgb(y, uv, "NHWC")
    fused = vision.Pipeline.parse("letterbox=6x4,normalize,vflip")
    torch.testing.assert_close(fused.from_nv12(y, uv), fused(rgb))
    plain = vision.Pipeline.parse("gray")
    assert torch.equal(plain.from_nv12(y, uv), vision.rgb_to_gray(rgb, "NHWC"))


def test_pipeline_spec_errors():
    with pytest.raises(ValueError, match="unknown op 'sharpen'.*resize"):
        vision.Pipeline.parse("resize=8x8,sharpen")
    with pytest.raises(ValueError, match="bad value '8by8' for the pipeline op 'resize'"):
        vision.Pipeline.parse("resize=8by8")
    with pytest.raises(ValueError, match="bad value 'int8'"):
        vision.Pipeline.parse("normalize=int8")


def pil_equalization_table(counts: list[int]) -> list[int]:
    """PIL's ImageOps.equalize lookup table for one channel, written as PIL does it."""
    present = [count for count in counts if count]
    step = (sum(present) - present[-1]) // 255 if present else 0
    if not step:
        return list(range(256))
    table, acc = [], step // 2
    for count in counts:
        table.append(min(255, acc // step))
        acc += count
    return table


def test_histogram_equalize(vmode):
    x = torch.randint(50, 60, (1, 2, 17, 19), dtype=torch.uint8, device=DEVICE)  # low contrast
    x[0, 1, 0, 0] = 0  # the other channel spans more values
    hist = vision.histogram(x)
    counts = [torch.bincount(x[0, c].flatten().long(), minlength=256).tolist() for c in range(2)]
    assert hist.dtype == torch.int32 and hist[0].tolist() == counts
    tables = torch.tensor([pil_equalization_table(c) for c in counts], device=DEVICE)
    expected = torch.stack([tables[c][x[0, c].long()] for c in range(2)])[None]
    assert torch.equal(vision.equalize(x), expected.to(torch.uint8))
    assert expected.amax().item() == 255  # it did stretch the values
    flat = torch.full((3, 4, 5), 9, dtype=torch.uint8, device=DEVICE)  # one value: kept
    assert torch.equal(vision.equalize(flat, "NHWC"), flat)


def test_empty_images(vmode):
    x, xl = images(layout="NHWC")
    assert vision.crop(x, 0, 0, 0, 3).shape == (2, 3, 0, 3)
    assert vision.resize(x[:0], (2, 2)).shape == (0, 3, 2, 2)
    assert vision.preprocess(xl[:0], (2, 2), MEAN, STD).shape == (0, 3, 2, 2)
    assert vision.histogram(x[:0]).shape == (0, 3, 256)
    pixel = x[:, :, :1, :1].float()  # a single pixel upsampled is that pixel everywhere
    torch.testing.assert_close(vision.resize(pixel, (2, 3)), pixel.expand(2, 3, 2, 3))


@pytest.mark.interpreter
def test_bench_vision_runs_on_the_cpu(tmp_path, monkeypatch):
    from test_benchmarks import load_script

    script = load_script("bench_vision", monkeypatch)
    # torchvision is not a test dependency: a stand-in with its v2 functional signatures
    # checks how the peers are called (their results are only timed, never compared)
    fake = types.SimpleNamespace(
        resize=lambda x, size, antialias=True: F.interpolate(
            x.float(), size, mode="bilinear", antialias=antialias
        ).to(x.dtype),
        to_dtype=lambda x, dtype, scale=False: x.to(dtype) / (255 if scale else 1),
        normalize=lambda x, mean, std: (
            (x - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]
        ),
        rgb_to_grayscale=lambda x: x[:, :1],
        gaussian_blur=lambda x, kernel_size, sigma: x,
    )
    monkeypatch.setattr(script, "torchvision_functional", lambda: fake)
    out = tmp_path / "vision.json"
    # one frame size (4K runs the same code on other shapes): the interpreter is slow
    argv = ["--device", "cpu", "--smoke", "--tune", "--batch", "1", "--sizes", "1080p"]
    argv += ["--out", str(out)]
    efforts = [k.settings.autotune_effort for k in script.vision_kernels()]
    result = script.main(argv)
    assert all(row["matches"] for row in result["rows"]), result["rows"]
    kernels = {row["kernel"] for row in result["rows"]}
    assert "preprocess antialiased u8 NHWC -> f16 NCHW" in kernels
    assert {row["frames"] for row in result["rows"]} == {"1080p"}
    assert sum("torchvision_ms" in row for row in result["rows"]) == 9
    assert script.parse(["--smoke"]).sizes == ["1080p", "4k"]
    assert [k.settings.autotune_effort for k in script.vision_kernels()] == efforts  # restored
    assert json.loads(out.read_text())["rows"] == result["rows"]


@pytest.mark.parametrize("channels", ["tile", "loop"])
def test_normalize_channels(vmode, monkeypatch, channels):
    # channels in the tile or a loop over them per program, on 4 x 8 pixel tiles that do
    # not divide the images: uint8 NHWC -> float16 NCHW, float NCHW -> NHWC float32
    config = tc.Config(block_sizes=[2, 4, 8, 4, 8], channels=channels)
    kernel = vmode(tc.kernel(preprocessing._normalize.fn, config=config))
    monkeypatch.setattr(preprocessing, "_normalize", kernel)
    x, xl = images(shape=(2, 3, 7, 11), layout="NHWC")
    mean, std = (torch.tensor(v, device=DEVICE)[:, None, None] for v in (MEAN, STD))
    got = vision.normalize(xl, MEAN, STD, dtype=torch.float16, layout="NHWC")
    torch.testing.assert_close(got, ((x.float() / 255 - mean) / std).half())
    floats = torch.rand(1, 5, 1, 9, device=DEVICE)  # 5 channels, one row
    got = vision.normalize(floats, 0.5, 2.0, layout="NCHW", out_layout="NHWC")
    torch.testing.assert_close(got, ((floats - 0.5) / 2).permute(0, 2, 3, 1))


@pytest.mark.parametrize(
    "knobs",
    [
        ("stacked", "divide", "float", 4),
        ("strided", "multiply", "bits", 8),
        ("stacked", "divide", "bits", 8),
    ],
)
def test_normalize_words(vmode, monkeypatch, knobs):
    # NHWC uint8 rows as 32-bit words (widths that are multiples of 4), on tiles of 2 rows
    # x 2 groups of 4 or 8 pixels that do not divide the image (nor do the groups, of 8,
    # always divide its rows): 3, 1 and 4 channels
    stores, arithmetic, convert, group = knobs
    knobs = dict(stores=stores, arithmetic=arithmetic, convert=convert, group=group)
    config = tc.Config(block_sizes=[2, 2], **knobs)
    monkeypatch.setattr(
        preprocessing,
        "_normalize_words",
        vmode(tc.kernel(preprocessing._normalize_words.fn, config=config)),
    )
    for shape in [(2, 3, 5, 12), (1, 1, 3, 8), (1, 4, 1, 4)]:
        x, xl = images(shape=shape, layout="NHWC")
        mean, std = (torch.rand(shape[1], device=x.device) + 0.1 for _ in range(2))
        with monkeypatch.context() as patch:  # the words kernel, or a TypeError
            patch.setattr(preprocessing, "_normalize", None)
            got = vision.normalize(xl, mean, std, dtype=torch.float32, layout="NHWC")
        expected = (x.float() / 255 - mean[:, None, None]) / std[:, None, None]
        if arithmetic == "divide" and DEVICE == "cpu":  # the formula's own operations: equal
            assert torch.equal(got, expected)  # (a GPU may fuse `x * (1 / peak) - mean`)
        torch.testing.assert_close(got, expected)
        half = vision.normalize(xl, mean, std, dtype=torch.float16, layout="NHWC")
        torch.testing.assert_close(half, expected.half())
    # a width not a multiple of 4, and an NHWC view with gaps: the per-channel kernel
    x, xl = images(shape=(1, 3, 2, 6), layout="NHWC")
    for image in (xl, xl[:, :, :4]):
        got = vision.normalize(image, 0.5, 0.25, layout="NHWC")
        expected = (nchw(image, "NHWC").float() / 255 - 0.5) / 0.25
        torch.testing.assert_close(got, expected)


def test_color_narrow_tiles(vmode, monkeypatch):
    # gray and NV12 on tiles of 2 x 8 (the narrow shapes `--variants` times), ragged
    config = tc.Config(block_sizes=[2, 8], num_warps=1)
    for name in ("_gray", "_yuv420_to_rgb", "_yuv420_words"):
        kernel = vmode(tc.kernel(getattr(color, name).fn, config=config))
        monkeypatch.setattr(color, name, kernel)
    x, xl = images(shape=(2, 3, 5, 11), layout="NHWC")
    floats = x.float()
    gray = floats[:, :1] * 0.2989 + floats[:, 1:2] * 0.587 + floats[:, 2:] * 0.114
    assert_levels(nchw(vision.rgb_to_gray(xl, "NHWC"), "NHWC"), gray.to(torch.uint8), EXACT)
    torch.testing.assert_close(vision.rgb_to_gray(floats / 255), gray / 255)
    y = x[:, 0].contiguous()  # odd: chroma is 3 x 6
    uv = x[:, 1:, :3, :6].permute(0, 2, 3, 1).contiguous()
    expected = yuv_reference(y, uv[..., 0], uv[..., 1])
    assert_levels(vision.nv12_to_rgb(y, uv), expected, EXACT)
    # an even width: words, 2 chroma rows x 8 words per tile over 3 x 5
    y, uv = y[..., :10].contiguous(), uv[:, :, :5].contiguous()
    assert_levels(vision.nv12_to_rgb(y, uv), expected[..., :10], EXACT)


@pytest.mark.interpreter
def test_bench_vision_variants_on_the_cpu(tmp_path, monkeypatch):
    from test_benchmarks import load_script

    script = load_script("bench_vision", monkeypatch)
    every = script.variant_configs()
    # two variants of each kernel (the interpreter is slow); the others differ in numbers
    few = {name: (path, configs[:2], *rest) for name, (path, configs, *rest) in every.items()}
    monkeypatch.setattr(script, "variant_configs", lambda: few)
    kernels = [script.kernel_at(path) for path, *_ in every.values()]
    before = [(k.config, k._bound) for k in kernels]
    out = tmp_path / "variants.json"
    argv = ["--device", "cpu", "--smoke", "--variants", "--batch", "1", "--out", str(out)]
    rows = script.main(argv)["rows"]
    assert all(row["matches"] for row in rows), rows
    assert len(rows) == 3 * len(every)  # the heuristic and two variants each
    assert [(k.config, k._bound) for k in kernels] == before  # configs restored
    assert "| resize bilinear f32 half-size | 1x128 w4 | yes |" in script.variants_table(rows)
    only = script.main([*argv, "--only", "normalize,gray"])["rows"]
    assert {row["kernel"] for row in only} == {
        "normalize NHWC u8 -> NCHW f16",
        "normalize NHWC u8 -> NCHW f16 per-channel bytes (before)",
        "rgb_to_gray uint8",
    }
    broken = {"gaussian_blur 5x5 f32": ("filters._separable", [("bad", tc.Config(nope=1))])}
    monkeypatch.setattr(script, "variant_configs", lambda: broken)
    rows = script.main(argv)["rows"]  # a config that fails is reported, and the run goes on
    assert [bool(row.get("error")) for row in rows] == [False, True]


def test_the_kernels_run_their_measured_default_configs() -> None:
    """The configs measured fastest on the H200 are the kernels' defaults (not silently
    dropped for the heuristic's: a wrong one would raise InvalidConfig), no wider than
    the image needs."""
    from tilecraft.vision import color, downscale, filters, geometry, preprocessing

    frames = torch.rand(2, 3, 8, 300)  # 150 columns out: room for 128-wide tiles
    vision.resize(frames, (4, 150))
    vision.gaussian_blur(frames, 5)
    vision.resize(frames, (4, 150), antialias=True)
    nhwc = (torch.rand(2, 8, 300, 3) * 255).to(torch.uint8)
    vision.resize(nhwc, (4, 150), antialias=True, layout="NHWC")
    vision.rgb_to_gray(torch.rand(1, 3, 4, 40))  # 64 columns: the 2048-wide default shrinks
    ours = ("300", "150", "40]")  # this test's widths (other tests bind other shapes)
    picked = {
        name: [
            b.default_config for b in kernel._bound.values() if any(w in b.spec_key for w in ours)
        ]
        for name, kernel in [
            ("resize", geometry._resize_bilinear),
            ("blur", filters._separable),
            ("antialias", downscale._average_rows),
            ("gray", color._gray),
        ]
    }
    assert all(c.tunables["planes"] == "channels" for c in picked["resize"]), picked
    assert all(c.block_sizes[2:4] == [2, 128] for c in picked["resize"]), picked
    assert all(c.tunables["window_rows"] == 16 for c in picked["blur"]), picked
    rows = [(c.tunables["channels"], c.block_sizes) for c in picked["antialias"]]
    assert ("one", [1, 128]) in [(m, b[:2]) for m, b in rows], rows  # planar row pass
    assert ("all", [1, 128]) in [(m, b[2:]) for m, b in rows], rows  # NHWC row pass
    assert [c.block_sizes for c in picked["gray"]] == [[1, 64]], picked
    assert preprocessing.MEASURED.block_sizes == [1, 128, None, None]
