"""The antialiased preprocess kernels that walk frames (tilecraft/vision/antialias_batch.py),
and `x.view(dtype)` on tiles (their uint8 -> float16 bit trick), in both CPU modes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE

import tilecraft as tc
import tilecraft.vision as vision
from tilecraft.exc import TilecraftError
from tilecraft.vision import antialias_batch


def _bits(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.float16, device=x.device)
    for t in tc.tile(x.size(0)):
        out[t] = (x[t].to(torch.int16) | 0x6400).view(torch.float16) - 1024.0
    return out


def _round_trip(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in tc.tile(x.size(0)):
        flipped = (x[t].view(torch.int32) ^ -2147483648).view(torch.float32)
        out[t] = torch.where(
            flipped < 0, (flipped.view(torch.int32) ^ -2147483648).view(torch.float32), -flipped
        )
    return out


def test_view_dtype_is_a_bit_cast(mode):
    x = torch.arange(256, dtype=torch.int32, device=DEVICE).to(torch.uint8)[:253]  # ragged
    bits = mode(tc.kernel(_bits, config=tc.Config(block_sizes=[32])))
    assert torch.equal(bits(x), x.to(torch.float16))  # 0x6400 | x is 1024 + x
    floats = torch.tensor([1.5, -0.0, float("inf"), float("nan"), 3e-39], device=DEVICE)
    flip = mode(tc.kernel(_round_trip, config=tc.Config(block_sizes=[4])))
    # the sign bit flipped through integers, then back (NaN too) or negated: every value
    # back, bit for bit (zeros' signs too), NaN as NaN
    got, nan = flip(floats), floats.isnan()  # a GPU's arithmetic gives NaN its own payload
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int32), floats[~nan].view(torch.int32))


def test_view_dtype_keeps_the_element_size():
    def widen(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=torch.float32)
        for t in tc.tile(x.size(0)):
            out[t] = x[t].view(torch.float32)
        return out

    with pytest.raises(TilecraftError, match="element size"):
        tc.kernel(widen)(torch.zeros(4, dtype=torch.int16))


MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def reference(x, size, letterbox, stats):
    """torchvision's antialiased resize (into the letterbox), normalized, in float32."""
    top, left, h, w = vision.letterbox_box(x.shape[2:], size) if letterbox else (0, 0, *size)
    inner = F.interpolate(x.float(), (h, w), mode="bilinear", antialias=True)
    resized = F.pad(inner, (left, size[1] - left - w, top, size[0] - top - h), value=114.0)
    mean, std = (torch.tensor(v, device=DEVICE)[:, None, None] for v in stats)
    return (resized / 255 - mean) / std


# small tiles that do not divide the shapes below; 2 frames per program (batches of 3:
# a program with one frame)
CONFIGS = {
    "packed": dict(rows=16, cols=8, step=32, frames=2),
    "planes": dict(rows=16, cols=16, step=16, frames=2),
}


@pytest.mark.parametrize("kernel", ["packed", "planes"])
@pytest.mark.parametrize(
    "shape, size, letterbox, convert",
    [
        # shrinking, ragged tiles, a ragged group of frames
        ((3, 3, 37, 53), (11, 19), False, "bits"),
        ((3, 3, 37, 53), (11, 19), False, "direct"),  # uint8 -> float16 converted
        ((1, 3, 37, 53), (12, 9), True, "bits"),  # letterboxed: borders around it
        ((1, 3, 1, 1), (3, 5), False, "bits"),  # one pixel, grown (plain bilinear weights)
        ((2, 4, 9, 13), (4, 5), False, "bits"),  # RGBA: four channels in a packed row
        ((1, 1, 19, 6), (1, 1), False, "bits"),  # gray, to one pixel: the mean of triangles
    ],
)
def test_preprocess_walking_frames(mode, monkeypatch, kernel, shape, size, letterbox, convert):
    name = "_packed_frames" if kernel == "packed" else "_planes_frames"
    config = tc.Config(**CONFIGS[kernel], convert=convert)
    monkeypatch.setattr(
        antialias_batch, name, mode(tc.kernel(getattr(antialias_batch, name).fn, config=config))
    )
    monkeypatch.setattr(antialias_batch, "KERNEL", kernel)
    calls = []
    monkeypatch.setattr(
        antialias_batch, "_packed_frames" if kernel == "planes" else "_planes_frames", calls.append
    )
    x = torch.randint(0, 256, shape, dtype=torch.uint8, device=DEVICE)
    frames = x.permute(0, 2, 3, 1).contiguous()  # NHWC, what decoders give
    c = shape[1]
    stats = (MEAN, STD) if c == 3 else ([0.5] * c, [0.224] * c)
    got = vision.preprocess(frames, size, *stats, letterbox=letterbox, antialias=True)
    assert not calls  # the kernel chosen ran, not the other
    assert got.dtype == torch.float16 and got.shape == (shape[0], c, *size)
    expected = reference(x, size, letterbox, stats)
    # float16 weights and row sums: within 0.25 of a level of 255, over the std
    torch.testing.assert_close(got.float(), expected, atol=0.25 / 255 / 0.224, rtol=0)


def test_planar_frames_take_the_planes_kernel(monkeypatch):
    # NCHW frames have no packed rows: the "packed" choice runs the planes kernel for them
    calls = []
    monkeypatch.setattr(antialias_batch, "_packed_frames", calls.append)
    x = torch.randint(0, 256, (2, 3, 20, 30), dtype=torch.uint8, device=DEVICE)
    got = vision.preprocess(x, (7, 10), MEAN, STD, layout="NCHW", antialias=True)
    torch.testing.assert_close(
        got.float(), reference(x, (7, 10), False, (MEAN, STD)), atol=0.25 / 255 / 0.224, rtol=0
    )
    assert not calls


@pytest.mark.parametrize("c, limit", [(3, 20000), (4, 70000), (1, 100), (3, 1)])
def test_divider_divides_exactly(c, limit):
    magic, shift = antialias_batch.divider(c, limit)
    x = torch.arange(limit, dtype=torch.int64)
    assert torch.equal((x * magic) >> shift, x // c)
    assert (limit - 1) * magic < 2**31  # no int32 overflow


def test_packed_default_narrows_for_far_shrinks():
    out = torch.empty(1, 3, 360, 640, dtype=torch.float16)
    for width, cols in [(1920, 16), (3840, 8)]:  # 1080p: 16 columns; 4K: 8
        samples = torch.empty(1, 4, width * 3, dtype=torch.uint8)
        config = antialias_batch._packed_default((samples, None, None, out, 0, 0, 360, 640))
        assert config.tunables["cols"] == cols and config.tunables["frames"] == 16


@pytest.mark.interpreter
def test_bench_vision_times_only_the_cases_asked(tmp_path, monkeypatch):
    from test_benchmarks import load_script

    script = load_script("bench_vision", monkeypatch)
    monkeypatch.setattr(script, "torchvision_functional", lambda: None)
    argv = ["--device", "cpu", "--smoke", "--batch", "1", "--sizes", "1080p"]
    argv += ["--only", "preprocess antialiased", "--out", str(tmp_path / "aa.json")]
    rows = script.main(argv)["rows"]
    kernels = [row["kernel"] for row in rows]
    assert kernels == ["copy (ceiling)", "preprocess antialiased u8 NHWC -> f16 NCHW"]
    assert all(row["matches"] for row in rows), rows


@pytest.mark.parametrize(
    "stage, order, shape, size, letterbox",
    [
        ("halves", "rows", (3, 3, 37, 53), (11, 19), False),
        ("bytes", "lanes", (3, 3, 37, 53), (11, 19), False),
        ("halves", "lanes", (2, 4, 9, 13), (6, 5), True),  # RGBA, letterboxed
        ("halves", "samples", (3, 3, 37, 53), (11, 19), False),
        ("bytes", "samples", (1, 3, 37, 53), (12, 9), True),
    ],
)
def test_packed_staging_and_operand_order(mode, monkeypatch, stage, order, shape, size, letterbox):
    # the samples staged as float16 or as bytes; the column weights the first or the second
    # operand of the column sums (the result transposed back before the store)
    config = tc.Config(**CONFIGS["packed"], stage=stage, order=order)
    kernel = mode(tc.kernel(antialias_batch._packed_frames.fn, config=config))
    monkeypatch.setattr(antialias_batch, "_packed_frames", kernel)
    monkeypatch.setattr(antialias_batch, "KERNEL", "packed")
    x = torch.randint(0, 256, shape, dtype=torch.uint8, device=DEVICE)
    c = shape[1]
    stats = (MEAN, STD) if c == 3 else ([0.5] * c, [0.224] * c)
    frames = x.permute(0, 2, 3, 1).contiguous()
    got = vision.preprocess(frames, size, *stats, letterbox=letterbox, antialias=True)
    expected = reference(x, size, letterbox, stats)
    torch.testing.assert_close(got.float(), expected, atol=0.25 / 255 / 0.224, rtol=0)
