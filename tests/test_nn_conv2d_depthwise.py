"""The channels-last depthwise stencil (`tilecraft.nn.conv2d_depthwise`) streaming down rows
(`stream_rows`) against F.conv2d, in both CPU modes (or on TILECRAFT_TEST_DEVICE): every
run length, images whose sizes are not multiples of the blocks or of the run, one-pixel
images, padding and dilation, the epilogue, bfloat16, NaN and inf, and the configs refused."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE

import tilecraft as tc
from tilecraft.exc import InvalidConfig
from tilecraft.nn import conv2d_depthwise as dw
from tilecraft.nn.conv2d import plan

STREAMS = [0, 4, 8, 16]
# ragged everywhere: 5 or 7 columns against blocks of 4, 20 channels against 16
BLOCKS = [16, 16, 8, 16]
STREAM_BLOCKS = {"stream_cols": 4, "stream_channels": 16}
TOLERANCES = {
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    torch.bfloat16: {"atol": 1e-1, "rtol": 2e-2},
}


def _inputs(x_shape, kernel, dtype=torch.float32):
    """A channels-last image, a depthwise filter and a bias, on the test device."""
    channels = x_shape[1]
    x = torch.randn(x_shape, device=DEVICE).to(dtype, memory_format=torch.channels_last)
    w = torch.randn(channels, 1, *kernel, device=DEVICE) / (kernel[0] * kernel[1]) ** 0.5
    return x, w.to(dtype), torch.randn(channels, device=DEVICE).to(dtype)


def _run(mode, x, w, b, stream, activation=None, residual=None, ahead=None, **options):
    """conv2d's depthwise kernel with `stream_rows=stream` (and `stream_ahead=ahead`):
    (output, pre-activation)."""
    _, args = plan(x, w, b, groups=x.size(1), activation=activation, residual=residual,
                   **options)  # fmt: skip
    config = tc.Config(
        block_sizes=BLOCKS, stream_rows=stream, stream_ahead=ahead, num_warps=2, **STREAM_BLOCKS
    )
    return mode(tc.kernel(dw.conv2d_depthwise.fn, config=config))(*args)


def _reference(x, w, b, **options):
    """F.conv2d in float64 on the CPU (a GPU's may pick other algorithms), as float32."""
    x, w, b = (t.cpu().double() for t in (x, w, b))
    return F.conv2d(x, w, b, groups=x.size(1), **options).float().to(DEVICE)


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize(
    ("x_shape", "kernel", "options"),
    [
        ((2, 20, 7, 5), (3, 3), {"padding": 1}),  # 7 rows: runs of 4, 8, 16 all ragged
        ((1, 3, 7, 5), (3, 3), {"padding": 0}),  # no padding: 5 x 3 outputs
        ((1, 1, 1, 1), (3, 3), {"padding": 1}),  # one pixel, one channel, one image
        ((0, 4, 7, 5), (3, 3), {"padding": 1}),  # no images: no programs, an empty output
        ((1, 5, 9, 6), (3, 3), {"padding": (2, 1), "dilation": (2, 1)}),  # dilated rows
        ((2, 6, 6, 7), (5, 3), {"padding": (1, 2), "dilation": (1, 2)}),  # 5 taps a column
    ],
    ids=["ragged", "unpadded", "one-pixel", "no-images", "dilated-rows", "tall-filter"],
)
def test_stream_rows(mode, stream, x_shape, kernel, options) -> None:
    x, w, b = _inputs(x_shape, kernel)
    out, _ = _run(mode, x, w, b, stream, **options)
    torch.testing.assert_close(out, _reference(x, w, b, **options), **TOLERANCES[torch.float32])
    if out.numel():
        assert out.is_contiguous(memory_format=torch.channels_last) or out[0, 0].numel() == 1


@pytest.mark.parametrize("stream", [4, 16])
def test_stream_rows_epilogue(mode, stream) -> None:
    """The residual, the activation and the pre-activation the backward keeps."""
    x, w, b = _inputs((2, 24, 7, 5), (3, 3))
    ref = _reference(x, w, b, padding=1)
    r = torch.randn_like(ref).to(memory_format=torch.channels_last)
    out, pre = _run(mode, x, w, b, stream, activation="silu", residual=r, padding=1)
    torch.testing.assert_close(pre, ref + r, **TOLERANCES[torch.float32])
    torch.testing.assert_close(out, F.silu(ref + r), **TOLERANCES[torch.float32])


@pytest.mark.parametrize(("stream", "ahead"), [(4, 0), (4, 2), (8, 2)])
def test_stream_ahead(mode, stream, ahead) -> None:
    """Input rows loaded 0 or 2 rows ahead of the row being summed (1 by default): the
    same sums, dilated rows too (whose window spans more rows), ragged last runs."""
    for options in ({"padding": 1}, {"padding": (2, 1), "dilation": (2, 1)}):
        x, w, b = _inputs((2, 5, 9, 6), (3, 3))
        out, _ = _run(mode, x, w, b, stream, ahead=ahead, **options)
        want = _reference(x, w, b, **options)
        torch.testing.assert_close(out, want, **TOLERANCES[torch.float32])


@pytest.mark.parametrize("stream", STREAMS)
def test_stream_rows_bfloat16(mode, stream) -> None:
    x, w, b = _inputs((2, 20, 7, 5), (3, 3), torch.bfloat16)
    out, _ = _run(mode, x, w, b, stream, activation="relu", padding=1)
    assert out.dtype == torch.bfloat16
    want = F.relu(_reference(x, w, b, padding=1))
    torch.testing.assert_close(out.float(), want, **TOLERANCES[torch.bfloat16])


@pytest.mark.parametrize("stream", [4, 8])
def test_stream_rows_nan_and_inf(mode, stream) -> None:
    """A NaN and an inf reach only the outputs whose taps read them: the window's rows are
    each pixel's own, padding never multiplies them."""
    x, w, b = _inputs((1, 3, 7, 5), (3, 3))
    x[0, 1, 2, 3], x[0, 2, 5, 0] = float("nan"), float("inf")
    out, _ = _run(mode, x, w, b, stream, padding=1)
    want = _reference(x, w, b, padding=1)
    torch.testing.assert_close(out, want, equal_nan=True, **TOLERANCES[torch.float32])
    assert out[0, 1, 1:4, 2:5].isnan().all() and out[0, 1].isnan().sum() == 9
    assert out[0, 2, 4:7, :2].isinf().all() and not out[0, 2].isnan().any()
    assert torch.isfinite(out[0, 0]).all()


def test_channels_last_depthwise_dispatch() -> None:
    """conv2d runs channels-last depthwise filters through this kernel, streaming 4 rows of
    16 columns by 32 channels by default at stride 1 (tiles of positions at stride 2, where
    streaming is no choice)."""
    x, w, b = _inputs((2, 8, 7, 5), (3, 3))
    op, args = plan(x, w, b, padding=1, groups=8)
    assert op.kernel is dw.conv2d_depthwise
    default = op.kernel.bind(args).default_config
    assert [default.get(k) for k in ("stream_rows", "stream_cols", "stream_channels")] == [
        4,
        16,
        32,
    ]
    _, strided = plan(x, w, b, stride=2, padding=1, groups=8)
    bound = op.kernel.bind(strided)
    assert bound.default_config.get("stream_rows") == 0
    assert bound.spec.tunables["stream_rows"].values == (0,)


def test_stream_rows_reads_each_input_row_once() -> None:
    """The generated code loads each input row's shifted tiles once per program: (run +
    filter rows - 1) rows of kernel_w loads, not run x kernel_h x kernel_w."""
    x, w, b = _inputs((2, 8, 7, 5), (3, 3))
    _, args = plan(x, w, b, padding=1, groups=8)
    bound = dw.conv2d_depthwise.bind(args)
    code = bound.to_triton_code(tc.Config(block_sizes=BLOCKS, stream_rows=8, **STREAM_BLOCKS))
    kernels = code.split("\ndef ")  # the three tilings' device functions, then the launcher
    streaming = next(k for k in kernels if k.startswith("_conv2d_depthwise_kernel2("))
    assert streaming.count("tl.load(x + ") == (8 + 2) * 3
    assert code.count("tl.load(x + ") == (8 + 2) * 3 + 2 * 9  # the others' 9 taps each


def test_stream_rows_refused_configs() -> None:
    """Strided convolutions (either direction), streaming with row tiles and rows ahead
    without streaming are refused (InvalidConfig: the tuner skips the config); the other
    tilings still run strided convolutions."""
    x, w, b = _inputs((1, 4, 7, 5), (3, 3))
    for stride in (2, (2, 1), (1, 2)):
        _, args = plan(x, w, b, stride=stride, padding=1, groups=4)
        bound = dw.conv2d_depthwise.bind(args)
        with pytest.raises(InvalidConfig, match="stride 1"):
            bound.to_triton_code(tc.Config(block_sizes=BLOCKS, stream_rows=4))
        bound.to_triton_code(tc.Config(block_sizes=BLOCKS, tile_rows=2))  # streams no rows
    bound = dw.conv2d_depthwise.bind(plan(x, w, b, padding=1, groups=4)[1])
    with pytest.raises(InvalidConfig, match="exclude"):
        bound.to_triton_code(tc.Config(stream_rows=4, tile_rows=2))
    with pytest.raises(InvalidConfig, match="stream_ahead=2 needs"):
        bound.to_triton_code(tc.Config(stream_rows=0, stream_ahead=2))
    bound.to_triton_code(tc.Config(stream_rows=0, tile_rows=2))


def test_stream_rows_refused_in_eager_mode(mode) -> None:
    x, w, b = _inputs((1, 4, 7, 5), (3, 3))
    with pytest.raises(InvalidConfig, match="stride 1"):
        _run(mode, x, w, b, 8, stride=2, padding=1)
