"""Record tuning landscapes: a few hundred measured configs per example kernel and shape.

Each case samples configs spread over its space (the default, the heuristic seeds,
random configs) and then the neighbourhoods of the fastest, measures them with the
benchmarking engine, stores every trial in a tuning database and writes a landscape
file (`benchmarks/landscapes/h200/<case>.jsonl.gz`) that `search_eval.py` replays.

Besides the examples' kernels it records `tilecraft.nn`'s: the attention forward and
backward (`--cases attention`: head dims 64 and 128, causal and not) and the 2-D convolution's
implicit and plain GEMMs and depthwise stencil (`--cases conv2d`: ResNet-50 and
MobileNetV2 layers, channels-last, batch 32),
with the arguments `tilecraft.nn.attention` and `tilecraft.nn.conv2d` pass them
(`tilecraft.nn.cases`), so a user's call finds the recorded trials under its own key.

Usage (on a GPU; `--shard 1/2` records every second case, for two GPUs)::

    python benchmarks/record_landscape.py [--configs 200] [--cases softmax,matmul]
        [--out benchmarks/landscapes/h200] [--db tuning.sqlite3] [--shard I/N]
        [--deadline SECONDS]
    python benchmarks/record_landscape.py --cases attention,conv2d --configs 40 \
        --case-seconds 25 --deadline 220

`--configs` counts configs per case; kernels with matrix products get `--dot-configs`
(by default 1.5 times as many). On a CPU it runs under Triton's interpreter with `--tiny`
shapes (a smoke test).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tilecraft.autotune.bench import Benchmarker  # noqa: E402
from tilecraft.autotune.db import TuningDB  # noqa: E402
from tilecraft.autotune.landscape import Case, Landscape, knob_choices  # noqa: E402
from tilecraft.autotune.search.common import SeededSearch  # noqa: E402
from tilecraft.autotune.seeds import heuristic_seeds  # noqa: E402
from tilecraft.autotune.space import space_of  # noqa: E402
from tilecraft.autotune.trial import Budget, Trial  # noqa: E402
from tilecraft.autotune.tune import hardware, tune_key  # noqa: E402

NN = "tilecraft.nn.cases"  # the module that makes tilecraft.nn kernels' arguments
CAUSAL = (("causal", True),)
# (batch, heads, sequence, head_dim), causal or not
ATTENTION = [(4, 16, 4096, 128), (8, 32, 2048, 64)]
# ResNet-50 layers, channels-last: (batch, in_ch, size, out_ch, kernel, stride)
CONV_GEMM = [(32, 128, 28, 128, 3, 1), (32, 256, 14, 256, 3, 1), (32, 512, 7, 512, 3, 1),
             (32, 256, 28, 256, 3, 2)]  # fmt: skip
CONV_POINTWISE = [(32, 512, 28, 128, 1, 1), (32, 256, 14, 1024, 1, 1), (32, 2048, 7, 512, 1, 1)]
# MobileNetV2 depthwise 3x3 layers, channels-last: as above, then groups (= channels)
CONV_DEPTHWISE = [(32, 144, 56, 144, 3, 1, 144), (32, 144, 56, 144, 3, 2, 144),
                  (32, 384, 14, 384, 3, 1, 384)]  # fmt: skip


def nn_cases(tiny: bool = False) -> list[Case]:
    """tilecraft.nn's attention forward and backward (causal and not) and convolutions, bf16; tiny
    float32 ones for a CPU."""
    if tiny:
        attention, gemm, pointwise = [(1, 2, 37, 16)], [(2, 5, 7, 6, 3, 2)], [(2, 6, 5, 7, 1, 1)]
        depthwise = [(2, 6, 7, 6, 3, 1, 6)]
    else:
        attention, gemm, pointwise = ATTENTION, CONV_GEMM, CONV_POINTWISE
        depthwise = CONV_DEPTHWISE
    dtype = "float32" if tiny else "bfloat16"
    out = []
    for shape in attention:
        for function in ("attention_forward", "attention_backward"):
            out += [Case(NN, function, shape, dtype, flags) for flags in ((), CAUSAL)]
    out += [Case(NN, "conv2d_gemm", shape, dtype) for shape in gemm]
    out += [Case(NN, "conv2d_depthwise", shape, dtype) for shape in depthwise]
    return out + [Case(NN, "conv2d_pointwise", shape, dtype) for shape in pointwise]


def cases(tiny: bool = False) -> list[Case]:
    """Eight-plus kernels, three shapes each (bf16), then tilecraft.nn's. HELD_OUT shapes
    are never recorded."""
    rows = [(1024, 1024), (4096, 4096), (2048, 16384)]
    table = {
        ("add", "add"): [(1024, 1024), (4096, 4096), (16384, 1024)],
        ("bias_gelu", "bias_gelu"): [(2048, 1024), (8192, 4096), (1024, 16384)],
        ("softmax", "softmax"): rows,
        ("rms_norm", "rms_norm"): rows,
        ("layer_norm", "layer_norm"): rows,
        ("cross_entropy", "cross_entropy"): [(4096, 8192), (8192, 2048), (2048, 50257)],
        ("sum", "sum_rows"): [(4096, 4096), (16384, 1024), (1024, 16384)],
        ("matmul", "matmul"): [(1024, 1024, 1024), (2048, 2048, 2048), (8192, 1024, 8192)],
        ("bmm", "bmm"): [(16, 512, 512, 512), (64, 256, 128, 256), (8, 1024, 1024, 1024)],
    }
    if tiny:
        return [
            Case("softmax", "softmax", (37, 200), "float32"),
            Case("matmul", "matmul", (40, 48, 33), "float32"),
            *nn_cases(tiny=True),
        ]
    examples = [Case(ex, fn, shape) for (ex, fn), shapes in table.items() for shape in shapes]
    return examples + nn_cases()


def wanted(case: Case, names: set[str]) -> bool:
    """Whether `--cases` names this case: by its example, or a prefix of its function
    (`attention` for attention_forward, `conv2d` for both convolution kernels)."""
    return not names or case.example in names or any(case.function.startswith(n) for n in names)


class Sampler(SeededSearch):
    """Spread first (default, seeds, random configs), then the leaders' neighbourhoods."""

    name = "landscape"
    spread = 0.55  # share of the budget spent on random configs
    batch = 48
    leaders = 4

    def search(self) -> None:
        self.measure(self.starts(0))
        total = self.budget.max_configs or 200
        while not self.done() and len(self.trials) < self.spread * total:
            if not self.measure(self.draw(self.batch)):
                break
        while not self.done():
            near = [
                n for t in self.ranked()[: self.leaders] for n in self.space.neighbors(t.config)
            ]
            fresh = self.unseen(near)[: self.batch] or self.draw(self.batch)
            if not self.measure(fresh):
                break


def record(case: Case, args: argparse.Namespace, db: TuningDB) -> Landscape:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    _, bound, inputs = case.bind(device)
    key = tune_key(bound, inputs)
    space = space_of(bound, on_gpu=device == "cuda")
    with Benchmarker(bound, inputs, workers=args.workers, timeout_s=args.timeout) as bench:

        def evaluate(configs: list) -> list[Trial]:
            trials = bench(configs)
            db.record_for(key, trials, bound.src.tree.name, "landscape")
            return trials

        dot_configs = args.dot_configs or args.configs * 3 // 2
        n = dot_configs if bound.spec.dot_blocks else args.configs
        sampler = Sampler(
            space,
            evaluate,
            Budget(n, args.case_seconds),
            seed=args.seed,
            seeds=heuristic_seeds(space),
        )
        best = sampler.run()
    if best is not None and best.time_ms is not None:
        db.save_best(key, best.config, best.time_ms)
    return Landscape(case, hardware(inputs), key.versions, knob_choices(space), sampler.trials)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=200)
    parser.add_argument("--dot-configs", type=int, default=None, help="for matrix products")
    parser.add_argument("--cases", default="", help="comma-separated example names")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "landscapes" / "h200"))
    parser.add_argument("--db", default=os.environ.get("OUT", "/tmp") + "/landscapes.sqlite3")
    parser.add_argument("--shard", default="0/1")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--case-seconds", type=float, default=None)
    parser.add_argument("--deadline", type=float, default=None, help="stop starting cases after")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    index, count = map(int, args.shard.split("/"))
    names = set(filter(None, args.cases.split(",")))
    todo = [c for c in cases(args.tiny) if wanted(c, names)][index::count]
    started = time.monotonic()
    with TuningDB(args.db) as db:
        for case in todo:
            path = Path(args.out) / f"{case.name}.jsonl.gz"
            if path.exists():
                print(f"{case.name}: already recorded", flush=True)
                continue
            if args.deadline and time.monotonic() - started > args.deadline:
                print(f"{case.name}: skipped (deadline)", flush=True)
                continue
            t0 = time.monotonic()
            land = record(case, args, db)
            land.save(path)
            ok = [t for t in land.trials if t.ok]
            print(
                f"{case.name}: {len(land.trials)} trials, {len(ok)} ok, best "
                f"{land.best_ms if ok else float('nan'):.4f} ms, {time.monotonic() - t0:.0f} s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
