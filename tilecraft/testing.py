"""Checking kernels against PyTorch references, with tolerances per dtype.

With TILECRAFT_CROSS_COMPILE set to a compute capability (90: Hopper), each compiled run
on CPU tensors also compiles its Triton code for that GPU (`compile_for_gpu`): the
interpreter runs code that a GPU's compiler refuses."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tilecraft.runtime.cpu import cpu_mode, runs_on_cpu

TOLERANCES = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float64: (1e-7, 1e-9),
}


def assert_close(
    actual: Any,
    expected: Any,
    dtype: torch.dtype | None = None,
    equal_nan: bool = False,
    msg: str | None = None,
) -> None:
    """Compare a kernel's outputs with a reference (tensors or tuples of them).

    With `equal_nan=True`, NaN must appear in exactly the same places in both.
    """
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), msg
        for a, e in zip(actual, expected, strict=True):
            assert_close(a, e, dtype, equal_nan, msg)
        return
    rtol, atol = TOLERANCES.get(dtype or expected.dtype, (0.0, 0.0))
    torch.testing.assert_close(
        actual,
        expected.to(actual.dtype),
        rtol=rtol,
        atol=atol,
        equal_nan=equal_nan,
        msg=None if msg is None else lambda m: f"{msg}: {m}",
    )


REL_ERROR_LIMITS = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """`||actual - expected|| / ||expected||`, computed in float64."""
    diff = (actual.double() - expected.double()).norm()
    return (diff / expected.double().norm().clamp_min(1e-30)).item()


def matrices(shape: tuple, dtype: torch.dtype, device: str | torch.device | None = None) -> tuple:
    """Random `[m, k]` and `[k, n]` matrices for `shape` = (m, k, n) or (m, k) (n = m)."""
    dev = device or default_device()
    m, k, n = shape if len(shape) == 3 else (*shape, shape[0])
    return (torch.randn(m, k, dtype=dtype, device=dev), torch.randn(k, n, dtype=dtype, device=dev))


def default_device() -> torch.device:
    """The GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


MODES = ("eager", "triton")


def check_modes(
    kernel: Any,
    args: Sequence[Any],
    reference: Callable[..., Any],
    dtype: torch.dtype | None = None,
    config: Any = None,
    modes: Sequence[str] = MODES,
) -> dict[str, Any]:
    """Run `kernel(*args)` in each mode and check it against `reference(*args)` and across modes.

    Modes: "eager" (TILECRAFT_INTERPRET: the body runs in PyTorch) and "triton" (the
    generated code; on CPU arguments, under Triton's interpreter). Every run gets fresh
    copies of `args`. Results must match the reference within `dtype`'s tolerance, have
    its shape and dtype, and hold NaN in the same places; the modes must agree the same
    way with each other. A kernel returning None is judged by the tensors it wrote to.
    Returns each mode's result.

    Example::

        check_modes(softmax, (torch.randn(5, 7),), lambda x: torch.softmax(x, -1))
    """
    expected = _outputs(reference, _copies(args))
    results = {mode: run_mode(kernel, args, mode, config) for mode in modes}
    for mode, result in results.items():
        _check_same(result, expected, dtype, f"{mode} vs reference")
    names = list(results)
    for other in names[1:]:
        _check_same(results[other], results[names[0]], dtype, f"{other} vs {names[0]}")
    return results


def run_mode(kernel: Any, args: Sequence[Any], mode: str, config: Any = None) -> Any:
    """`kernel` run on copies of `args` in `mode` ("eager" or "triton"); what it returns, or
    the tensor arguments it wrote to when it returns None."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    copies = _copies(args)
    if mode == "eager":
        return _outputs(lambda *a: kernel.run_eagerly(kernel.normalize(a, {}), config), copies)
    if runs_on_cpu(copies) and cpu_mode() != "triton":
        if torch.cuda.is_available():  # no interpreter beside a GPU: compile for the GPU
            gpu = _clone(copies, "cuda")
            return _clone(run_mode(kernel, gpu, mode, config), "cpu")
        raise RuntimeError(
            "Triton's interpreter cannot run in this process (Triton was imported before "
            "TRITON_INTERPRET=1 was set): set TRITON_INTERPRET=1 before importing triton, "
            "or pass GPU tensors"
        )
    bound, config = kernel.bind(copies), config or kernel.chosen_config()
    arch = os.environ.get("TILECRAFT_CROSS_COMPILE", "")
    if arch not in ("", "0") and runs_on_cpu(copies):
        from tilecraft.runtime import crosscompile  # (this binding's analysis, not another)

        crosscompile.compile_for_gpu(bound, config, copies, int(arch))
    return _outputs(lambda *a: bound.run_config(config, a), copies)


def compile_for_gpu(kernel: Any, args: Sequence[Any], config: Any = None, arch: int = 90) -> None:
    """Compile the Triton code of `kernel(*args)` for an NVIDIA GPU of compute capability
    `arch` (90: Hopper) with Triton's own compiler, on a machine with or without a GPU,
    running nothing; a `LoweringError` at the user's line where Triton's compiler fails."""
    from tilecraft.runtime import crosscompile

    copies = _copies(args)
    bound = kernel.bind(copies)
    crosscompile.compile_for_gpu(bound, config or kernel.chosen_config(), copies, arch)


def _copies(args: Sequence[Any]) -> tuple:
    """Clones laid out as the originals: each a view of a copy of its storage, with the
    same offset and strides (a transposed, sliced or expanded view stays one)."""
    return tuple(_clone(a) for a in args)


def _clone(a: Any, device: str | None = None) -> Any:
    """A copy of `a` laid out as it is (a view of a copy of its storage: same offset and
    strides), on `device` (default: a's own); tuples and lists element by element."""
    if type(a) in (tuple, list):
        return type(a)(_clone(v, device) for v in a)
    if not isinstance(a, torch.Tensor):
        return a
    source = a.detach().untyped_storage()
    if device is None:
        storage = source.clone()
    else:  # another device: moving copies
        storage = source.cuda() if device == "cuda" else source.cpu()
    out = torch.empty(0, dtype=a.dtype, device=device or a.device)
    return out.set_(storage, a.storage_offset(), a.size(), a.stride())  # type: ignore[arg-type]


def _outputs(fn: Callable[..., Any], args: tuple) -> Any:
    result = fn(*args)
    if result is None:
        return tuple(a for a in args if isinstance(a, torch.Tensor))
    return result


def _check_same(actual: Any, expected: Any, dtype: torch.dtype | None, what: str) -> None:
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), what
        for a, e in zip(actual, expected, strict=True):
            _check_same(a, e, dtype, what)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, f"{what}: {actual!r} != {expected!r}"
        return
    assert isinstance(actual, torch.Tensor), f"{what}: got {type(actual).__name__}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert_close(actual, expected, dtype, equal_nan=True, msg=what)
    if expected.is_floating_point():  # assert_close takes -0.0 for 0.0
        expected = expected.to(actual.device)
        flipped = (actual == 0) & (expected == 0) & (actual.signbit() != expected.signbit())
        assert not flipped.any(), (
            f"{what}: zeros of the other sign at {flipped.nonzero()[:4].tolist()}"
        )
