"""Per-call host cost of tilecraft's layers on the CPU, launches stubbed (microseconds).

Times, with Triton's launch replaced by a no-op (so what is left is tilecraft's host
work and PyTorch's allocations), a matmul-shaped kernel and `add` (its host code:
`broadcast_tensors`, `promote_types`, an allocation) called as a plain kernel, as a
differentiable operator without grad, and as one recording autograd (forward only); and
one launch on the fast launch path with Triton's compiled kernel faked (as profile_host.py
times it; median of 5 rounds).
Best of `--repeats` rounds of `--iters` calls, timed by the thread's CPU time
(`time.thread_time`: on a loaded shared machine, time spent descheduled is left out);
compare runs made back to back all the same.

    TRITON_INTERPRET=1 PYTHONPATH=$PWD python benchmarks/micro_host.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported
os.environ.setdefault("TILECRAFT_AUTOTUNE_EFFORT", "none")

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [
    p for p in (str(ROOT), str(ROOT / "examples"), str(ROOT / "benchmarks")) if p not in sys.path
]

import add  # noqa: E402
import matmul  # noqa: E402
from profile_host import launch_path_us  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.runtime.kernel import Kernel  # noqa: E402


class NoLaunch:
    """Stands in for a `@triton.jit` kernel: `fn[grid](...)` does nothing."""

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return _no_launch


def _no_launch(*args: Any, **kwargs: Any) -> None:
    return None


def stub(kernel: Kernel) -> None:
    """Replace the Triton kernels that `kernel`'s compiled launchers call by no-ops."""
    for bound in kernel._bound.values():
        for fn in bound._compiled.values():
            for name in fn.__code__.co_names:
                if hasattr(fn.__globals__.get(name), "run"):  # a JITFunction
                    fn.__globals__[name] = NoLaunch()


def per_call_us(fn: Callable[[], Any], iters: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(iters):
            fn()
        best = min(best, time.thread_time() - start)
    return best / iters * 1e6


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return grad, grad


def _setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    """Nothing to save."""


_runs = [0]


def _op_name() -> str:
    """A fresh operator name each run (registrations last as long as the process)."""
    _runs[0] += 1
    return f"micro_host::add_{_runs[0]}"


def rows(iters: int, repeats: int) -> dict[str, float]:
    """Microseconds per call of each layer, launches stubbed."""
    x, y = torch.randn(32, 64), torch.randn(64, 48)
    a, b = torch.randn(16, 24), torch.randn(24)
    mm = tc.kernel(matmul.matmul.fn)
    ad = tc.kernel(add.add.fn)
    name = _op_name()
    register = tc.as_torch_op(name, backward=_backward, setup_context=_setup)
    op = register(ad)
    namespace, opname = name.split("::")
    dispatched = getattr(getattr(torch.ops, namespace), opname).default
    ag, bg = a.detach().requires_grad_(), b.detach().requires_grad_()
    mm(x, y), op(a, b), op(a, b), op(ag, bg)  # compile; first operator calls
    stub(mm), stub(ad)
    calls: dict[str, Callable[[], Any]] = {
        "matmul kernel": lambda: mm(x, y),
        "add kernel": lambda: ad(a, b),
        "add op, no grad": lambda: op(a, b),
        "add op, grad (forward)": lambda: op(ag, bg),
    }
    rows = {name: round(per_call_us(fn, iters, repeats), 2) for name, fn in calls.items()}
    with torch.no_grad():  # as a compiled graph's forward calls operators
        row = per_call_us(lambda: dispatched(a, b), iters, repeats)
    rows["add op through the dispatcher, no grad (as compiled graphs call it)"] = round(row, 2)
    # Triton's launch faked, on tilecraft's fast path (profile_host.py's stand-in)
    fast = launch_path_us(iters)["fast_us"]
    rows["fast launch, launcher a no-op (3 tensors, an int, a constexpr)"] = round(fast, 2)
    return rows


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=5000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", type=Path, default=None, help="where the JSON goes")
    args = p.parse_args(argv)
    result = rows(args.iters, args.repeats)
    print("| call (CPU, launch stubbed) | us |\n|---|---|")
    for name, us in result.items():
        print(f"| {name} | {us:.2f} |")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
