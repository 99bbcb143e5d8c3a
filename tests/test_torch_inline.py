"""Operators traced into torch.compile graphs as their Triton kernels (tilecraft/torch/inline.py).

On a CPU the launches cannot be traced (Triton's interpreter), so these tests check what
decides it, the launches' refusals and the float arguments' halves; on a GPU, that
compiled graphs launch the kernels themselves, forward and backward, with the same
answers as eager calls.
"""

from __future__ import annotations

import itertools
import math
import struct

import pytest
import rms_norm_backward as rms_example
import torch

import tilecraft as tc
from tilecraft.autotune import tune
from tilecraft.codegen.module import double_halves
from tilecraft.testing import assert_close
from tilecraft.torch import inline

_ids = itertools.count()
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


@pytest.mark.parametrize(
    "value", [0.0, -0.0, 1.0, -1.5, 1e-5, 1 / 3, 5e-324, -1e300, math.inf, -math.inf, math.nan]
)
def test_double_halves_rebuild_the_bits(value: float) -> None:
    high, low = double_halves(value)
    assert all(-(2**31) <= h < 2**31 for h in (high, low))
    bits = (high << 32) | (low & 0xFFFFFFFF)
    assert struct.pack("<q", bits) == struct.pack("<d", value)


@tc.kernel
def _scale(x: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in tc.tile(x.size(0)):
        out[t] = x[t] * s
    return out


@pytest.mark.parametrize("s", [1e-300, -1 / 3, 2.0**-1074, -math.inf])
def test_host_floats_keep_double_precision(s: float) -> None:
    x = torch.ones(37, dtype=torch.float64)
    assert torch.equal(_scale(x, s), x * s)


class _Kernel:
    """Stands in for a Triton kernel: records the launches that get through."""

    def __init__(self) -> None:
        self.launches: list[tuple] = []

    def __getitem__(self, grid: tuple) -> object:
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))


def test_traced_launches_refuse_what_inductor_cannot_take(monkeypatch) -> None:
    monkeypatch.setattr(torch.library, "wrap_triton", lambda k: k)
    kernel = _Kernel()
    traced = inline._Traced(kernel)
    traced[(3,)](1, 2**31 - 1, -(2**31), 0.5, BLOCK=16, num_warps=4)
    assert kernel.launches == [((3,), (1, 2**31 - 1, -(2**31), 0.5), {"BLOCK": 16, "num_warps": 4})]
    for args, kwargs in [((2**31,), {}), ((-(2**31) - 1,), {}), ((1,), {"maxnreg": 128})]:
        with pytest.raises(inline.NotTraceable):
            traced[(3,)](*args, **kwargs)
    assert len(kernel.launches) == 1


def test_cpu_calls_stay_operator_calls() -> None:
    x, w = torch.randn(9, 33), torch.randn(33)
    assert inline.traceable_launcher(rms_example.rms_norm_op.kernel, (x, w, 1e-5)) is None


def test_stand_ins_have_the_metadata() -> None:
    base = torch.randn(10, 12)
    for t in (base, base[2:, 3:9], base.t(), base[:0], torch.randn(())):
        s = inline._stand_in(t)
        assert (s.shape, s.stride(), s.storage_offset(), s.dtype) == (
            t.shape,
            t.stride(),
            t.storage_offset(),
            t.dtype,
        )


def _kernel_runs(monkeypatch, *kernels: tc.Kernel) -> list[str]:
    """The kernels' Python calls from now on, by name."""
    calls: list[str] = []
    for kernel in kernels:
        monkeypatch.setattr(kernel, "run", _counted(kernel, calls))
    return calls


def _counted(kernel: tc.Kernel, calls: list[str]) -> object:
    run = kernel.run

    def counted(args: tuple) -> object:
        calls.append(kernel.fn.__name__)
        return run(args)

    return counted


@cuda
def test_compiled_graph_launches_the_kernels(monkeypatch) -> None:
    op = rms_example.rms_norm_op
    for kernel in (op.kernel, rms_example.rms_norm_backward):  # no tuning in a test
        monkeypatch.setattr(kernel.settings, "autotune_effort", "none")

    def step(compiled: bool) -> list[torch.Tensor]:
        x = torch.linspace(-3, 3, 301 * 257, device="cuda").view(301, 257).requires_grad_()
        w = torch.linspace(0.5, 2, 257, device="cuda").requires_grad_()
        forward = torch.compile(_loss, fullgraph=True) if compiled else _loss
        y, loss = forward(op, x, w)
        loss.backward()
        return [y, x.grad, w.grad]

    expected = step(compiled=False)
    step(compiled=True)  # traced and compiled here
    calls = _kernel_runs(monkeypatch, op.kernel, rms_example.rms_norm_backward)
    for actual, want in zip(step(compiled=True), expected, strict=True):
        assert_close(actual, want)
    assert calls == []  # no tilecraft call at run time: inductor launched the kernels


def _loss(op: tc.torch.TorchOp, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = op(x, w)
    return y, (y * y).sum()


@tc.kernel
def _gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(index, dtype=x.dtype)
    for t in tc.tile(index.size(0)):
        out[t] = x[index[t]]
    return out


@cuda
def test_a_kernel_that_would_tune_tunes_while_traced(monkeypatch, tmp_path) -> None:
    kernel = tc.kernel(_scale.fn, autotune_effort="quick")
    monkeypatch.setattr(kernel.settings, "cache_dir", tmp_path)  # nothing tuned before
    op = kernel.as_torch_op(f"tctest::inline_scale_{next(_ids)}")
    tuned: list[tuple] = []
    monkeypatch.setattr(tune, "autotune", lambda bound, args, *a, **k: tuned.append(args))
    x = torch.randn(64, device="cuda")
    assert inline.traceable_launcher(kernel, (x, 2.0)) is not None
    assert tuned
    compiled = torch.compile(lambda x: op(x, 2.0), fullgraph=True)
    assert_close(compiled(x), x * 2)
    # on stand-ins of x (AOTAutograd traces twice; a real tuning's cached config ends it)
    assert tuned and all(args[0].shape == x.shape and args[0] is not x for args in tuned)
    calls = _kernel_runs(monkeypatch, kernel)
    assert_close(compiled(x), x * 2)
    assert calls == []


@cuda
def test_a_kernel_of_indices_that_would_tune_stays_an_operator_call(monkeypatch) -> None:
    kernel = tc.kernel(_gather.fn, autotune_effort="quick")
    op = kernel.as_torch_op(f"tctest::inline_gather_{next(_ids)}")
    x, index = torch.randn(50, device="cuda"), torch.randint(50, (70,), device="cuda")
    assert inline.traceable_launcher(kernel, (x, index)) is None
    calls = _kernel_runs(monkeypatch, kernel)
    monkeypatch.setattr(tune, "autotune", lambda *args, **options: None)  # the default runs
    assert_close(torch.compile(op, fullgraph=True)(x, index), x[index])
    assert calls  # the compiled graph called the operator
