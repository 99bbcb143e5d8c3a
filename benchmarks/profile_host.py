"""Where the host time of one eager training step of the transformer block goes (CPU).

The block of `examples/transformer_block.py` trains for a few real steps under Triton's
interpreter (compiling every specialization), then every Triton kernel its tilecraft
launchers call is replaced by a stub that only counts (`jit_fn[grid](...)` does nothing),
so what remains is host work without the interpreter: PyTorch's ops, autograd, the Adam
step, tilecraft's operator wrappers and dispatch, and each kernel's generated host code.
Outputs of stubbed kernels hold garbage; the step runs the same host path all the same.

`--compile` runs both models under `torch.compile(fullgraph=True)` (aot_eager backend: the
graph runs as Python, calling the operators through the dispatcher, as inductor's does;
`--backend inductor` compiles the glue into C++ kernels, as on a GPU into Triton's).

Reported, per step (median of `--steps` steps timed with the thread's CPU time,
`time.thread_time`, or `--clock wall`; no profiler):
the phases (zero_grad, forward, backward, Adam) and, by timing wrappers, the time inside
tilecraft's operator calls (`TorchOp.__call__`, outermost only), inside `Kernel.run` (the
dispatch that `Kernel.__call__` and operators call) and inside the generated launchers
(host code + the stub). Then the top functions by own
time under cProfile (which slows Python code, so compare those rows with each other).
Triton's own launch (`JITFunction.run`, 12.5 us a call on the H200) is not in these CPU
numbers: add launches x its cost for a GPU estimate. The script also times, per launch,
Triton's real `JITFunction.run` path against tilecraft's fast path (runtime/fast_launch.py)
with the compiled kernel and the device faked and the final launcher a no-op (what both
paths call alike), on a kernel of 3 tensors, an int and a constexpr.

    TRITON_INTERPRET=1 PYTHONPATH=$PWD python benchmarks/profile_host.py [--out PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported
os.environ.setdefault("TILECRAFT_AUTOTUNE_EFFORT", "none")

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "benchmarks")) if p not in sys.path]

import bench_model  # noqa: E402  (the same model, data and training step)
import triton.language as tl  # noqa: E402

from tilecraft.runtime.fast_launch import FastKernel  # noqa: E402
from tilecraft.runtime.kernel import Kernel  # noqa: E402
from tilecraft.torch.ops import TorchOp  # noqa: E402

# what times a step: the thread's CPU time by default (on a loaded, shared machine the time
# spent descheduled is left out), or the wall clock (`--clock wall`)
CLOCKS = {"thread": time.thread_time, "wall": time.perf_counter}
CLOCK = [CLOCKS["thread"]]
SIZES = {"batch": 2, "seq": 16, "dim": 64, "heads": 4, "vocab": 64}


class CountingStub:
    """Stands in for a `@triton.jit` kernel: `fn[grid](...)` counts and does nothing."""

    def __init__(self, name: str, counts: Counter) -> None:
        self.name, self.counts = name, counts

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.counts[self.name] += 1

        return launch


def launchers() -> Iterator[tuple[Kernel, Any]]:
    """Every compiled (kernel, BoundKernel) pair in the process."""
    for obj in gc.get_objects():
        if type(obj) in weakref.ProxyTypes:  # isinstance on a dead proxy raises
            continue
        if isinstance(obj, Kernel):
            for bound in obj._bound.values():
                if bound.launcher is not None:
                    yield obj, bound


def launched_names(code: Any) -> set[str]:
    """Global names a launcher's code (and the code nested in it) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= launched_names(const)
    return names


def stub_launches(counts: Counter) -> int:
    """Replace the Triton kernels of every generated launcher by counting stubs; how many."""
    from triton.runtime.jit import KernelInterface

    stubbed = 0
    for _, bound in launchers():
        for fn in bound._compiled.values():
            namespace = fn.__globals__
            for name in launched_names(fn.__code__):
                value = namespace.get(name)
                if isinstance(value, KernelInterface) or hasattr(value, "jit_fn"):
                    namespace[name] = CountingStub(name, counts)
                    stubbed += 1
    return stubbed


class Timer:
    """Inclusive wall time in a function, outermost calls only (re-entries not counted)."""

    def __init__(self) -> None:
        self.seconds, self.calls, self.depth = 0.0, 0, 0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return fn(*args, **kwargs)
            self.depth += 1
            start = CLOCK[0]()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += CLOCK[0]() - start
                self.calls += 1
                self.depth -= 1

        return timed

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0


@contextmanager
def timed_layers(timers: dict[str, Timer]) -> Iterator[None]:
    """Time `TorchOp.__call__` (where `timers` has "operator calls"), `Kernel.run` and every
    selected launcher."""
    saved = (TorchOp.__call__, Kernel.run)
    if "operator calls" in timers:  # not under torch.compile: a new wrapper would recompile
        TorchOp.__call__ = timers["operator calls"].wrap(saved[0])  # type: ignore[method-assign]
    Kernel.run = timers["kernel calls"].wrap(saved[1])  # type: ignore[method-assign]
    bounds = [bound for _, bound in launchers()]
    originals = [bound.launcher for bound in bounds]
    for bound in bounds:
        bound.launcher = timers["launchers"].wrap(bound.launcher)
    try:
        yield
    finally:
        TorchOp.__call__, Kernel.run = saved  # type: ignore[method-assign]
        for bound, launcher in zip(bounds, originals, strict=True):
            bound.launcher = launcher


def phased_step(model: Any, optimizer: Any, data: tuple, phases: dict[str, list]) -> None:
    """One training step, appending each phase's seconds to `phases`."""
    marks = [CLOCK[0]()]
    optimizer.zero_grad(set_to_none=True)
    marks.append(CLOCK[0]())
    loss = model(*data)
    marks.append(CLOCK[0]())
    loss.backward()
    marks.append(CLOCK[0]())
    optimizer.step()
    marks.append(CLOCK[0]())
    names = ("zero_grad", "forward", "backward", "adam")
    for name, a, b in zip(names, marks, marks[1:], strict=False):
        phases.setdefault(name, []).append(b - a)


def measure(args: argparse.Namespace) -> dict:
    """Warm up for real, stub the launches, then time and profile steps."""
    device = torch.device("cpu")
    model = bench_model.build("tilecraft eager", args.sizes, device, args.dtype)
    data = bench_model.batch(args.sizes, device)
    # foreach: what Adam does by default on a GPU (one multi-tensor op per update)
    optimizer = torch.optim.Adam(model.parameters(), lr=bench_model.LR, foreach=True)
    if args.compile:  # the graph calls the operators through PyTorch's dispatcher
        model = bench_model.compiled(model, args.backend)
    step = bench_model.train_step(model, optimizer, data)
    losses = [step().item() for _ in range(2)]  # compiles everything, for real
    counts: Counter = Counter()
    stubbed = stub_launches(counts)
    step()
    specializations = sum(1 for _ in launchers())
    result: dict[str, Any] = {"sizes": args.sizes, "dtype": str(args.dtype), "losses": losses}
    result["compile"] = args.backend if args.compile else False
    result["stubbed_kernels"] = stubbed
    result["torch_step_us_median"] = torch_step_us(args)
    counts.clear()
    result["steps"] = per_step_times(model, optimizer, data, args.steps)
    result["launches_per_step"] = {k: v / args.steps for k, v in sorted(counts.items())}
    result["launches"] = sum(counts.values()) / args.steps
    result["layers"] = layer_times(model, optimizer, data, args.steps, not args.compile)
    result["profile"] = bench_model.host_profile(step, device, args.steps, top=args.top)
    result["launch_path"] = launch_path_us(iters=max(200, args.steps * 200))
    if sum(1 for _ in launchers()) != specializations:
        result["warning"] = "new specializations appeared during timing (value reads?)"
    return result


def torch_step_us(args: argparse.Namespace) -> float:
    """For scale: the plain PyTorch block's step on the CPU at the same sizes (which
    computes for real, so it is an upper bound on its host time)."""
    device = torch.device("cpu")
    model = bench_model.build("torch eager", args.sizes, device, args.dtype)
    data = bench_model.batch(args.sizes, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=bench_model.LR, foreach=True)
    if args.compile:
        model = bench_model.compiled(model, args.backend)
    step = bench_model.train_step(model, optimizer, data)
    for _ in range(3):
        step()
    return per_step_times(model, optimizer, data, args.steps)["step_us_median"]


def per_step_times(model: Any, optimizer: Any, data: tuple, steps: int) -> dict:
    """Median microseconds of a whole step and of each phase (no wrappers installed)."""
    totals: list[float] = []
    phases: dict[str, list] = {}
    for _ in range(steps):
        start = CLOCK[0]()
        phased_step(model, optimizer, data, phases)
        totals.append(CLOCK[0]() - start)
    out = {"step_us_median": statistics.median(totals) * 1e6, "step_us_min": min(totals) * 1e6}
    out.update({f"{k}_us": statistics.median(v) * 1e6 for k, v in phases.items()})
    return out


def layer_times(model: Any, optimizer: Any, data: tuple, steps: int, ops: bool = True) -> dict:
    """Microseconds per step inside operator calls, kernel calls and launchers (medians
    over the steps, as the step's own time); operator calls only if `ops`."""
    names = (
        ("operator calls", "kernel calls", "launchers") if ops else ("kernel calls", "launchers")
    )
    timers = {name: Timer() for name in names}
    samples: dict[str, list[float]] = {name: [] for name in timers}
    with timed_layers(timers):
        for _ in range(steps):
            for timer in timers.values():
                timer.reset()
            phased_step(model, optimizer, data, {})
            for name, timer in timers.items():
                samples[name].append(timer.seconds)
    return {
        name: {
            "us_per_step": statistics.median(samples[name]) * 1e6,
            "calls_per_step": timers[name].calls,
        }
        for name in timers
    }


def _add_kernel(out, x, y, n, BLOCK: tl.constexpr):  # noqa: ANN001, ANN202, N803
    pass  # never compiled: `launch_path_us` fakes the binary


class _Target:
    """A GPU's target, device 0 and a stream, for Triton's launch path on the CPU."""

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 7


class _Binary:
    """A compiled kernel whose launcher does nothing."""

    def __init__(self) -> None:
        self._run: Any = None
        self.function, self.packed_metadata = 1234567, (4, 1, 1, 128)

    @property
    def run(self) -> Any:
        if self._run is None:
            self._run = lambda *call: None
        return self._run

    def launch_metadata(self, grid: Any, stream: int, *args: Any) -> Any:
        return {"name": "_add_kernel", "stream": stream}


def launch_path_us(iters: int = 20000) -> dict:
    """Microseconds per launch through Triton's `JITFunction.run` and through the fast path,
    both ending in a no-op launcher (medians of 5 rounds)."""
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    saved, driver._active = driver._active, _Target()
    try:
        jit = JITFunction(_add_kernel)
        binary = _Binary()

        def compile_once(key: Any, *args: Any, **kwargs: Any) -> Any:
            jit.device_caches[0][0][key] = binary  # as Triton's cache keeps it
            return binary

        jit._do_compile = compile_once
        fast = FastKernel(jit)
        x, y, out = torch.randn(20), torch.randn(20), torch.zeros(20)
        options = {"BLOCK": 16, "num_warps": 4, "num_stages": 1}
        fast[(2,)](out, x, y, 20, **options)
        rows = {
            "triton": lambda: jit[(2,)](out, x, y, 20, **options),
            "fast": lambda: fast[(2,)](out, x, y, 20, **options),
        }
        times = {name: [] for name in rows}
        for _ in range(5):
            for name, fn in rows.items():
                start = CLOCK[0]()
                for _ in range(iters):
                    fn()
                times[name].append((CLOCK[0]() - start) / iters * 1e6)
        result = {f"{name}_us": statistics.median(t) for name, t in times.items()}
        return {**result, "fast_status": fast.status}
    finally:
        driver._active = saved


def report(result: dict) -> str:
    """The breakdown as text."""
    s, layers = result["steps"], result["layers"]
    lines = [f"CPU host time per eager step (launches stubbed), sizes {result['sizes']}"]
    lines[0] += f", {result['dtype']}" + (
        f", torch.compile ({result['compile']})" if result["compile"] else ""
    )
    lines.append(
        f"  step (median)          {s['step_us_median']:9.1f} us (min {s['step_us_min']:.1f})"
    )
    for phase in ("zero_grad", "forward", "backward", "adam"):
        lines.append(f"    {phase:20s} {s[phase + '_us']:9.1f} us")
    torch_us = result["torch_step_us_median"]
    lines.append(f"  PyTorch's block, same sizes (computing) {torch_us:.1f} us")
    lines.append(f"  tilecraft launches     {result['launches']:9.1f} per step")
    for name, row in layers.items():
        us, calls = row["us_per_step"], row["calls_per_step"]
        lines.append(
            f"  in {name:19s} {us:9.1f} us ({calls:.1f} calls, {us / max(calls, 1):.1f} us each)"
        )
    launch = result["launch_path"]
    lines.append(
        f"  per launch, launcher a no-op: Triton's JITFunction.run {launch['triton_us']:.2f} us,"
        f" tilecraft's fast path {launch['fast_us']:.2f} us ({launch['fast_status']})"
    )
    lines.append("top functions by own time under cProfile (us per step, calls):")
    lines += [
        f"  {r['own_us_per_step']:9.1f} {r['calls_per_step']:6.1f}  {r['function']}"
        for r in result["profile"]
    ]
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--top", type=int, default=30, help="cProfile rows")
    p.add_argument(
        "--compile",
        action="store_true",
        help="both models under torch.compile(fullgraph=True) (see --backend)",
    )
    p.add_argument(
        "--backend",
        choices=("aot_eager", "inductor"),
        default="aot_eager",
        help="torch.compile's backend with --compile",
    )
    p.add_argument("--clock", choices=sorted(CLOCKS), default="thread", help="what times steps")
    p.add_argument(
        "--dtype",
        choices=sorted(bench_model.DTYPES),
        default="float32",
        help="the model's dtype (bf16: Triton's interpreter computes it wrongly, which only"
        " changes the warm-up's values: host times are what count here)",
    )
    default_out = ROOT / "benchmarks" / "results" / "profile_host.json"
    p.add_argument("--out", type=Path, default=default_out, help="where the JSON goes")
    args = p.parse_args(argv)
    args.sizes = dict(SIZES)
    args.dtype = getattr(torch, bench_model.DTYPES[args.dtype])
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    """Measure, print, write the JSON; returns what was written."""
    args = parse(argv)
    CLOCK[0] = CLOCKS[args.clock]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: more threads only contend
    try:
        result = measure(args)
    finally:
        torch.set_num_threads(threads)
    print(report(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
