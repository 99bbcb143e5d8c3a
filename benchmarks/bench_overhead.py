"""Per-call host overhead of a tiny tilecraft kernel, against launching its Triton kernel directly.

The kernel is `examples/add.py` on 16 float32 elements with a fixed config (nothing tunes).
Each row is wall-clock microseconds per call over many back-to-back calls (rows take turns,
so that clock or cache drifts favour none), with the device
synchronized only before and after them; a kernel this small takes far less device time than
a launch takes on the host, so the rows measure host work:

- tilecraft: the kernel called like a function (dispatch, host code, output allocation, launch),
  its launch on the fast path (runtime/fast_launch.py: after a first launch checked against
  Triton's, the compiled kernel's launcher is called directly)
- tilecraft, fast launch off: the same with TILECRAFT_FAST_LAUNCH=0 (Triton's own launch)
- launcher: the generated host launcher called alone (host code, allocation, launch)
- triton: the same `@triton.jit` kernel launched directly, `jit_fn[grid](...)`, with the very
  arguments the launcher passed it (output allocated once, outside the loop)
- fast launch: that launch on tilecraft's fast path (`FastKernel[grid](...)`), same arguments;
  its results are checked against Triton's launch (bit for bit, on several shapes)
- host code: the launcher with its launch removed, i.e. the kernel's own host code
  (broadcasting and allocating the output), which a hand-written wrapper runs too; the
  overhead goal compares tilecraft with host code + triton
- torch: `x + y`
- dispatch only: `Kernel.__call__` with the launcher stubbed out (meaningful on the CPU too)
- operator rows (meaningful on the CPU too): the same kernel registered as a differentiable
  PyTorch operator (`as_torch_op` with a backward), its launcher replaced by a stub that
  only allocates the output, called as a model calls it (`op(x, y)`: in eager mode that
  skips torch.library's dispatch) and through the registered `torch.library` operator
  (`op.op(x, y)`, what torch.compile's graphs call), each without grad and as forward +
  backward (`.backward()` included); "kernel, stub launch" is the plain kernel call with
  that stub, the floor of the operator rows
- graph replays: one tilecraft call captured in a CUDA graph, replayed (and, for reference,
  `x + y` captured the same way); the replayed output is checked on fresh inputs.

    PYTHONPATH=$PWD python benchmarks/bench_overhead.py [--out PATH]   (about 30 s on an H200)
    TRITON_INTERPRET=1 PYTHONPATH=$PWD python benchmarks/bench_overhead.py --device cpu --tiny

On the CPU (Triton's interpreter) the times mean little and the CUDA graph rows are skipped;
that mode checks the script end to end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TILECRAFT_AUTOTUNE_EFFORT", "none")  # before tilecraft reads settings

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "examples")) if p not in sys.path]

import add  # noqa: E402  (examples/add.py, on the path above)

import tilecraft as tc  # noqa: E402
from tilecraft.runtime.fast_launch import FastKernel, unwrap  # noqa: E402

NUMEL = 16
GOAL_US = 10.0  # tilecraft's call may cost at most this much more than a direct launch


class LaunchRecorder:
    """Stands in for a `@triton.jit` function in a launcher's globals; records each launch."""

    def __init__(self, jit_fn: Any) -> None:
        self.jit_fn = jit_fn
        self.launches: list[tuple[Any, tuple, dict]] = []

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def launch(*args: Any, **kwargs: Any) -> Any:
            self.launches.append((grid, args, kwargs))
            return self.jit_fn[grid](*args, **kwargs)

        return launch


class NoLaunch:
    """Stands in for a `@triton.jit` function: `fn[grid](...)` does nothing."""

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def host_code_only(launcher: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The launcher with its Triton launch removed: the kernel's own host code (here
    `torch.broadcast_tensors` and the output's allocation), which any wrapper runs."""
    namespace = {**launcher.__globals__, name: NoLaunch()}  # type: ignore[attr-defined]
    return types.FunctionType(launcher.__code__, namespace)  # type: ignore[attr-defined]


def direct_launch(
    launcher: Callable[..., Any], name: str, args: tuple, fast: bool = False
) -> Callable[[], Any]:
    """A function launching the launcher's Triton kernel `name` directly, as it launches it:
    through Triton's own launch, or (`fast`) through tilecraft's fast path when it has one."""
    namespace = launcher.__globals__  # type: ignore[attr-defined]
    wrapped = namespace[name]
    namespace[name] = recorder = LaunchRecorder(unwrap(wrapped))
    try:
        launcher(*args)
    finally:
        namespace[name] = wrapped
    (grid, kernel_args, kwargs), *rest = recorder.launches
    assert not rest, f"{name} launched {1 + len(rest)} times in one call"
    jit_fn = wrapped if fast else unwrap(wrapped)
    return lambda: jit_fn[grid](*kernel_args, **kwargs)


def fast_status(kernel: tc.Kernel, args: tuple) -> list[str]:
    """How each Triton kernel of `kernel`'s launcher for `args` launches: "fast", or why not."""
    launcher = kernel.bind(args).launcher
    namespace = launcher.__globals__  # type: ignore[union-attr]
    found = [v.status for v in namespace.values() if isinstance(v, FastKernel)]
    return found or ["Triton's launch (not wrapped: interpreter, or TILECRAFT_FAST_LAUNCH=0)"]


def fast_matches_triton(kernel: tc.Kernel, slow: tc.Kernel, device: torch.device) -> dict:
    """The fast path's results against Triton's launch, bit for bit, on shapes that are not
    multiples of the block, one of 1 element and a misaligned view (the fast path's
    alignment check must send it to Triton's launch or to a kernel of its own)."""
    checks = {}
    for shape in [(NUMEL,), (1,), (1000, 333), (NUMEL + 1,)]:
        x, y = add.inputs(shape=shape, device=device)
        if shape == (NUMEL + 1,):
            x, y = x[1:], y[1:]  # 4 bytes past an aligned address
        for _ in range(3):  # the first call sets up, the later ones take the fast path
            got, want = kernel(x, y), slow(x, y)
        same = bool(torch.equal(got, want)) and bool(torch.equal(got, x + y))
        checks[str(list(x.shape)) + ("" if x.data_ptr() % 16 == 0 else " misaligned")] = {
            "equal": same,
            "status": fast_status(kernel, (x, y)),
        }
    return checks


def dispatch_us(kernel: tc.Kernel, args: tuple, time_us: Callable[..., float]) -> float:
    """`Kernel.__call__` alone: a call with a stub launcher, less the stub's own time."""
    bound = kernel.bind(args)
    launcher = bound.launcher

    def stub(*_: Any) -> None:
        return None

    bound.launcher = stub
    try:
        return time_us(lambda: kernel(*args)) - time_us(lambda: stub(*args))
    finally:
        bound.launcher = launcher


def _add_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return grad, grad


def _add_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    """Nothing to save: the gradients are the output's."""


_operators: dict[str, Any] = {}  # registered once per process (names are global)


def differentiable_add(config: tc.Config) -> Any:
    """`add` as the differentiable operator `bench_overhead::add` (a TorchOp)."""
    if "add" not in _operators:
        kernel = tc.kernel(add.add.fn, config=config)
        register = tc.as_torch_op(
            "bench_overhead::add", backward=_add_backward, setup_context=_add_setup
        )
        _operators["add"] = register(kernel)
    return _operators["add"]


def operator_rows(config: tc.Config, x: torch.Tensor, y: torch.Tensor, time_us: Any) -> dict:
    """Microseconds per call of `add` as a differentiable operator, its launch stubbed (it
    allocates the output only): eager and registered-operator calls, with and without grad."""
    op = differentiable_add(config)
    xg, yg = x.detach().requires_grad_(), y.detach().requires_grad_()
    grad = torch.ones_like(x)
    op(x, y)  # compiles; and the first call goes through the registered operator
    bound = op.kernel.bind((x, y))
    launcher = bound.launcher
    bound.launcher = lambda a, b: torch.empty_like(a)
    calls = {
        "kernel, stub launch": lambda: op.kernel(x, y),
        "op call, stub launch": lambda: op(x, y),
        "registered op call, stub launch": lambda: op.op(x, y),
        "op fwd+bwd, stub launch": lambda: op(xg, yg).backward(grad),
        "registered op fwd+bwd, stub launch": lambda: op.op(xg, yg).backward(grad),
    }
    try:
        return {name: time_us(fn) for name, fn in calls.items()}
    finally:
        bound.launcher = launcher


def compiled_binaries(jit_fn: Any) -> int | None:
    """How many binaries Triton holds for `jit_fn` (None where this Triton keeps that private)."""
    try:
        return sum(len(entry[0]) for entry in jit_fn.device_caches.values())
    except (AttributeError, TypeError, IndexError):
        return None  # e.g. Triton's interpreter, which compiles nothing


def synchronize(device: torch.device) -> None:
    """Wait for the device (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def per_call_us(fn: Callable[[], Any], device: torch.device, iters: int, repeats: int) -> float:
    """Median over `repeats` of wall-clock microseconds per call, over `iters` calls each."""
    return interleaved({"fn": fn}, device, iters, repeats)["fn"]


def interleaved(
    fns: dict[str, Callable[[], Any]], device: torch.device, iters: int, repeats: int
) -> dict[str, float]:
    """Like `per_call_us` for several functions, taking turns (one batch of `iters` calls
    of each per round), so that drifts of clocks or caches do not favour any of them."""
    for fn in fns.values():
        for _ in range(max(1, iters // 10)):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            synchronize(device)
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            synchronize(device)
            samples[name].append((time.perf_counter() - start) / iters * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def capture(fn: Callable[[], Any]) -> tuple[torch.cuda.CUDAGraph, Any]:
    """`fn` captured in a CUDA graph, after warm-up calls on a side stream; and its output."""
    fn()  # compiles (and would tune) outside the graph
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def graph_rows(kernel: tc.Kernel, x: torch.Tensor, y: torch.Tensor, time_us: Any) -> dict:
    """Replay times of a tilecraft call and of `x + y` in CUDA graphs; replays are checked."""
    graph, out = capture(lambda: kernel(x, y))
    torch_graph, _ = capture(lambda: x + y)
    x.copy_(torch.randn_like(x))  # new inputs in the captured buffers
    y.copy_(torch.randn_like(y))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y)
    return {
        "tilecraft graph replay": time_us(graph.replay),
        "torch graph replay": time_us(torch_graph.replay),
    }


def measure(device: torch.device, iters: int, repeats: int) -> dict:
    """Every row, in microseconds per call, and what each comparison says."""
    kernel = tc.kernel(add.add.fn, config=tc.Config(block_sizes=[NUMEL]))
    slow = tc.kernel(add.add.fn, config=tc.Config(block_sizes=[NUMEL]), fast_launch=False)
    x, y = add.inputs(shape=(NUMEL,), device=device)
    torch.testing.assert_close(kernel(x, y), x + y)  # the first call compiles
    torch.testing.assert_close(slow(x, y), x + y)
    bound = kernel.bind((x, y))
    launcher = bound.launcher
    assert launcher is not None
    name = f"_{add.add.__name__}_kernel"  # the jit function's name in the generated module
    jit_fn = unwrap(launcher.__globals__[name])
    direct = direct_launch(launcher, name, (x, y))
    fast = direct_launch(launcher, name, (x, y), fast=True)
    host_only = host_code_only(launcher, name)

    def time_us(fn: Callable[[], Any]) -> float:
        return per_call_us(fn, device, iters, repeats)

    binaries_before = compiled_binaries(jit_fn)
    rows = interleaved(
        {
            "tilecraft": lambda: kernel(x, y),
            "tilecraft, fast launch off": lambda: slow(x, y),
            "launcher": lambda: launcher(x, y),
            "triton": direct,
            "fast launch": fast,
            "host code": lambda: host_only(x, y),
            "torch": lambda: x + y,
        },
        device,
        iters,
        repeats,
    )
    rows["dispatch only"] = dispatch_us(kernel, (x, y), time_us)
    rows.update(operator_rows(kernel.config, x, y, time_us))
    if device.type == "cuda":
        rows.update(graph_rows(kernel, x, y, time_us))
    overhead = rows["tilecraft"] - rows["host code"] - rows["triton"]
    result = {
        "us_per_call": rows,
        "overhead_us": overhead,
        "goal_us": GOAL_US,
        "goal_met": overhead <= GOAL_US if device.type == "cuda" else None,  # None: not judged
        "specializations": len(kernel._bound),
        "compiled_configs": len(bound._compiled),
        "triton_binaries": [binaries_before, compiled_binaries(jit_fn)],
        "config": repr(kernel.config),
    }
    result["fast_launch"] = {  # last: its checks add specializations
        "status": fast_status(kernel, (x, y)),
        "saves_us": rows["tilecraft, fast launch off"] - rows["tilecraft"],
        "checks": fast_matches_triton(kernel, slow, device),
    }
    return result


def table(result: dict) -> str:
    """The rows as a small text table."""
    rows = result["us_per_call"]
    lines = [f"{'':26s} {'us/call':>9s}"]
    lines += [f"{name:26s} {us:9.2f}" for name, us in rows.items()]
    verdict = {True: "met", False: "NOT met", None: "not judged off the GPU"}[result["goal_met"]]
    lines.append(
        f"tilecraft - host code - triton: {result['overhead_us']:.2f} us"
        f" (goal <= {result['goal_us']:.0f} us: {verdict})"
    )
    fast = result["fast_launch"]
    lines.append(f"fast launch: {', '.join(fast['status'])}; saves {fast['saves_us']:.2f} us/call")
    for shape, check in fast["checks"].items():
        verdict = "equal" if check["equal"] else "DIFFERENT"
        lines.append(f"  {shape}: results {verdict} to Triton's launch; {check['status'][0]}")
    return "\n".join(lines)


def environment(device: torch.device) -> dict:
    """Where and with what the numbers were taken."""
    import triton

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": name or device.type,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "0"),
        "numel": NUMEL,
        "dtype": "float32",
    }


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="few iterations: a quick end-to-end run")
    p.add_argument("--iters", type=int, default=None, help="calls per timing (default 10000)")
    default_out = ROOT / "benchmarks" / "results" / "bench_overhead.json"
    p.add_argument("--out", type=Path, default=default_out, help="where the JSON goes")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict:
    """Measure, print the table, write the JSON; returns what was written."""
    args = parse(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read when generated code is loaded
        print("on the CPU: Triton's interpreter, CUDA graph rows skipped, times not meaningful")
    iters = args.iters or (20 if args.tiny else 10_000)
    result = measure(device, iters, repeats=3 if args.tiny else 7)
    result["environment"] = environment(device)
    print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
