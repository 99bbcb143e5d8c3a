"""Attention forward and backward in bfloat16: tilecraft.nn.attention against SDPA's flash
and cuDNN backends, in TFLOP/s, causal and not.

For each (batch, heads, sequence, head_dim) of the issue, tilecraft's forward and backward
kernels run a small sweep of configs (block sizes, warps, stages, tensor-descriptor (TMA)
reads or pointers; each checked against SDPA's output and gradients before it is timed)
and keep the fastest; the peers are
`F.scaled_dot_product_attention` under `sdpa_kernel(SDPBackend.FLASH_ATTENTION)` and
`sdpa_kernel(SDPBackend.CUDNN_ATTENTION)`, on the same inputs. FLOPs: 4 * batch * heads *
queries * keys * head_dim for the forward (halved when causal), 2.5 times that for the
backward (five products instead of two). The sweep stops early when `--budget-s` is spent:
later cases then try only the first config of each list.

    PYTHONPATH=$PWD python benchmarks/bench_attention.py [--out PATH] [--budget-s 180]
        [--causal-only] [--masked-baseline]
    TRITON_INTERPRET=1 PYTHONPATH=$PWD python benchmarks/bench_attention.py --smoke

Causal cases also sweep a config that launches a head's query tiles
consecutively (`loop_orders`), mixing light and heavy programs in every wave.
`--causal-only` skips the non-causal cases. `--masked-baseline` also times, for each case,
tilecraft's fastest forward and backward configs compiled with the compiler's alignment
proofs off (`tilecraft.frontend.facts.unproven`: every loop with device-computed bounds
masked, as the code was before them; the causal loops off the diagonal are such loops), so
one run shows what the mask-free loops gain on the same configs.

Each case also runs a flash-attention forward written in Helion's style
(`benchmarks/helion_kernels.py`: a 3-D batch tile of one row, every key tile visited) on a
few configs, by Helion 1.5.0 (where it imports, on a GPU) and by tilecraft from the same
source: Helion's attention example's schedule, and the two compilers on one source and one
config (`--no-helion` skips it).

`--smoke` runs a tiny shape on the CPU (Triton's interpreter, float32; the cuDNN peer
records an error there): it checks the script end to end, its numbers mean nothing.
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
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TILECRAFT_AUTOTUNE_EFFORT", "none")  # configs come from the sweep

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "benchmarks")) if p not in sys.path]

from tune_vs_helion import helion_or_reason, kernels  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.frontend.facts import unproven  # noqa: E402
from tilecraft.nn.attention import attention_backward, attention_forward  # noqa: E402

SHAPES = [(4, 16, 4096, 128), (8, 32, 2048, 64), (1, 16, 16384, 128)]
SMOKE_SHAPES = [(1, 1, 19, 16)]
TMA = "tensor_descriptor"  # the `indexing` of the reads (pointers otherwise)
DEFAULT = "default"  # the kernel's default config for the case: what an untuned call runs
# forward: (block_m, block_n, warps, stages, indexing); the first is kept when time runs out
FORWARD = [DEFAULT, (128, 64, 4, 3, TMA), (128, 64, 4, 3, None), (128, 128, 8, 3, TMA)]
FORWARD += [(128, 128, 8, 3, None), (128, 64, 8, 3, TMA), (64, 64, 4, 3, None)]
FORWARD += [(128, 128, 8, 4, None), (128, 128, 8, 2, None), (128, 64, 8, 4, None)]
FORWARD += [(128, 128, 8, 4, TMA), (256, 64, 8, 3, None), (128, 64, 4, 4, None)]
# backward: (dK/dV key tile, its query tile, dQ query tile, its key tile, warps, stages,
# indexing)
BACKWARD = [DEFAULT, (64, 64, 64, 64, 4, 3, TMA), (128, 64, 128, 64, 8, 2, None)]
BACKWARD += [(128, 64, 128, 64, 8, 2, TMA), (128, 64, 128, 64, 8, 3, None)]
# long key tiles over short query tiles for dK/dV, the transpose for dQ
BACKWARD += [(128, 32, 128, 32, 4, 5, TMA), (128, 32, 128, 32, 4, 3, TMA)]
BACKWARD += [(64, 64, 64, 64, 4, 4, TMA), (64, 64, 64, 64, 4, 2, TMA), (64, 32, 64, 32, 4, 4, TMA)]
BACKWARD += [(128, 64, 128, 64, 4, 3, TMA), (64, 64, 64, 64, 8, 3, TMA)]
BACKWARD += [(128, 32, 64, 64, 4, 3, TMA)]  # the default at head dim 64 (dK/dV 128 x 32)
# warp specialization of the key loop (Triton's `tl.range(..., warp_specialize=True)`):
# producer warps issue the loads while the others compute; both loops when causal
SPECIALIZED = {"range_warp_specializes": [True, True]}
# (on the H200 with Triton 3.6 it timed as without it at 8 warps; 4 failed to compile)
FORWARD += [(128, 128, 8, 3, TMA, SPECIALIZED)]
SMOKE_FORWARD = [DEFAULT, (16, 16, 4, 1, TMA), (16, 16, 4, 1, TMA, SPECIALIZED)]
SMOKE_BACKWARD = [DEFAULT, (16, 16, 16, 16, 4, 1, TMA)]
# causal cases also try the query tiles' programs launched fastest (`loop_orders`): each
# wave then mixes a head's light (early) and heavy (late) query tiles, which balances the
# load differently from the default (all heads' first tiles first, the heaviest last)
QUERY_TILES_FASTEST = {"loop_orders": [[1, 0]]}
CAUSAL_FORWARD = [(128, 64, 4, 3, TMA, QUERY_TILES_FASTEST)]
CAUSAL_BACKWARD = [(128, 64, 128, 64, 8, 2, TMA, {"loop_orders": [[1, 0], [1, 0]]})]
SMOKE_CAUSAL_FORWARD = [(16, 16, 4, 1, TMA, QUERY_TILES_FASTEST)]
SMOKE_CAUSAL_BACKWARD: list[tuple] = []
# causal key loops end at the query tile, so the last query tiles' programs are the longest:
# launched first (`reversed_launches`), the short ones fill the last wave. Not the dK/dV
# launch of the backward: its first key tiles are the longest, launched first already.
REVERSED = {"reversed_launches": [True]}
CAUSAL_FORWARD += [(256, 64, 8, 3, None, REVERSED), (128, 128, 8, 3, None, REVERSED)]
CAUSAL_FORWARD += [(128, 64, 4, 3, None, REVERSED), (128, 64, 4, 4, None, REVERSED)]
CAUSAL_FORWARD += [(128, 128, 8, 3, TMA, REVERSED), (128, 64, 8, 3, TMA, REVERSED)]
CAUSAL_BACKWARD += [(64, 64, 64, 64, 4, 2, TMA, {"reversed_launches": [True, False]})]
CAUSAL_BACKWARD += [(64, 64, 64, 64, 4, 3, TMA, {"reversed_launches": [True, False]})]
# the backward's fastest configs of the earlier runs, and longer key tiles for dK/dV
# (`--backward-only` sweeps these)
BACKWARD_BEST = [DEFAULT, (64, 64, 64, 64, 4, 2, TMA), (64, 64, 64, 64, 4, 3, TMA)]
BACKWARD_BEST += [(128, 32, 64, 64, 4, 3, TMA), (128, 64, 64, 64, 4, 2, TMA)]
BACKWARD_BEST += [(128, 32, 128, 32, 4, 3, TMA), (128, 64, 128, 64, 8, 2, TMA)]
CAUSAL_BACKWARD_BEST = CAUSAL_BACKWARD[-1:]
SMOKE_CAUSAL_FORWARD += [(16, 16, 4, 1, TMA, REVERSED)]
# Helion's style of flash attention (benchmarks/helion_kernels.py, one source) run by
# Helion 1.5.0 and by tilecraft on the same configs: (block_m, block_n, warps, stages,
# indexing); its batch tile is one (batch * head) row
HELION_FORWARD = [(128, 64, 4, 3, TMA), (128, 128, 8, 3, TMA), (128, 64, 4, 3, None)]
SMOKE_HELION_FORWARD = [(16, 16, 4, 1, None)]
PEERS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
MAX_REL_ERR = {torch.bfloat16: 2e-2, torch.float32: 1e-4}


def forward_config(entry: tuple, count: int) -> tc.Config:
    """A forward Config from (block_m, block_n, warps, stages, indexing[, other fields]),
    for a kernel of `count` blocks (a causal key loop is two: off the diagonal and on it)."""
    block_m, block_n, warps, stages, indexing, *more = entry
    blocks = [block_m] + [block_n] * (count - 1)
    extra = {"indexing": indexing} if indexing else {}
    extra.update(*more)
    return tc.Config(block_sizes=blocks, num_warps=warps, num_stages=stages, **extra)


def backward_config(entry: tuple, group: int, causal: bool, count: int) -> tc.Config:
    """A backward Config: dQ (and delta; two key loops when causal), then dK/dV (its query
    loop once per query head of a kv head's `group`, two loops each when causal)."""
    kv_n, kv_m, q_m, q_n, warps, stages, indexing, *more = entry
    loops = 2 if causal else 1
    blocks = [q_m, *[q_n] * loops, kv_n, *[kv_m] * (group * loops)]
    blocks = (blocks + [blocks[-1]] * count)[:count]  # should the kernel's layout change
    extra = {"indexing": indexing} if indexing else {}
    extra.update(*more)
    return tc.Config(block_sizes=blocks, num_warps=warps, num_stages=stages, **extra)


def helion_style_config(entry: tuple) -> tc.Config:
    """A Config of the Helion-style kernel (a batch tile of 1 row, query and key tiles)
    from (block_m, block_n, warps, stages, indexing)."""
    block_m, block_n, warps, stages, indexing = entry
    blocks = [1, block_m, block_n]
    return tc.Config(block_sizes=blocks, num_warps=warps, num_stages=stages, indexing=indexing)


def flops(shape: tuple, causal: bool) -> tuple[float, float]:
    """Forward and backward FLOPs of attention on (batch, heads, sequence, head_dim)."""
    batch, heads, seq, head_dim = shape
    forward = 4.0 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0)
    return forward, 2.5 * forward


def time_ms(fn: Callable[[], Any], device: torch.device) -> float:
    """Median milliseconds of `fn` (CUDA events after warm-up; wall clock on the CPU)."""
    if device.type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median"))
    times = []
    for _ in range(2):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def rel_error(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> float:
    """The largest ||got - want|| / ||want|| over pairs of tensors, in float64."""
    errors = []
    for a, b in zip(got, want, strict=True):
        den = float(b.double().norm())
        errors.append(float((a.double() - b.double()).norm()) / (den or 1.0))
    return max(errors)


class Case:
    """One shape, causal or not: inputs, the reference results, and the kernels' arguments."""

    def __init__(self, shape: tuple, causal: bool, dtype: torch.dtype, device: torch.device):
        self.shape, self.causal, self.device, self.dtype = shape, causal, device, dtype
        gen = torch.Generator(device=device).manual_seed(0)
        batch, heads, seq, head_dim = shape
        make = lambda: torch.randn(  # noqa: E731
            batch, heads, seq, head_dim, dtype=dtype, device=device, generator=gen
        )
        self.q, self.k, self.v, self.grad_out = make(), make(), make(), make()
        self.scale = head_dim**-0.5
        self.bias = self.q.new_empty(0)
        self.flags = (causal, self.scale, 0, False)  # causal, scale, window, has_bias
        self.expected = self.reference()

    def reference(self) -> tuple[torch.Tensor, ...]:
        """Output and gradients from SDPA's math backend in float32 (on a GPU: its flash
        backend in the inputs' dtype, as the math one would need too much memory)."""
        leaves = [t.detach().clone().requires_grad_() for t in (self.q, self.k, self.v)]
        if self.device.type != "cuda":
            leaves = [t.detach().float().requires_grad_() for t in leaves]
        backend = SDPBackend.FLASH_ATTENTION if self.device.type == "cuda" else SDPBackend.MATH
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(*leaves, is_causal=self.causal)
        grads = torch.autograd.grad(out, leaves, self.grad_out.to(out.dtype))
        return (out.detach(), *grads)

    def forward_args(self) -> tuple:
        return (self.q, self.k, self.v, self.bias, *self.flags)

    def backward_args(self, out: torch.Tensor, stats: torch.Tensor) -> tuple:
        return (self.grad_out, self.q, self.k, self.v, self.bias, out, stats, *self.flags)


def sweep(
    bound: Any, configs: list[tc.Config], args: tuple, check: Callable[[Any], float], case: Case
) -> tuple[dict, Callable[..., Any] | None]:
    """Each config checked (relative error against the reference) and timed: every trial
    and the fastest correct one, and that one's launcher (None if none passed)."""
    trials, launchers = [], {}
    for config in configs:
        trial: dict[str, Any] = {"config": repr(config), "fields": config.to_dict()}
        try:
            launcher = bound.compile(config)
            trial["rel_err"] = check(launcher(*args))
            if trial["rel_err"] <= MAX_REL_ERR[case.dtype]:
                trial["ms"] = time_ms(lambda launcher=launcher: launcher(*args), case.device)
                launchers[trial["config"]] = launcher
        except Exception as e:  # a config that fails to compile or run is recorded
            trial["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        trials.append(trial)
    timed = [t for t in trials if "ms" in t]
    best = min(timed, key=lambda t: t["ms"]) if timed else {}
    return {"best": best, "trials": trials}, launchers.get(best.get("config", ""))


def measure_tilecraft(case: Case, forward: list, backward: list) -> dict:
    """tilecraft's best forward and backward over the configs given."""
    args = case.forward_args()
    bound = attention_forward.bind(args)
    make = lambda e: forward_config(e, len(bound.spec.blocks))  # noqa: E731
    fwd, launcher = sweep(bound, _configs(forward, bound, make), args, _check_out(case), case)
    out, stats = (launcher or attention_forward)(*args)
    group = case.shape[1] // case.k.size(1)
    bargs = case.backward_args(out, stats)
    bound = attention_backward.bind(bargs)
    count = len(bound.spec.blocks)
    make = lambda e: backward_config(e, group, case.causal, count)  # noqa: E731
    bwd, _ = sweep(bound, _configs(backward, bound, make), bargs, _check_grads(case), case)
    for results, entries in ((fwd, forward), (bwd, backward)):
        if DEFAULT in entries:  # what an untuned call runs, marked for the table
            results["trials"][entries.index(DEFAULT)]["default"] = True
    return {"forward": fwd, "backward": bwd}


def _configs(entries: list, bound: Any, make: Callable[[Any], tc.Config]) -> list[tc.Config]:
    """The sweep's configs: `make` of each entry, the bound kernel's default for DEFAULT."""
    return [bound.default_config if e == DEFAULT else make(e) for e in entries]


def measure_masked(case: Case, ours: dict) -> dict:
    """tilecraft's fastest forward and backward configs again, compiled by fresh kernels
    with the alignment proofs off (every loop with device-computed bounds masked)."""
    found: dict[str, Any] = {}
    args = case.forward_args()
    out, stats = attention_forward(*args)  # the backward's inputs, from the proven kernel
    passes = (
        ("forward", attention_forward, args, _check_out(case)),
        ("backward", attention_backward, case.backward_args(out, stats), _check_grads(case)),
    )
    for direction, kernel, pass_args, check in passes:
        best = ours.get(direction, {}).get("best", {})
        if "fields" not in best:
            continue
        config = tc.Config(**best["fields"])
        with unproven():
            fresh = tc.kernel(kernel.fn)  # no BoundKernel shared with the proven one
            found[direction], _ = sweep(fresh.bind(pass_args), [config], pass_args, check, case)
    return found


class _HelionBound:
    """A Helion BoundKernel as `sweep` takes it: `compile(config)` gives the launcher."""

    def __init__(self, bound: Any) -> None:
        self.bound = bound

    def compile(self, config: Any) -> Callable[..., Any]:
        import helion

        return self.bound.compile_config(helion.Config(**config.to_dict()))


def measure_helion_style(case: Case, entries: list) -> dict:
    """The Helion-style forward (no backward there) on each config: by Helion 1.5.0
    (`helion`; where it cannot run, why) and by tilecraft (`helion_port`, the same source)."""
    args, name = (case.q, case.k, case.v), "causal_attention" if case.causal else "attention"
    configs = [helion_style_config(entry) for entry in entries]
    found: dict[str, Any] = {}
    module, reason = helion_or_reason(case.device.type == "cuda")
    if module is None:
        found["helion"] = {"error": reason}
    else:
        bound = _HelionBound(getattr(module, name).bind(args))
        found["helion"], _ = sweep(bound, configs, args, _check_helion_style(case), case)
    port = getattr(kernels("tilecraft"), name).bind(args)
    found["helion_port"], _ = sweep(port, configs, args, _check_helion_style(case), case)
    return found


def _check_helion_style(case: Case) -> Callable[[Any], float]:
    return lambda out: rel_error([out], [case.expected[0]])


def _check_out(case: Case) -> Callable[[Any], float]:
    return lambda result: rel_error([result[0]], [case.expected[0]])


def _check_grads(case: Case) -> Callable[[Any], float]:
    return lambda result: rel_error(result[:3], case.expected[1:])


def measure_peer(case: Case, backend: SDPBackend) -> dict:
    """SDPA under one backend: forward and backward milliseconds (or the error)."""
    result: dict[str, Any] = {}
    leaves = [t.detach().clone().requires_grad_() for t in (case.q, case.k, case.v)]
    try:
        with sdpa_kernel(backend):
            run = lambda: F.scaled_dot_product_attention(*leaves, is_causal=case.causal)  # noqa: E731
            out = run()
            result["rel_err"] = rel_error([out.detach()], [case.expected[0]])
            result["forward_ms"] = time_ms(run, case.device)
            grad = lambda: torch.autograd.grad(out, leaves, case.grad_out, retain_graph=True)  # noqa: E731
            result["backward_ms"] = time_ms(grad, case.device)
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return result


def measure(
    case: Case, forward: list, backward: list, masked: bool = False, helion: list | None = None
) -> dict:
    """One row: tilecraft's sweep (and with `masked`, its best configs without the
    alignment proofs), the peers, and the Helion-style forward on the `helion` configs, in
    ms and TFLOP/s, with ratios."""
    row: dict[str, Any] = {"shape": list(case.shape), "causal": case.causal}
    fwd_flops, bwd_flops = flops(case.shape, case.causal)
    try:
        ours = measure_tilecraft(case, forward, backward)
    except Exception as e:
        traceback.print_exc()
        ours = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
    row["tilecraft"] = ours
    if masked and "error" not in ours:
        try:
            row["tilecraft_masked"] = measure_masked(case, ours)
        except Exception as e:
            traceback.print_exc()
            row["tilecraft_masked"] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
    row["peers"] = {name: measure_peer(case, backend) for name, backend in PEERS.items()}
    if helion:
        try:
            row.update(measure_helion_style(case, helion))
        except Exception as e:
            traceback.print_exc()
            row["helion"] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
    row["tflops"] = tflops(row, fwd_flops, bwd_flops)
    return row


def tflops(row: dict, fwd_flops: float, bwd_flops: float) -> dict:
    """TFLOP/s of every measured pass: {who: {"forward": x, "backward": y}}."""
    found: dict[str, dict[str, float]] = {}
    for direction, count in (("forward", fwd_flops), ("backward", bwd_flops)):
        for who in ("tilecraft", "tilecraft_default", "tilecraft_masked", "helion", "helion_port"):
            best = _best(row, who, direction)
            if "ms" in best:
                found.setdefault(who, {})[direction] = count / best["ms"] / 1e9
        for name, peer in row["peers"].items():
            if f"{direction}_ms" in peer:
                found.setdefault(name, {})[direction] = count / peer[f"{direction}_ms"] / 1e9
    return found


def _best(row: dict, who: str, direction: str) -> dict:
    """The fastest trial of `who`'s sweep in `direction` ({} if none; for
    "tilecraft_default" the default config's trial): tilecraft's hold a
    sweep per direction, the Helion-style kernels' a forward sweep alone."""
    if who == "tilecraft_default":  # the default config's trial, if it ran
        trials = row.get("tilecraft", {}).get(direction, {}).get("trials", [])
        return next((t for t in trials if t.get("default")), {})
    found = row.get(who, {})
    if who.startswith("helion"):
        return found.get("best", {}) if direction == "forward" else {}
    return found.get(direction, {}).get("best", {})


def markdown(rows: list[dict]) -> str:
    """TFLOP/s forward / backward, and tilecraft's ratios to each peer."""
    lines = [
        "| shape (b, h, s, d) | causal | tilecraft fwd / bwd | flash fwd / bwd | cuDNN fwd / bwd"
        " | vs flash fwd / bwd | vs cuDNN fwd / bwd | default fwd / bwd |",
        "|---|---|---|---|---|---|---|---|",
    ]
    masked = any("tilecraft_masked" in row for row in rows)
    if masked:
        lines[0] += " masked fwd / bwd | vs masked fwd / bwd |"
        lines[1] += "---|---|"
    helion = any("helion_port" in row for row in rows)
    if helion:  # forward only
        lines[0] += " Helion fwd | tilecraft on Helion's source fwd | vs Helion fwd |"
        lines[1] += "---|---|---|"
    for row in rows:
        t = row["tflops"]
        cells = [str(tuple(row["shape"])), "yes" if row["causal"] else "no"]
        cells += [_pair(t.get(who, {})) for who in ("tilecraft", "flash", "cudnn")]
        cells += [_ratios(t, peer) for peer in ("flash", "cudnn")]
        cells.append(_pair(t.get("tilecraft_default", {})))
        if masked:
            cells += [_pair(t.get("tilecraft_masked", {})), _ratios(t, "tilecraft_masked")]
        if helion:
            cells += [_pair(t.get(who, {}), ("forward",)) for who in ("helion", "helion_port")]
            cells.append(_ratios(t, "helion", ("forward",)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


BOTH = ("forward", "backward")


def _pair(values: dict, directions: tuple = BOTH) -> str:
    return " / ".join(f"{values[d]:.0f}" if d in values else "-" for d in directions)


def _ratios(t: dict, peer: str, directions: tuple = BOTH) -> str:
    ours, theirs = t.get("tilecraft", {}), t.get(peer, {})
    parts = []
    for d in directions:
        ok = d in ours and d in theirs and theirs[d] > 0
        parts.append(f"{ours[d] / theirs[d]:.2f}x" if ok else "-")
    return " / ".join(parts)


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
        "dtype": str(args.dtype).removeprefix("torch."),
        "budget_s": args.budget_s,
        "masked_baseline": args.masked_baseline,
        "helion": None if args.no_helion else _version("helion"),
        "flops": "forward 4*b*h*s*s*d (x0.5 causal), backward 2.5x forward",
    }


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="a tiny shape on the CPU, float32")
    p.add_argument("--budget-s", type=float, default=180.0, help="seconds for the sweeps")
    p.add_argument("--causal-only", action="store_true", help="only the causal cases")
    p.add_argument("--plain-only", action="store_true", help="only the cases without a mask")
    p.add_argument("--shapes", help="only these shapes, as 1x16x16384x128,4x16x4096x128")
    p.add_argument(
        "--masked-baseline",
        action="store_true",
        help="also time the best configs with the compiler's alignment proofs off",
    )
    p.add_argument(
        "--no-helion", action="store_true", help="skip the Helion-style kernel (Helion's and ours)"
    )
    p.add_argument(
        "--backward-only", action="store_true", help="sweep the backward only (one forward)"
    )
    default_out = ROOT / "benchmarks" / "results" / "bench_attention.json"
    p.add_argument("--out", type=Path, default=default_out, help="where the JSON goes")
    args = p.parse_args(argv)
    args.device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    args.dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    return args


def run(args: argparse.Namespace, save: Callable[[list], None] = lambda rows: None) -> list[dict]:
    """Every case; configs beyond the first of each list only while the budget lasts. The
    rows so far go to `save` after each case (a run cut short keeps them)."""
    smoke = args.device == "cpu"
    shapes = SMOKE_SHAPES if smoke else SHAPES
    if args.shapes:
        shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")]
    forward, backward = (SMOKE_FORWARD, SMOKE_BACKWARD) if smoke else (FORWARD, BACKWARD)
    causal_forward = SMOKE_CAUSAL_FORWARD if smoke else CAUSAL_FORWARD
    causal_backward = SMOKE_CAUSAL_BACKWARD if smoke else CAUSAL_BACKWARD
    if args.backward_only:  # the first forward config only: it makes the backward's inputs
        forward, causal_forward = forward[:1], []
        if not smoke:
            backward, causal_backward = BACKWARD_BEST, CAUSAL_BACKWARD_BEST
    start, rows = time.perf_counter(), []
    for shape in shapes:
        for causal in (
            (True,) if args.causal_only else (False,) if args.plain_only else (False, True)
        ):
            spent = time.perf_counter() - start
            late = spent > args.budget_s
            lists = (forward[:1], backward[:1]) if late else (forward, backward)
            if causal and not late:
                lists = (forward + causal_forward, backward + causal_backward)
            row = run_case(shape, causal, args, *lists)
            row["swept"] = not late
            rows.append(row)
            save(rows)
            print(f"{shape} causal={causal}: {row.get('tflops')} ({spent:.0f} s)", flush=True)
    return rows


def run_case(shape: tuple, causal: bool, args: argparse.Namespace, *lists: list) -> dict:
    """One row; a failure (even of the reference) is recorded, never raised."""
    try:
        case = Case(shape, causal, args.dtype, torch.device(args.device))
        helion = SMOKE_HELION_FORWARD if args.device == "cpu" else HELION_FORWARD
        helion = None if args.no_helion else helion
        return measure(case, *lists, masked=args.masked_baseline, helion=helion)
    except Exception as e:
        traceback.print_exc()
        error = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        return {"shape": list(shape), "causal": causal, "error": error, "tflops": {}}
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main(argv: Sequence[str] | None = None) -> dict:
    """Measure, print the table, write the JSON; returns what was written."""
    args = parse(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read when generated code is loaded
    data: dict[str, Any] = {"environment": environment(args), "results": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(rows: list) -> None:
        data["results"] = rows
        args.out.write_text(json.dumps(data, indent=2) + "\n")

    save(run(args, save))
    print(markdown(data["results"]))
    print(f"wrote {args.out}")
    return data


if __name__ == "__main__":
    main()
