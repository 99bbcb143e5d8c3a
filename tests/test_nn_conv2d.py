"""tilecraft.nn.conv2d against F.conv2d and autograd, in both CPU modes: every option, NCHW
and channels-last, ragged images, one-element batches, float32 and low precision."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tilecraft.exc import UnsupportedOperation
from tilecraft.nn import conv2d
from tilecraft.nn import conv2d_backward as bwd
from tilecraft.nn import conv2d_depthwise as dw
from tilecraft.nn import conv2d_kernels as fwd
from tilecraft.nn import conv2d_planes as planes

pytestmark = pytest.mark.usefixtures("on_test_device")  # a GPU runs these too

KERNELS = [
    fwd.conv2d_gemm,
    fwd.conv2d_pointwise,
    dw.conv2d_depthwise,
    fwd.conv2d_depthwise_planes,
    planes.conv2d_pointwise_planes,
    planes.pointwise_planes_input_grad,
    planes.pointwise_planes_weight_grad,
    bwd.activation_backward,
    bwd.conv2d_input_grad,
    bwd.conv2d_weight_grad,
    bwd.depthwise_input_grad,
    bwd.depthwise_weight_grad,
]
ACTIVATIONS = {None: lambda t: t, "relu": torch.relu, "silu": F.silu, "gelu": F.gelu}
TOLERANCES = {
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    torch.float16: {"atol": 2e-2, "rtol": 1e-2},
    torch.bfloat16: {"atol": 1e-1, "rtol": 2e-2},
}


@pytest.fixture
def modes(mode):
    """Every conv2d kernel, forward and backward, in the test's mode."""
    for kernel in KERNELS:
        mode(kernel)
    return mode


def _reference(x, w, b, r, activation, options):
    out = F.conv2d(x, w, b, **options)
    return ACTIVATIONS[activation](out if r is None else out + r)


def _leaves(x_shape, w_shape, dtype, channels_last, bias, options):
    x = torch.randn(x_shape, dtype=dtype)
    x = x.to(memory_format=torch.channels_last) if channels_last else x
    w = torch.randn(w_shape, dtype=dtype) / (w_shape[1] * w_shape[2] * w_shape[3]) ** 0.5
    b = torch.randn(w_shape[0], dtype=dtype) if bias else None
    return x, w, b


def _compare(x_shape, w_shape, channels_last=False, bias=True, residual=True, activation=None,
             dtype=torch.float32, **options):  # fmt: skip
    x, w, b = _leaves(x_shape, w_shape, dtype, channels_last, bias, options)
    r = None
    if residual:
        r = torch.randn_like(F.conv2d(x.float(), w.float(), None, **options)).to(dtype)
    leaves = [t.requires_grad_() for t in (x, w, b, r) if t is not None]
    out = conv2d(x, w, b, residual=r, activation=activation, **options)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, leaves, grad)
    refs = [t.detach().float().requires_grad_() for t in leaves]
    ref_args = iter(refs)
    args = [next(ref_args) if t is not None else None for t in (x, w, b, r)]
    ref = _reference(*args, activation, options)
    want = torch.autograd.grad(ref, refs, grad.float())
    tol = TOLERANCES[dtype]
    assert out.dtype == dtype and out.shape == ref.shape
    if out.size(1) > 1 and out[0, 0].numel() > 1:  # (else both layouts are the same)
        assert out.is_contiguous(memory_format=torch.channels_last) == channels_last
    torch.testing.assert_close(out.float(), ref, **tol)
    for name, g, e in zip("xwbr", got, want, strict=False):
        assert g.dtype == dtype, name
        torch.testing.assert_close(g.float(), e, **tol, msg=lambda m, n=name: f"grad {n}: {m}")


GEMM = {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "groups": 2}


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "activation", "options", "channels_last"),
    [
        # the implicit GEMM: groups, strides, padding and dilation per dim
        ((2, 4, 5, 7), (6, 2, 3, 2), "relu", GEMM, False),
        ((2, 4, 5, 7), (6, 2, 3, 2), "relu", GEMM, True),
        ((1, 3, 7, 5), (5, 3, 3, 3), "gelu", {"padding": "same", "dilation": 2}, True),
        # more than 16 channels: the reduction padded to whole blocks per tap (fewer run flat)
        ((1, 20, 4, 5), (18, 20, 3, 3), "relu", {"padding": 1, "stride": 2}, True),
        # even filters: 'same' pads one more after than before
        ((1, 2, 5, 6), (3, 2, 2, 4), None, {"padding": "same", "dilation": (1, 3)}, False),
        # 1x1: a plain GEMM (over planes for NCHW, over pixels for channels-last; the
        # second NCHW one ragged past a 32 block on every dim, one image), and strided
        # (implicit GEMM)
        ((2, 5, 6, 5), (3, 5, 1, 1), "silu", {}, False),
        ((1, 40, 3, 11), (33, 40, 1, 1), "relu", {"dilation": 2}, False),
        ((2, 5, 6, 5), (3, 5, 1, 1), "silu", {}, True),
        ((2, 5, 5, 3), (4, 5, 1, 1), None, {"stride": 2}, False),
        # depthwise: the stencil; a channel multiplier of 2 goes to the implicit GEMM
        ((2, 6, 7, 5), (6, 1, 3, 3), "relu", {"stride": 2, "padding": 1, "groups": 6}, False),
        ((2, 6, 7, 5), (6, 1, 3, 3), "relu", {"stride": 2, "padding": 1, "groups": 6}, True),
        ((1, 3, 6, 7), (3, 1, 5, 3), "silu", {"padding": (2, 0), "dilation": (1, 2),
                                              "groups": 3}, True),
        ((1, 3, 5, 4), (6, 1, 3, 3), None, {"padding": 1, "groups": 3}, False),
    ],
    ids=["gemm-nchw", "gemm-nhwc", "same-dilated", "padded-taps", "same-even",
         "pointwise-nchw", "pointwise-nchw-ragged", "pointwise-nhwc", "pointwise-strided",
         "depthwise-nchw", "depthwise-nhwc", "depthwise-dilated", "multiplier"],
)  # fmt: skip
def test_conv2d(modes, x_shape, w_shape, activation, options, channels_last) -> None:
    _compare(x_shape, w_shape, channels_last, activation=activation, **options)


@pytest.mark.parametrize(
    ("dtype", "w_shape", "groups", "channels_last"),
    [
        (torch.float16, (5, 4, 3, 3), 1, True),
        (torch.bfloat16, (5, 4, 3, 3), 1, True),
        (torch.bfloat16, (4, 1, 3, 3), 4, True),
        (torch.float16, (3, 4, 1, 1), 1, True),
        (torch.bfloat16, (3, 4, 1, 1), 1, False),
    ],
    ids=["gemm-fp16", "gemm-bf16", "depthwise-bf16", "pointwise-fp16", "pointwise-planes-bf16"],
)
def test_conv2d_low_precision(modes, dtype, w_shape, groups: int, channels_last: bool) -> None:
    padding = 1 if w_shape[2] == 3 else 0
    _compare((2, 4, 4, 5), w_shape, channels_last, activation="relu", dtype=dtype,
             padding=padding, groups=groups)  # fmt: skip


def test_conv2d_without_bias_or_residual(modes) -> None:
    _compare((1, 1, 1, 1), (1, 1, 1, 1), bias=False, residual=False)
    _compare((1, 2, 3, 3), (3, 2, 3, 3), bias=False, residual=False, activation="relu")


def test_conv2d_unbatched_and_strided_input(modes) -> None:
    """An unbatched image, and a sliced one (neither layout: copied to NCHW)."""
    x, w = torch.randn(3, 6, 5), torch.randn(4, 3, 3, 3)
    torch.testing.assert_close(conv2d(x, w, padding=1), F.conv2d(x, w, padding=1))
    sliced = torch.randn(2, 3, 8, 9)[:, :, ::2, 1:]
    torch.testing.assert_close(conv2d(sliced, w), F.conv2d(sliced, w))


def test_conv2d_nan_stays_local(modes) -> None:
    """A NaN pixel reaches only the outputs whose taps read it (padding and the padded
    channels of the reduction never multiply it)."""
    x = torch.randn(1, 3, 6, 6).to(memory_format=torch.channels_last)
    x[0, 1, 0, 0] = float("nan")
    w = torch.randn(4, 3, 3, 3)
    out = conv2d(x, w, padding=1)
    torch.testing.assert_close(out, F.conv2d(x, w, padding=1), equal_nan=True)
    assert out[0, :, :2, :2].isnan().all() and not out[0, :, 2:, :].isnan().any()
    relu = conv2d(x, w, padding=1, activation="relu")
    assert relu[0, :, :2, :2].isnan().all()


def test_conv2d_checks() -> None:
    x, w = torch.randn(1, 4, 5, 5), torch.randn(2, 4, 3, 3)
    with pytest.raises(ValueError, match="groups"):
        conv2d(x, w, groups=3)
    with pytest.raises(ValueError, match="input channels"):
        conv2d(x, torch.randn(2, 3, 3, 3))
    with pytest.raises(ValueError, match="activation"):
        conv2d(x, w, activation="tanh")
    with pytest.raises(ValueError, match="larger"):
        conv2d(x, torch.randn(2, 4, 7, 7))
    with pytest.raises(ValueError, match="same"):
        conv2d(x, w, stride=2, padding="same")
    with pytest.raises(ValueError, match="residual"):
        conv2d(x, w, residual=torch.randn(1, 2, 5, 5))
    with pytest.raises(ValueError, match="dtype"):
        conv2d(x, w.double())
    with pytest.raises(UnsupportedOperation, match="float64"):
        conv2d(x.double(), w.double())


def test_conv2d_operators_under_torch_compile() -> None:
    """The forward operators pass opcheck (fake tensors, autograd registration), and a
    forward and backward traced by torch.compile (fullgraph) matches eager PyTorch."""
    from tilecraft.nn.conv2d import plan

    x = torch.randn(1, 4, 5, 4).to(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(6, 2, 3, 3, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    op, args = plan(x.detach(), w.detach(), padding=1, groups=2, activation="silu")
    torch.library.opcheck(op.op, args)

    def step(x, w, b):
        return conv2d(x, w, b, padding=1, groups=2, activation="gelu").square().sum()

    loss = torch.compile(step, fullgraph=True, backend="aot_eager")(x, w, b)
    grads = torch.autograd.grad(loss, (x, w, b))
    ref = F.gelu(F.conv2d(x, w, b, padding=1, groups=2)).square().sum()
    want = torch.autograd.grad(ref, (x, w, b))
    torch.testing.assert_close(loss, ref, atol=1e-3, rtol=1e-4)
    for got, expected in zip(grads, want, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-4)


def test_conv2d_empty_batch(modes) -> None:
    """Zero images: an empty result and zero weight and bias gradients, as PyTorch gives."""
    x = torch.randn(0, 3, 5, 5, requires_grad=True)
    for w_shape, groups in (((4, 3, 3, 3), 1), ((3, 1, 3, 3), 3), ((4, 3, 1, 1), 1)):
        w = torch.randn(w_shape, requires_grad=True)
        b = torch.randn(w_shape[0], requires_grad=True)
        padding = w_shape[2] // 2
        out = conv2d(x, w, b, padding=padding, groups=groups, activation="relu")
        assert out.shape == (0, w_shape[0], 5, 5)
        grads = torch.autograd.grad(out.sum(), (x, w, b))
        assert grads[0].shape == x.shape and not grads[1].any() and not grads[2].any()


def test_conv2d_rejects_a_reduction_block_across_taps() -> None:
    """A hand-written config whose reduction block spans two taps would mix them: refused."""
    import tilecraft as tc
    from tilecraft.exc import InvalidConfig
    from tilecraft.nn.conv2d import plan

    op, args = plan(torch.randn(1, 20, 5, 5), torch.randn(3, 20, 3, 3), padding=1)  # padded
    bound = op.kernel.bind(args)
    bound.to_triton_code(tc.Config(block_sizes=[32, 16, 16]))  # the largest that fits
    with pytest.raises(InvalidConfig, match="reduction block 64"):
        bound.to_triton_code(tc.Config(block_sizes=[64, 16, 16]))


@pytest.mark.interpreter
@pytest.mark.parametrize("blocks", [[16, 16, 16], [64, 32, 32]])
def test_conv2d_configs(blocks: list[int]) -> None:
    """Compiled with other configs (Triton's interpreter): reduction blocks smaller than a
    tap's padded channels (several per tap) or equal to them, and the weight gradient's
    reduction split in chunks."""
    import tilecraft as tc
    from tilecraft.nn.conv2d import plan

    x = torch.randn(2, 40, 5, 6).to(memory_format=torch.channels_last)
    w = torch.randn(8, 40, 3, 3) / 10
    options = {"padding": 1, "stride": (1, 2)}
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ref = F.conv2d(xr, wr, **options)
    grad = torch.randn_like(ref)
    ref.backward(grad)
    op, args = plan(x, w, **options)
    out = op.kernel.bind(args).compile(tc.Config(block_sizes=blocks))(*args)[0]
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    geometry = (1, 2, 1, 1, 1, 1, 1)
    dx_args = (grad, args[1], x, *geometry, True)
    dx_config = tc.Config(block_sizes=[min(blocks[0], 32), *blocks[1:]])  # 8 channels: 32
    dx = bwd.conv2d_input_grad.bind(dx_args).compile(dx_config)(*dx_args)
    torch.testing.assert_close(dx, xr.grad, atol=1e-4, rtol=1e-4)
    dw_args = (grad, x, args[1], *geometry)
    splits = tc.Config(block_sizes=blocks, splits=blocks[0] // 8)  # 2 or 8 chunks
    dw = bwd.conv2d_weight_grad.bind(dw_args).compile(splits)(*dw_args)
    torch.testing.assert_close(dw, wr.grad, atol=1e-4, rtol=1e-4)


SPLIT_CASES = [
    # (x shape, w shape, channels-last, options, splits): padded taps with groups (4 chunks:
    # the last lie past the reduction's end, ragged or empty), a flat reduction (3 channels)
    # on NCHW, and 1x1 filters (the plain GEMM) in both layouts
    ((2, 40, 5, 6), (6, 20, 3, 3), True, {"stride": (2, 1), "padding": 1, "dilation": (1, 2),
                                          "groups": 2}, 4),
    ((1, 3, 7, 5), (5, 3, 5, 5), False, {"stride": 2, "padding": 2}, 2),
    ((2, 40, 5, 3), (9, 40, 1, 1), True, {}, 4),
    ((2, 40, 5, 3), (9, 40, 1, 1), False, {}, 2),
]  # fmt: skip


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "channels_last", "options", "splits"),
    SPLIT_CASES,
    ids=["gemm-groups-nhwc", "gemm-flat-nchw", "pointwise-nhwc", "pointwise-nchw"],
)
def test_conv2d_split_k(mode, x_shape, w_shape, channels_last, options, splits) -> None:
    """The reduction split in chunks (split-K: float32 partial sums, then a second pass that
    adds them and applies the epilogue) gives the unsplit result, pre-activation included."""
    import tilecraft as tc
    from tilecraft.nn.conv2d import plan

    x, w, b = _leaves(x_shape, w_shape, torch.float32, channels_last, True, options)
    ref = F.conv2d(x, w, b, **options)
    r = torch.randn_like(ref)
    x[0, 0, 0, 0] = float("inf")  # stays where it is: no chunk reads past its end
    ref = F.conv2d(x, w, b, **options) + r
    op, args = plan(x, w, b, activation="silu", residual=r, **options)
    config = tc.Config(block_sizes=[16, 16, 16], splits=splits)
    kernel = mode(tc.kernel(op.kernel.fn, config=config))
    out, pre = kernel(*args)
    torch.testing.assert_close(pre, ref, atol=1e-4, rtol=1e-4, equal_nan=True)
    torch.testing.assert_close(out, F.silu(ref), atol=1e-4, rtol=1e-4, equal_nan=True)
    assert out.is_contiguous(memory_format=torch.channels_last) == channels_last
    assert not torch.isfinite(ref).all()  # the inf reached some outputs (and only those)


def test_conv2d_split_k_defaults() -> None:
    """Split-K is offered where each chunk keeps a few blocks, and off by default (the
    measured default: see `k_splits`)."""
    assert fwd.k_splits(9 * 512).default == 1 and fwd.k_splits(9 * 512).high == 16
    assert fwd.k_splits(2048).high == 8  # res5 1x1 reduce: chunks of 4 blocks of 64
    assert fwd.k_splits(64).high == 1  # too short a reduction to split
    assert fwd.split_chunk(288, 32, 4) == 96 and fwd.split_chunk(147, 64, 1) == 192


def test_conv2d_pointwise_kernels() -> None:
    """1x1 filters at stride 1 without padding are plain GEMMs: over planes for NCHW images,
    over pixels for channels-last ones; strided ones stay implicit GEMMs."""
    from tilecraft.nn.conv2d import plan

    x, w = torch.randn(2, 8, 5, 5), torch.randn(4, 8, 1, 1)
    nhwc = x.to(memory_format=torch.channels_last)
    assert plan(x, w)[0].kernel is planes.conv2d_pointwise_planes
    assert plan(x, w, dilation=3)[0].kernel is planes.conv2d_pointwise_planes
    assert plan(nhwc, w)[0].kernel is fwd.conv2d_pointwise
    assert plan(x, w, stride=2)[0].kernel is fwd.conv2d_gemm
    assert plan(x, w, padding=1)[0].kernel is fwd.conv2d_gemm
    op, args = plan(x, w, torch.randn(4), activation="gelu", residual=torch.randn(2, 4, 5, 5))
    torch.library.opcheck(op.op, args)


def test_conv2d_pointwise_planes_other_layouts(modes) -> None:
    """An NCHW 1x1 convolution given a channels-last residual, and a channels-last output
    gradient (no activation: it reaches the backward as it came)."""
    x = torch.randn(2, 6, 3, 5, requires_grad=True)
    w = torch.randn(7, 6, 1, 1, requires_grad=True)
    r = torch.randn(2, 7, 3, 5).to(memory_format=torch.channels_last).requires_grad_()
    grad = torch.randn(2, 7, 3, 5).to(memory_format=torch.channels_last)
    out = conv2d(x, w, residual=r)
    assert out.is_contiguous()
    got = torch.autograd.grad(out, (x, w, r), grad)
    ref = F.conv2d(x, w) + r
    want = torch.autograd.grad(ref, (x, w, r), grad)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


@pytest.mark.interpreter
@pytest.mark.parametrize("splits", [2, 8])
def test_pointwise_planes_weight_grad_chunks(splits: int) -> None:
    """The NCHW 1x1 weight gradient's reduction in chunks: of whole images (3 images in 2
    chunks: one ragged), and of runs of each image's pixels (8 chunks of 3 images: 2 runs
    each, the last ragged) with blocks smaller than the channels."""
    import tilecraft as tc

    x, grad, w = torch.randn(3, 20, 5, 7), torch.randn(3, 18, 5, 7), torch.randn(18, 20, 1, 1)
    want = torch.ops.aten.convolution_backward(
        grad, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, False]
    )
    assert planes.chunks(3, 35, splits) == ((2, 1, 35) if splits == 2 else (1, 2, 18))
    args = (grad, x, w)
    config = tc.Config(block_sizes=[16, 16, 16], splits=splits)
    dw = planes.pointwise_planes_weight_grad.bind(args).compile(config)(*args)
    torch.testing.assert_close(dw, want[1], atol=1e-4, rtol=1e-4)
    dx_config = tc.Config(block_sizes=[16, 16, 16])
    dx = planes.pointwise_planes_input_grad.bind((grad, w, x))
    dx = dx.compile(dx_config)(grad, w, x)
    torch.testing.assert_close(dx, want[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("rows", [2, 4])
def test_conv2d_depthwise_in_tiles_of_rows(mode, rows: int) -> None:
    """The channels-last depthwise stencil in tiles of output rows by columns (`tile_rows`):
    tiles that straddle two images, ragged columns and channels, strides and dilation."""
    import tilecraft as tc
    from tilecraft.nn.conv2d import plan

    options = {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "groups": 40}
    x, w, b = _leaves((2, 40, 9, 9), (40, 1, 3, 3), torch.float32, True, True, options)
    r = torch.randn_like(F.conv2d(x, w, b, **options))
    ref = F.conv2d(x, w, b, **options) + r  # 5 rows an image: a tile straddles the two
    op, args = plan(x, w, b, activation="silu", residual=r, **options)
    assert op.kernel is dw.conv2d_depthwise
    config = tc.Config(block_sizes=[16, 16, 8, 16], tile_rows=rows, num_warps=2)
    out, pre = mode(tc.kernel(op.kernel.fn, config=config))(*args)
    torch.testing.assert_close(pre, ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out, F.silu(ref), atol=1e-4, rtol=1e-4)
    assert out.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("indexing", ["pointer", "tensor_descriptor"])
def test_conv2d_pointwise_planes_image_tiles(mode, indexing: str) -> None:
    """The NCHW 1x1 GEMM reading the image as [1, block, block] tiles (`image_tiles`, which
    tensor descriptors can load): ragged channels and pixels, the epilogue's bias, residual
    and activation."""
    import tilecraft as tc
    from tilecraft.nn.conv2d import plan

    x, w, b = _leaves((2, 40, 4, 12), (24, 40, 1, 1), torch.float32, False, True, {})
    r = torch.randn(2, 24, 4, 12)
    op, args = plan(x, w, b, activation="gelu", residual=r)
    config = tc.Config(block_sizes=[16, 16, 32], image_tiles=True, indexing=[indexing] * 8)
    out, pre = mode(tc.kernel(op.kernel.fn, config=config))(*args)
    ref = F.conv2d(x, w, b) + r
    torch.testing.assert_close(pre, ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out, F.gelu(ref), atol=1e-4, rtol=1e-4)
