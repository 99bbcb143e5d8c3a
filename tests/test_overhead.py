"""The per-call path: no re-binding, recompiling, signature binding or host syncs."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator

import pytest
import torch

import tilecraft as tc
from tilecraft.demo import example_kernels
from tilecraft.exc import GraphCaptureError
from tilecraft.runtime import kernel as kernel_module
from tilecraft.runtime.bound import BoundKernel
from tilecraft.runtime.kernel import positional_defaults


def scale(x: torch.Tensor, factor: float = 2.0, offset: int = 1) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * factor + offset
    return out


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How many BoundKernels were created and configs compiled while the test ran."""
    seen = {"bind": 0, "compile": 0}
    init, compile_ = BoundKernel.__init__, BoundKernel.compile

    def counting_init(self: BoundKernel, *args: object) -> None:
        seen["bind"] += 1
        init(self, *args)

    def counting_compile(self: BoundKernel, *args: object) -> object:
        seen["compile"] += 1
        return compile_(self, *args)

    monkeypatch.setattr(BoundKernel, "__init__", counting_init)
    monkeypatch.setattr(BoundKernel, "compile", counting_compile)
    yield seen


@pytest.mark.interpreter
def test_repeated_calls_neither_rebind_nor_recompile(counts: dict[str, int]) -> None:
    kernel = tc.kernel(scale, config=tc.Config(block_sizes=[16]))
    for _ in range(5):
        x = torch.randn(40)  # new tensors of the same shape share the specialization
        torch.testing.assert_close(kernel(x), x * 2.0 + 1)
    kernel(x, 2.0, 1)  # defaults given positionally
    kernel(x, factor=3.0)  # a keyword; floats are not specialized on
    assert counts == {"bind": 1, "compile": 1}
    kernel(torch.randn(41))  # a new shape is a new specialization
    kernel(x, 2.0, 7)  # so is a new int
    assert counts == {"bind": 3, "compile": 3}


def test_calls_without_keywords_skip_signature_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = tc.kernel(scale, config=tc.Config(block_sizes=[16]))
    x = torch.randn(20)
    expected = kernel(x)

    class NoBind:
        def bind(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("signature.bind on the fast path")

    monkeypatch.setattr(kernel, "signature", NoBind())
    torch.testing.assert_close(kernel(x), expected)
    torch.testing.assert_close(kernel(x, 2.0), expected)


def test_positional_defaults() -> None:
    assert positional_defaults(inspect.signature(scale)) == {3: (), 2: (1,), 1: (2.0, 1)}
    assert positional_defaults(inspect.signature(lambda a, *, b=1: a)) == {}
    assert positional_defaults(inspect.signature(lambda: 0)) == {0: ()}


def test_a_first_call_inside_graph_capture_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = tc.kernel(scale, config=tc.Config(block_sizes=[16]))
    x = torch.randn(20)
    kernel(x)  # warmed up: later calls of this shape are capturable
    monkeypatch.setattr(kernel_module, "_capturing", lambda args: True)
    kernel(x)
    with pytest.raises(GraphCaptureError, match="call it once with the same shapes"):
        kernel(torch.randn(21))


SYNCS = (".item()", "synchronize", ".cpu()", ".tolist()", ".numpy()")
# example kernels of training steps (examples/transformer_block.py's, forward and backward,
# and softmax's); its attention is tilecraft.nn's, checked in test_attention.py
MODEL_EXAMPLES = ("matmul", "rms_norm", "rms_norm_backward", "softmax", "softmax_backward")
MODEL_EXAMPLES += ("cross_entropy", "cross_entropy_backward", "linear_fused")


@pytest.mark.parametrize("example", MODEL_EXAMPLES)
def test_generated_launchers_never_sync_with_the_device(example: str) -> None:
    """Host code that reads device values would stall every call and break graph capture."""
    module = importlib.import_module(example)
    for _, kernel in example_kernels(module):
        code = kernel.bind(module.inputs()).to_triton_code()
        assert not [s for s in SYNCS if s in code], code
