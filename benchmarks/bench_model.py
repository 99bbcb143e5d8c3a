"""Training steps of the transformer block of `examples/transformer_block.py`, five ways.

Each mode trains its own copy of the model from the same initial weights with Adam on one
batch; its first losses are checked against plain PyTorch eager's, then the median wall
time of a training step (forward, backward, optimizer step; the device synchronized around
each step) is measured. The modes' steps are timed in interleaved rounds (a few steps of
each mode, then again), so that a host that speeds up or slows down during the run, as the
GPU machines' hosts do by 30% from one second to the next, weighs on every mode alike:

- tilecraft eager: the block on tilecraft operators
- tilecraft (Triton launch) eager: the same with tilecraft's fast launch off (every kernel
  launched through Triton's own `jit_fn[grid](...)`), to see what the fast launch saves
- tilecraft compile: the same under `torch.compile(fullgraph=True)` (inductor on a GPU)
- tilecraft graph: the whole training step, Adam step included (`capturable=True`),
  captured in one CUDA graph after warm-up steps on a side stream, then replayed
- torch eager, torch compile, torch graph: the same block in plain PyTorch

Kernels never tune during the run (TILECRAFT_AUTOTUNE_EFFORT=none) unless `--tune` is given.
`--profile N` also runs N more steps of each eager and compile mode under cProfile and
records (and prints) the functions that take the most host time per step, to see where a
step's host time goes.

    PYTHONPATH=$PWD python benchmarks/bench_model.py [--dtype bf16] [--out PATH]
    TRITON_INTERPRET=1 PYTHONPATH=$PWD python benchmarks/bench_model.py --device cpu --tiny

On the CPU the graph modes are skipped (they need CUDA), the compile modes use the
`aot_eager` backend (inductor needs a GPU here), and the times mean little: that mode
checks the script end to end.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import json
import os
import platform
import pstats
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

if "--tune" not in sys.argv:
    os.environ.setdefault("TILECRAFT_AUTOTUNE_EFFORT", "none")  # before tilecraft is imported

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "examples")) if p not in sys.path]

import transformer_block as tb  # noqa: E402  (examples/, on the path above)

from tilecraft.runtime import fast_launch  # noqa: E402

GPU_SIZES = {"batch": 8, "seq": 256, "dim": 512, "heads": 8, "vocab": 4096}  # head dim 64
TINY_SIZES = {"batch": 1, "seq": 8, "dim": 16, "heads": 1, "vocab": 32}
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16"}
LR = 1e-2
REL_TOL = {torch.float32: 1e-3, torch.bfloat16: 3e-2}  # on each checked loss
TRITON_LAUNCH = "tilecraft (Triton launch) eager"  # the fast launch off, to compare
MODES = ("tilecraft eager", TRITON_LAUNCH, "tilecraft compile", "tilecraft graph")
MODES += ("torch eager", "torch compile", "torch graph")

# each tilecraft mode's PyTorch counterpart, for the per-round ratios
PEERS = {"tilecraft eager": "torch eager", "tilecraft compile": "torch compile"}
PEERS["tilecraft graph"] = "torch graph"
Step = Callable[[], torch.Tensor]  # one training step; returns the loss tensor


def build(mode: str, sizes: dict, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """A fresh model of `mode` from the shared initial weights (the example's `models`)."""
    block = {k: v for k, v in sizes.items() if k != "batch"}
    ours, theirs = tb.models(seed=0, **block)
    model = ours if mode.startswith("tilecraft") else theirs
    return model.to(device=device, dtype=dtype)


def batch(sizes: dict, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens and next-token targets every step trains on (the example's `data`)."""
    tokens, targets = tb.data(batch=sizes["batch"], seq=sizes["seq"], vocab=sizes["vocab"])
    return tokens.to(device), targets.to(device)


def train_step(
    model: Callable[..., torch.Tensor], optimizer: torch.optim.Optimizer, data: tuple
) -> Step:
    """Zero the gradients (to None, so a captured backward allocates them), forward,
    backward, optimizer step."""

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = model(*data)
        loss.backward()
        optimizer.step()
        return loss

    return step


def eager_step(model: torch.nn.Module, data: tuple, compile_backend: str | None) -> Step:
    """A training step, the model compiled with `compile_backend` unless that is None."""
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    forward = model if compile_backend is None else compiled(model, compile_backend)
    return train_step(forward, optimizer, data)


def compiled(model: torch.nn.Module, backend: str) -> Callable[..., torch.Tensor]:
    """`torch.compile(model, fullgraph=True)` with `backend`."""
    return torch.compile(model, fullgraph=True, backend=backend)


def graph_steps(model: torch.nn.Module, data: tuple, warmup: int) -> tuple:
    """A step function replaying one CUDA graph of a whole training step, and the losses of
    the `warmup` eager steps run (on a side stream) before capturing it."""
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, capturable=True)
    step = train_step(model, optimizer, data)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compiles every kernel and creates Adam's state
        losses = [step().item() for _ in range(warmup)]
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = step()
    return GraphStep(graph, static_loss, step), losses


class GraphStep:
    """Replays a captured training step; holds `step`, whose batch and optimizer state the
    graph reads where they were captured (modes are timed after all are built: freed,
    that memory would go to the next mode's tensors)."""

    def __init__(self, graph: torch.cuda.CUDAGraph, loss: torch.Tensor, step: Step) -> None:
        self.graph, self.loss, self.step = graph, loss, step

    def __call__(self) -> torch.Tensor:
        self.graph.replay()
        return self.loss


def step_times(step: Step, device: torch.device, steps: int) -> list[float]:
    """Wall-clock milliseconds of `steps` steps, the device synchronized around each."""
    times = []
    for _ in range(steps):
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def synchronize(device: torch.device) -> None:
    """Wait for the device (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def launches(mode: str) -> Any:
    """The context a mode's steps run in: Triton's own launch for `TRITON_LAUNCH`."""
    return fast_launch.triton_launches_only() if mode == TRITON_LAUNCH else nullcontext()


def prepare_mode(mode: str, args: argparse.Namespace, reference: list[float] | None) -> tuple:
    """Build one mode's step, check its first losses against `reference` (None: they are
    the reference) and warm it up; returns its result so far and its step."""
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    model, data = build(mode, args.sizes, device, dtype), batch(args.sizes, device)
    if mode.endswith("graph"):
        step, losses = graph_steps(model, data, warmup=min(3, args.check_steps))
    else:
        backend = args.compile_backend if mode.endswith("compile") else None
        step, losses = eager_step(model, data, backend), []
    losses += [step().item() for _ in range(args.check_steps - len(losses))]
    result: dict[str, Any] = {"losses": losses}
    if reference is not None:
        diffs = [abs(a - b) / abs(b) for a, b in zip(losses, reference, strict=True)]
        result["max_rel_diff"] = max(diffs)
        result["matches_torch"] = max(diffs) <= REL_TOL[dtype]
    for _ in range(args.warmup_steps):
        step()
    return result, step


def time_rounds(steps: dict[str, Step], args: argparse.Namespace) -> dict[str, list[float]]:
    """Each mode's step times: `args.rounds` rounds of `args.steps` steps of every mode in
    turn."""
    device = torch.device(args.device)
    times: dict[str, list[float]] = {mode: [] for mode in steps}
    for _ in range(args.rounds):
        for mode, step in steps.items():
            with launches(mode):
                times[mode] += step_times(step, device, args.steps)
    return times


def host_profile(step: Step, device: torch.device, steps: int, top: int = 25) -> list[dict]:
    """The `top` functions by own host time over `steps` steps under cProfile, per step
    (cProfile slows Python down, so compare rows with each other, not with `ms_per_step`)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    synchronize(device)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = [
        {
            "function": f"{Path(file).name}:{line}({name})",
            "calls_per_step": calls / steps,
            "own_us_per_step": own / steps * 1e6,
            "total_us_per_step": total / steps * 1e6,
        }
        for (file, line, name), (_, calls, own, total, _) in stats.items()
    ]
    return sorted(rows, key=lambda r: -r["own_us_per_step"])[:top]


def profile_table(mode: str, rows: list[dict]) -> str:
    """A mode's profile as text."""
    lines = [f"{mode}: host time per step under cProfile (own, total us; calls)"]
    lines += [
        f"  {r['own_us_per_step']:9.1f} {r['total_us_per_step']:9.1f} "
        f"{r['calls_per_step']:6.1f}  {r['function']}"
        for r in rows
    ]
    return "\n".join(lines)


def skip_reason(mode: str, device: torch.device) -> str | None:
    """Why `mode` does not run on `device`, or None."""
    if mode.endswith("graph") and device.type != "cuda":
        return "CUDA graphs need a CUDA device"
    return None


def unselected(mode: str, modes: list[str] | None) -> str | None:
    """Why `mode` is left out by `--modes` (torch eager always runs: the reference)."""
    if modes is None or mode in modes or mode == "torch eager":
        return None
    return "not in --modes"


def run_all(args: argparse.Namespace) -> dict[str, dict]:
    """Every mode; a failure is recorded (and its traceback printed), never raised."""
    results, steps = prepare_all(args)
    try:
        times = time_rounds(steps, args)
    except Exception as e:
        traceback.print_exc()
        error = f"timing: {type(e).__name__}: {e}".splitlines()[0][:300]
        return {**results, **{mode: {**results[mode], "error": error} for mode in steps}}
    device = torch.device(args.device)
    for mode, step in steps.items():
        results[mode]["ms_per_step"] = statistics.median(times[mode])
        results[mode]["step_ms"] = [round(t, 4) for t in times[mode]]
        if args.profile and not mode.endswith("graph"):  # eager and compiled steps
            with launches(mode):
                results[mode]["profile"] = host_profile(step, device, args.profile)
        print(f"{mode}: {summary(results[mode])}", flush=True)
    for mode, peer in PEERS.items():
        if mode in times and peer in times:
            ratio = paired_ratio(times[mode], times[peer], args.steps)
            results[mode]["vs_" + peer.replace(" ", "_")] = ratio
            print(f"{mode} / {peer}: {ratio:.3f} (median of the rounds' ratios)")
    return results


def paired_ratio(ours: list[float], peer: list[float], steps: int) -> float:
    """The median over rounds of the ratio of the two modes' median steps in that round:
    each ratio taken over the same stretch of the run, so the host's drift cancels."""
    rounds = range(0, len(ours), steps)
    ratios = [
        statistics.median(ours[i : i + steps]) / statistics.median(peer[i : i + steps])
        for i in rounds
    ]
    return statistics.median(ratios)


def prepare_all(args: argparse.Namespace) -> tuple[dict[str, dict], dict[str, Step]]:
    """Each selected mode's checked, warmed-up step (torch eager first: the reference),
    and every mode's result so far (why it was skipped, or its error)."""
    device = torch.device(args.device)
    results: dict[str, dict] = {}
    steps: dict[str, Step] = {}
    reference = None
    for mode in ["torch eager", *[m for m in MODES if m != "torch eager"]]:
        reason = skip_reason(mode, device) or unselected(mode, args.modes)
        if reason:
            results[mode] = {"skipped": reason}
            print(f"{mode}: skipped ({reason})")
            continue
        try:
            with launches(mode):
                results[mode], steps[mode] = prepare_mode(mode, args, reference)
        except Exception as e:
            traceback.print_exc()
            results[mode] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
            print(f"{mode}: {summary(results[mode])}", flush=True)
        if mode == "torch eager":
            reference = results[mode].get("losses")
    return results, steps


def summary(result: dict) -> str:
    """One mode's result in a line."""
    if "skipped" in result or "error" in result:
        return result.get("skipped") or f"error: {result['error']}"
    check = ""
    if "matches_torch" in result:
        verdict = "matches" if result["matches_torch"] else "DIFFERS from"
        check = f", losses {verdict} torch eager (max rel diff {result['max_rel_diff']:.1e})"
    return f"{result['ms_per_step']:.3f} ms/step{check}"


def table(results: dict[str, dict]) -> str:
    """The results as a text table, in the order of MODES."""
    lines = [f"{'mode':32s} {'ms/step':>10s}  losses vs torch eager"]
    for mode in MODES:
        r = results[mode]
        ms = f"{r['ms_per_step']:10.3f}" if "ms_per_step" in r else f"{'-':>10s}"
        note = r.get("skipped") or r.get("error") or ""
        if "matches_torch" in r:
            note = f"{'ok' if r['matches_torch'] else 'DIFFER'} ({r['max_rel_diff']:.1e})"
        elif mode == "torch eager" and "losses" in r:
            note = "(the reference)"
        lines.append(f"{mode:32s} {ms}  {note}")
    return "\n".join(lines)


def environment(args: argparse.Namespace) -> dict:
    """Where and with what the numbers were taken."""
    import triton

    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": name or device.type,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "0"),
        "autotune_effort": os.environ.get("TILECRAFT_AUTOTUNE_EFFORT", "quick"),
        "sizes": args.sizes,
        "dtype": args.dtype,
        "compile_backend": args.compile_backend,
        "graph_captures": "forward, backward and Adam step (capturable=True)",
        "steps": {
            "checked": args.check_steps,
            "warmup": args.warmup_steps,
            "timed": f"{args.rounds} interleaved rounds of {args.steps} steps of each mode",
        },
    }


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, with sizes, step counts and the compile backend filled in."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--tiny", action="store_true", help="the example's tiny sizes, few steps")
    p.add_argument("--tune", action="store_true", help="let kernels tune on their first call")
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="cProfile N steps of each eager and compile mode",
    )
    p.add_argument(
        "--modes",
        type=lambda text: [m.strip() for m in text.split(",")],
        default=None,
        help=f"comma-separated modes to run (torch eager always runs); of: {', '.join(MODES)}",
    )
    p.add_argument("--rounds", type=int, default=10, help="interleaved rounds of 5 steps a mode")
    default_out = ROOT / "benchmarks" / "results" / "bench_model.json"
    p.add_argument("--out", type=Path, default=default_out, help="where the JSON goes")
    args = p.parse_args(argv)
    unknown = set(args.modes or []) - set(MODES)
    if unknown:
        p.error(f"unknown modes: {', '.join(sorted(unknown))}")
    args.dtype = DTYPES[args.dtype]
    on_gpu = torch.device(args.device).type == "cuda"
    args.sizes = TINY_SIZES if args.tiny else GPU_SIZES
    args.check_steps, args.warmup_steps = (2, 0) if args.tiny else (5, 3)
    args.rounds, args.steps = (1, 1) if args.tiny else (args.rounds, 5)
    args.compile_backend = "inductor" if on_gpu else "aot_eager"
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    """Run every mode, print the table, write the JSON; returns what was written."""
    args = parse(argv)
    threads = torch.get_num_threads()
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read when generated code is loaded
        torch.set_num_threads(1)  # tiny matrices: more threads only contend
        print("on the CPU: Triton's interpreter, compile modes on aot_eager, graph modes skipped")
    try:
        data = {"results": run_all(args), "environment": environment(args)}
    finally:
        torch.set_num_threads(threads)
    print(table(data["results"]))
    for mode, result in data["results"].items():
        if "profile" in result:
            print(profile_table(mode, result["profile"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out}")
    return data


if __name__ == "__main__":
    main()
