"""Launchers fold what the specialization fixes (codegen/fold.py), and only that."""

from __future__ import annotations

import add as add_example
import pytest
import torch

import tilecraft as tc
from tilecraft.exc import HostCodeError
from tilecraft.testing import assert_close


def fresh(fn: object) -> tc.Kernel:
    """A new kernel of the same function (its own specializations)."""
    return tc.kernel(getattr(fn, "fn", fn))


def launcher_code(kernel: tc.Kernel, *args: torch.Tensor) -> str:
    """The generated launcher (the host function) for these arguments."""
    code = kernel.bind(args).to_triton_code()
    return code[code.index(f"\ndef {kernel.fn.__name__}(") :]


def test_add_allocates_with_constants_and_drops_its_broadcast() -> None:
    add = fresh(add_example.add)
    code = launcher_code(add, torch.randn(5, 7), torch.randn(7))
    assert "torch.empty(5, 7, dtype=_tc_float32, device=_tc_cpu)" in code
    assert "broadcast_tensors" not in code and "promote_types" not in code


CASES = {
    "broadcast": ((5, 7), (7,), torch.float32, torch.float32),
    "promoted": ((5, 7), (5, 1), torch.float32, torch.float64),
    "size 1": ((1, 1), (1,), torch.float32, torch.float32),
    "size 0": ((0, 7), (7,), torch.float32, torch.float32),
}


def test_each_specialization_folds_its_own(mode: object) -> None:
    """A second call with another stride, dtype or shape must not reuse a folded allocation."""
    add = mode(fresh(add_example.add))  # type: ignore[operator]
    x = torch.randn(5, 7)
    for xs, ys, xd, yd in CASES.values():
        a, b = torch.randn(xs, dtype=xd), torch.randn(ys, dtype=yd)
        assert_close(add(a, b), a + b)
        assert add(a, b).dtype == (a + b).dtype
    for y in (torch.randn(7, 5).t(), torch.randn(5, 14)[:, ::2], torch.randn(7)):
        out = add(x, y)  # other strides of y: other specializations, the same shape
        assert out.shape == (5, 7) and out.is_contiguous()
        assert_close(out, x + y)


def _unsqueeze_in_place(t: torch.Tensor) -> None:
    t.unsqueeze_(0)  # changes the tensor object's shape: nothing read before holds


@tc.kernel
def grow(x: torch.Tensor) -> torch.Tensor:
    _unsqueeze_in_place(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    for tile in tc.tile(out.size()):
        out[tile] = x[tile] * 2
    return out


@tc.kernel
def broadcast_kept(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = torch.broadcast_tensors(x, y)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    for tile in tc.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out, y


def test_a_tensor_passed_to_other_code_is_not_folded_after() -> None:
    code = launcher_code(fresh(grow), torch.randn(3, 4))
    assert "torch.empty(x.shape" in code
    out = fresh(grow)(torch.randn(3, 4))
    assert out.shape == (1, 3, 4)


def test_a_broadcast_whose_result_is_returned_stays(mode: object) -> None:
    kernel = mode(fresh(broadcast_kept))  # type: ignore[operator]
    x, y = torch.randn(5, 7), torch.randn(7)
    if getattr(mode, "name", "") == "triton":
        code = launcher_code(kernel, x, y)
        assert "broadcast_tensors" in code and "torch.empty(5, 7" in code
    out, y_out = kernel(x, y)
    assert y_out.shape == (5, 7)
    assert_close(out, x + y)


@pytest.mark.parametrize("value", [3, 5])
def test_int_arguments_fold_by_value(value: int, mode: object) -> None:
    @tc.kernel
    def fill(x: torch.Tensor, n: int) -> torch.Tensor:
        out = torch.zeros([n, x.size(0)], dtype=x.dtype, device=x.device)
        for tile in tc.tile(out.size()):
            out[tile] = out[tile] + 1
        return out

    kernel = mode(fill)  # type: ignore[operator]
    assert_close(kernel(torch.randn(4), value), torch.ones(value, 4))
    assert_close(kernel(torch.randn(4), 2), torch.ones(2, 4))


def test_checks_and_guards_the_key_settles_go() -> None:
    """`m, n = x.size()`, `assert weight.size(0) == n` and the guard of `m` (compiled in):
    all fixed by the shapes, so the launcher keeps only the allocation and the launch."""
    import rms_norm as rms_example

    kernel = fresh(rms_example.rms_norm)
    x, w = torch.randn(6, 10), torch.randn(10)
    code = launcher_code(kernel, x, w)
    assert "_tc_stale" not in code and "assert" not in code and "size()" not in code
    assert_close(kernel(x, w), rms_example.reference(x, w))
    # another specialization runs its host code at bind time: the check fails there
    with pytest.raises(HostCodeError, match="weight has size 9, expected 10") as error:
        kernel(x, torch.randn(9))
    assert "rms_norm.py" in str(error.value)


@tc.kernel
def first_set(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros([x.size(0) + 1], dtype=x.dtype, device=x.device)
    out[0] = 7  # a store into a tensor, of a constant: it stays
    for tile in tc.tile(x.size(0)):
        out[tile.index + 1] = x[tile]
    return out


def test_stores_into_tensors_stay(mode: object) -> None:
    x = torch.randn(5)
    out = mode(fresh(first_set))(x)  # type: ignore[operator]
    assert_close(out, torch.cat([torch.tensor([7.0]), x]))
