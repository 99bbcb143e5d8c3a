"""Energy per call of the energy-optimal config against the time-optimal one, and the energy
tuning itself uses (issue 14, item 4), on an NVIDIA GPU through NVML.

For five kernels in bf16 at realistic sizes (softmax, rms_norm, layer_norm and bias_gelu at
8192x8192, matmul at 4096^3): tune for time and for energy (small budgets), then measure
both winners again, alike (time: CUDA events; energy: NVML's counter over >= 0.2 s windows
of repeated calls, median of 3): joules per call, the energy saved and the slowdown it
costs. The energy each tuning run used (NVML's counter over its wall time) is reported for
the fast search against a classic one (`pattern`) on some kernels.

    python benchmarks/bench_energy.py [KERNEL ...] [--out PATH] [--smoke]
        --smoke    on the CPU: tiny float32 shapes, a simulated meter, a few configs
        --classic  comma-separated kernels also tuned by the classic search (default
                   softmax,matmul; "none" for none)

Writes JSON to --out (default $OUT/bench_energy.json or benchmarks/results/) and prints
markdown tables. Runs in about two minutes on an H200.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import tilecraft as tc  # noqa: E402
from tilecraft.autotune.energy import EnergyMeter, SimulatedMeter, default_meter  # noqa: E402
from tilecraft.autotune.runner import measure  # noqa: E402

# kernel -> input shape on the GPU, and on the CPU (--smoke)
SHAPES = {
    "softmax": ((8192, 8192), (9, 40)),
    "rms_norm": ((8192, 8192), (9, 40)),
    "layer_norm": ((8192, 8192), (9, 40)),
    "matmul": ((4096, 4096, 4096), (16, 24, 20)),
    "bias_gelu": ((8192, 8192), (9, 40)),
}
# Tuning budgets (seconds) on the GPU: five kernels, two objectives, two classic runs.
BUDGET_S = {"time": 5.0, "energy": 8.0, "classic": 10.0}
SMOKE_CONFIGS = 2  # configs each tuning run tries on the CPU
CLASSIC = "pattern"  # hill climbing one knob at a time, as classic autotuners do
REPEATS = 3  # energy measurements of each winner (the median is kept)


def load_example(name: str) -> ModuleType:
    """Import examples/NAME.py by path."""
    module_name = f"_bench_energy_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def fresh_kernel(name: str, cache_dir: Path, smoke: bool, **settings: Any) -> tc.Kernel:
    """The example's kernel with its own settings (the tuning database under cache_dir)."""
    fn = getattr(load_example(name), name).fn
    workers = {"autotune_workers": 0} if smoke else {}
    return tc.kernel(fn, cache_dir=cache_dir, autotune_quiet=True, **workers, **settings)


def inputs(name: str, smoke: bool) -> tuple:
    gpu_shape, cpu_shape = SHAPES[name]
    if smoke:
        return load_example(name).inputs(shape=cpu_shape, dtype=torch.float32, device="cpu")
    return load_example(name).inputs(shape=gpu_shape, dtype=torch.bfloat16, device="cuda")


def tune(
    name: str, args: tuple, cache_dir: Path, meter: EnergyMeter, smoke: bool, **options: Any
) -> dict[str, Any]:
    """One tuning run: its winner, wall time, trials and the energy it used."""
    kernel = fresh_kernel(name, cache_dir, smoke)
    if smoke:
        options["max_configs"] = SMOKE_CONFIGS
    start = time.perf_counter()
    config = kernel.autotune(args, meter=meter, **options)
    seconds = time.perf_counter() - start
    stats = kernel.bind(args).tuning
    return {
        "config": config,
        "tune_s": seconds,
        "configs": stats.get("configs"),
        "failed": stats.get("failed"),
        "search": stats.get("search"),
        "tuning_energy_j": stats.get("tuning_energy_j"),
        "pareto": [
            {"config": repr(p["config"]), "time_ms": p["time_ms"], "energy_j": p["energy_j"]}
            for p in stats.get("pareto", [])
        ],
    }


def fixed(name: str, config: tc.Config) -> tc.Kernel:
    """The example's kernel at `config`, compiled on its first call."""
    return tc.kernel(getattr(load_example(name), name).fn, config=config)


def per_call(name: str, config: tc.Config, args: tuple, meter: EnergyMeter) -> dict[str, Any]:
    """Time (ms) and energy (J) of one call of the kernel at `config`, measured alike for
    every config compared."""
    kernel = fixed(name, config)
    kernel(*args)  # compile
    ms = measure(kernel, args)

    def sync() -> None:
        if torch.cuda.is_available() and any(getattr(a, "is_cuda", False) for a in args):
            torch.cuda.synchronize()

    joules = [meter.per_call(lambda: kernel(*args), sync, config, ms) for _ in range(REPEATS)]
    measured = [j for j in joules if j is not None]
    return {
        "ms": ms,
        "energy_j": statistics.median(measured) if measured else None,
        "energy_runs_j": joules,
    }


def compare(
    name: str, meter: EnergyMeter, smoke: bool, classic: bool, cache_dir: Path
) -> dict[str, Any]:
    """Tune one kernel for time and for energy (and with the classic search), then measure
    both winners."""
    args = inputs(name, smoke)
    budget = {} if smoke else {"budget_s": BUDGET_S["time"]}
    fastest = tune(name, args, cache_dir, meter, smoke, objective="time", **budget)
    budget = {} if smoke else {"budget_s": BUDGET_S["energy"]}
    frugal = tune(name, args, cache_dir, meter, smoke, objective="energy", **budget)
    row: dict[str, Any] = {"kernel": name, "shape": list(args[0].shape)}
    row["time_objective"] = {**fastest, **per_call(name, fastest["config"], args, meter)}
    row["energy_objective"] = {**frugal, **per_call(name, frugal["config"], args, meter)}
    if classic:
        budget = {} if smoke else {"budget_s": BUDGET_S["classic"]}
        # a database of its own: the classic search learns nothing from the runs above
        alone = Path(tempfile.mkdtemp(prefix="tilecraft-energy-classic-"))
        run = tune(name, args, alone, meter, smoke, objective="time", search=CLASSIC, **budget)
        row["classic_search"] = {**run, "ms": measure(fixed(name, run["config"]), args)}
    for part in ("time_objective", "energy_objective", "classic_search"):
        if part in row:
            row[part]["config"] = repr(row[part]["config"])
    return row


def savings(row: dict[str, Any]) -> tuple[float | None, float | None]:
    """Energy saved (fraction) and slowdown (ratio) of the energy winner against the fastest."""
    t, e = row["time_objective"], row["energy_objective"]
    if t["energy_j"] is None or e["energy_j"] is None:
        return None, e["ms"] / t["ms"]
    return 1 - e["energy_j"] / t["energy_j"], e["ms"] / t["ms"]


def tables(rows: list[dict[str, Any]]) -> str:
    """The results as markdown: winners per objective, then the energy tuning used."""
    lines = [
        "| kernel | time-optimal ms | J/call | energy-optimal ms | J/call | energy saved |"
        " slowdown |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        t, e = row["time_objective"], row["energy_objective"]
        saved, slowdown = savings(row)
        lines.append(
            f"| {row['kernel']} | {t['ms']:.4f} | {_j(t['energy_j'])} | {e['ms']:.4f} |"
            f" {_j(e['energy_j'])} | {_pct(saved)} | {slowdown:.3f}x |"
        )
    lines += [
        "",
        f"| kernel | default search: s, J used, tuned ms | {CLASSIC}: s, J used, tuned ms |",
        "|---|---|---|",
    ]
    for row in rows:
        fast, classic = row["time_objective"], row.get("classic_search")
        other = "-" if classic is None else _run(classic)
        lines.append(f"| {row['kernel']} | {_run(fast)} | {other} |")
    return "\n".join(lines)


def _j(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _run(run: dict[str, Any]) -> str:
    used = run.get("tuning_energy_j")
    configs = f"{run['configs']} configs of {run['search']}"
    return f"{run['tune_s']:.1f} s, {_j(used)} J, {run['ms']:.4f} ms ({configs})"


def learn_landscapes(smoke: bool) -> None:
    """Teach the tuning database the recorded H200 landscapes, so the default search is
    the fast, model-guided one (as after a user's first tunings)."""
    folder = ROOT / "benchmarks" / "landscapes" / "h200"
    if smoke or not any(folder.glob("*.jsonl.gz")):
        return
    from tilecraft.cli import learn

    learn(str(folder))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", default=list(SHAPES))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--classic", default="softmax,matmul")
    options = parser.parse_args(argv)
    smoke = options.smoke or not torch.cuda.is_available()
    meter = SimulatedMeter() if smoke else default_meter((torch.empty(1, device="cuda"),))
    if meter is None:
        raise SystemExit("bench_energy.py: NVML reads no energy here (install nvidia-ml-py)")
    cache_dir = Path(tempfile.mkdtemp(prefix="tilecraft-energy-"))
    os.environ["TILECRAFT_CACHE_DIR"] = str(cache_dir)  # `learn` writes the default database
    learn_landscapes(smoke)
    classic = set(options.classic.split(","))
    started = time.perf_counter()
    rows = []
    for name in options.kernels:
        rows.append(compare(name, meter, smoke, name in classic, cache_dir))
        print(f"{name}: done after {time.perf_counter() - started:.0f} s", flush=True)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "device": torch.cuda.get_device_name() if not smoke else "cpu (simulated meter)",
        "meter": meter.to_job(),
        "smoke": smoke,
        "wall_s": time.perf_counter() - started,
        "rows": rows,
    }
    out = options.out or Path(os.environ.get("OUT", ROOT / "benchmarks" / "results"))
    if out.suffix != ".json":
        out = out / "bench_energy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(tables(rows))
    return result


if __name__ == "__main__":
    main()
