"""The antialiased preprocess kernel for shrinks by whole factors
(tilecraft/vision/antialias_whole.py), in both CPU modes, against torchvision's float32
resize and against the kernels it replaces there."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE
from test_vision_antialias_batch import MEAN, STD, reference

import tilecraft as tc
import tilecraft.vision as vision
from tilecraft.vision import antialias_batch, antialias_whole

# float16 outputs of at most (1 - 0.406) / 0.225 = 2.64: half a float16 step there, and the
# float32 reference's own rounding
EXACT = 2e-3
# the kernels it replaces: float16 weights and row sums (test_vision_antialias_batch.py)
FLOAT16_SUMS = 0.25 / 255 / 0.224


def _frames(n: int, c: int, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, device=DEVICE)
    return x, x.permute(0, 2, 3, 1).contiguous()  # NHWC, what decoders give


@pytest.mark.parametrize("factor", [1, 2, 3, 4])
def test_tap_weights_are_torchvisions(factor):
    # a row of `factor * 5` pixels, one lit: its weight in the middle output
    first, weights = antialias_whole.tap_weights(factor)
    for d, weight in enumerate(weights, start=first):
        row = torch.zeros(1, 1, 1, factor * 5)
        row[..., factor * 2 + d] = 1.0  # a tap of output 2, whose taps all lie in the row
        got = F.interpolate(row, (1, 5), mode="bilinear", antialias=True)[0, 0, 0, 2]
        torch.testing.assert_close(got, torch.tensor(weight / sum(weights)))


@pytest.mark.parametrize("order", ["pixels", "channels", "loop"])
@pytest.mark.parametrize(
    "shape, size, letterbox",
    [
        ((3, 3, 9, 15), (3, 5), False),  # factor 3, ragged tiles and group of frames
        ((1, 3, 2, 4), (1, 1), False),  # to one pixel: both edges drop taps at once
        ((2, 1, 44, 26), (11, 13), False),  # gray, factors 4 and 2
        ((1, 4, 14, 21), (7, 7), False),  # RGBA, factors 2 and 3
        ((2, 3, 5, 24), (5, 6), False),  # rows kept (factor 1), columns by 4
        ((1, 3, 12, 30), (10, 10), True),  # letterboxed into a 4 x 10 box: factor 3
        ((2, 3, 30, 12), (10, 10), True),  # into a 10 x 4 box, 3 columns from the left
    ],
)
def test_whole_factors(mode, monkeypatch, order, shape, size, letterbox):
    config = tc.Config(rows=4, cols=8, frames=2, order=order)
    kernel = mode(tc.kernel(antialias_whole._whole_frames.fn, config=config))
    monkeypatch.setattr(antialias_whole, "_whole_frames", kernel)
    x, frames = _frames(*shape)
    stats = (MEAN, STD) if shape[1] == 3 else ([0.5] * shape[1], [0.224] * shape[1])
    with monkeypatch.context() as m:  # the kernels it replaces
        m.setattr(antialias_whole, "ENABLED", False)
        before = vision.preprocess(frames, size, *stats, letterbox=letterbox, antialias=True)
    calls = []
    monkeypatch.setattr(antialias_batch, "resize_normalize", calls.append)
    got = vision.preprocess(frames, size, *stats, letterbox=letterbox, antialias=True)
    assert not calls  # this kernel ran, not the others
    assert got.dtype == torch.float16 and got.shape == (shape[0], shape[1], *size)
    expected = reference(x, size, letterbox, stats)
    torch.testing.assert_close(got.float(), expected, atol=EXACT, rtol=0)
    torch.testing.assert_close(got.float(), before.float(), atol=FLOAT16_SUMS, rtol=0)


@pytest.mark.parametrize(
    "shape, size, layout",
    [
        ((2, 3, 37, 53), (11, 19), "NHWC"),  # not whole
        ((1, 3, 10, 15), (2, 3), "NHWC"),  # whole, but 5: more taps than unrolled
        ((1, 3, 9, 12), (3, 4), "NCHW"),  # whole, but planes, not packed rows
    ],
)
def test_other_shrinks_take_the_batch_kernels(monkeypatch, shape, size, layout):
    calls = []
    monkeypatch.setattr(antialias_whole, "_whole_frames", calls.append)
    x, frames = _frames(*shape)
    got = vision.preprocess(
        frames if layout == "NHWC" else x, size, MEAN, STD, layout=layout, antialias=True
    )
    assert not calls
    torch.testing.assert_close(
        got.float(), reference(x, size, False, (MEAN, STD)), atol=FLOAT16_SUMS, rtol=0
    )


def test_the_loop_sums_integers():
    # 1080p -> 640x360 (factor 3), 8 output rows a program: a strip loads each of its 26
    # input rows' 5 column taps once; byte loads, integer products and sums, and one
    # conversion to float32 an output (the normalizing multiply)
    samples = torch.empty(16, 1080, 1920 * 3, dtype=torch.uint8)
    out = torch.empty(16, 3, 360, 640, dtype=torch.float16)
    stats = torch.zeros(3), torch.ones(3)
    args = (samples, *stats, out, 0, 0, 360, 640, 114.0, 255.0)
    config = tc.Config(rows=8, cols=32, frames=1, order="pixels")
    code = antialias_whole._whole_frames.bind(args).to_triton_code(config)
    loop = code.split("for offset_")[1].split("\ndef ")[0]
    assert loop.count("tl.load(samples") == (3 * 7 + 5) * 5
    assert loop.count(".to(tl.float32)") == 8  # a row each
    assert "tl.int32" in loop


def test_bench_vision_times_the_kernels_before_too(monkeypatch):
    # `--variants` runs the whole-factor shrink by this kernel, and by the packed kernel with
    # this one switched off, in one process
    from test_benchmarks import load_script

    script = load_script("bench_vision", monkeypatch)
    entries = script.variant_configs()
    ran = []
    for module, name in [(antialias_whole, "_whole_frames"), (antialias_batch, "_packed_frames")]:
        monkeypatch.setattr(module, name, lambda *args, name=name: ran.append(name) or args[3])
    _, frames = _frames(1, 3, 9, 15)
    for case in ("[whole]", ""):
        _, _, route = entries[f"preprocess antialiased u8 NHWC -> f16 NCHW {case}".strip()]
        with script.routed(route):
            vision.preprocess(frames, (3, 5), MEAN, STD, antialias=True)
    assert ran == ["_whole_frames", "_packed_frames"]
    assert antialias_whole.ENABLED  # restored
