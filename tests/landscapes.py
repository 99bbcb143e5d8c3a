"""Seeded synthetic landscapes for the search tests: a ConfigSpace built by hand (nothing
is compiled), a time per config with a known optimum, regions that fail, and a simulated
clock that each measured batch advances."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilecraft.autotune.space import ConfigSpace, Knob
from tilecraft.autotune.trial import Budget, Trial
from tilecraft.frontend.blocks import BlockSpec
from tilecraft.runtime.config import Config
from tilecraft.runtime.heuristics import default_config
from tilecraft.runtime.spec import KernelSpec

RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "landscapes" / "h200"
# kernels and shapes recorded after the model tests' thresholds were set
# (test_nn_landscapes.py covers them): with the depthwise stencil's 180 trials the
# held-out picks of rms_norm and add moved by about 1%, past margins of 5%; with attention's
# head-dim-64 backward, rms_norm's top pick (among three predicted within 0.07 of each
# other) went from 1.04x to 1.33x its best and a fast search's stall test no longer
# stalled, while over all 45 held-out shapes the picks moved both ways
# (benchmarks/RESULTS.md, sixth session of 2026-12-03)
LATER = ("conv2d_depthwise", "attention_backward-8x32x2048x64")


def recorded_names() -> list[str]:
    """The recorded H200 landscapes the model tests train on (`<kernel>-<shape>`, bf16)."""
    found = (p.name.removesuffix("-bfloat16.jsonl.gz") for p in RECORDED.glob("*.jsonl.gz"))
    return sorted(n for n in found if not n.startswith(LATER))


BEST_MS = 1.0  # the noise-free time of the optimum
NOISE = 0.01  # measured times are off by up to this fraction, deterministically per config
COMPILE_WORKERS = 4  # a batch compiles this many configs at once on the simulated clock
TIMEOUT_S = 5.0
# The fastest value of each knob, and the cost of each step (in choices) away from it.
TARGET: dict[str, Any] = {
    "block_sizes[0]": 128,
    "block_sizes[1]": 64,
    "reduction_loops[0]": 2048,
    "pid_type": "persistent_blocked",
    "indexing[0]": -1,  # the last choice of this Triton: tensor descriptors where offered
    "indexing[1]": "pointer",
    "range_num_stages[0]": 2,
    "range_unroll_factors[0]": 2,
    "num_warps": 4,
    "num_stages": 4,
}
WEIGHTS = {
    "block_sizes[0]": 0.03,
    "block_sizes[1]": 0.05,
    "pid_type": 0.06,
    "indexing[0]": 0.1,
    "indexing[1]": 0.1,
    "range_num_stages[0]": 0.03,
    "range_unroll_factors[0]": 0.02,
    "num_warps": 0.08,
    "num_stages": 0.04,
}
# Knobs with a penalty per value instead: holding the whole row (None) is a local optimum.
TABLES: dict[str, dict[Any, float]] = {
    "reduction_loops[0]": {None: 0.15, 4096: 0.3, 2048: 0.0, 1024: 0.05, 512: 0.12, 256: 0.25},
}
TABLE_MISSING = 0.5  # the penalty of values a table leaves out
# Interactions: the tile (block_sizes[0] * block_sizes[1]) has a best size, and the best
# num_warps grows with the tile: a ridge that one-knob steps climb slowly.
TILE_LOG2 = 13  # log2 of the tile at the optimum
TILE_WEIGHT = 0.005
WARPS_WEIGHT = 0.01
FLAKY = 0.03  # share of slow configs that fail at random (a runtime_error)


def kernel_spec() -> KernelSpec:
    """A row-blocked kernel with an inner tile and a long reduction."""
    return KernelSpec(
        blocks=[BlockSpec(extent=4096, inner=False), BlockSpec(2048, inner=True)],
        reductions=[8192],
        grids=[1],
        device_loops=1,
        memory_ops=2,
        values=[(("tile", 0), ("tile", 1))],
    )


class Landscape:
    """`evaluate` for a search: deterministic per (seed, config); `clock` is simulated.

    With `fail_all`, every config fails to compile. `batches` records the simulated
    time at which each batch started and its size.
    """

    def __init__(self, seed: int = 0, fail_all: bool = False) -> None:
        self.seed, self.fail_all = seed, fail_all
        self.spec = kernel_spec()
        # without the launch-only knobs (maxnreg, ...): the synthetic times ignore them
        self.space = ConfigSpace(self.spec, default_config(self.spec), on_gpu=False)
        self.knobs = {k.name: k for k in self.space.knobs}
        self.now = 0.0
        self.batches: list[tuple[float, int]] = []
        self.best_ms = math.inf

    def clock(self) -> float:
        return self.now

    def budget(
        self, max_configs: int | None = None, max_seconds: float | None = None, until_ms: float = 0
    ) -> Budget:
        """A Budget on this landscape's clock that also ends once a measured time is at most
        `until_ms` (which saves tests time after they have their answer)."""
        return UntilBudget(max_configs, max_seconds, self.clock, landscape=self, until_ms=until_ms)

    @property
    def optimum(self) -> Config:
        target = {name: self.target(knob) for name, knob in self.knobs.items()}
        return self.space.config(target)

    def __call__(self, configs: list[Config]) -> list[Trial]:
        self.batches.append((self.now, len(configs)))
        trials = [self.trial(c) for c in configs]
        self.best_ms = min([self.best_ms, *(t.time_ms for t in trials if t.time_ms is not None)])
        compile_s = sum(t.compile_s for t in trials) / COMPILE_WORKERS
        self.now += compile_s + sum(self.run_seconds(t) for t in trials)
        return trials

    def trial(self, config: Config) -> Trial:
        compile_s = 0.5 + self.uniform(config, "compile")
        status = self.failure(config)
        if status is not None:
            return Trial(config, status, compile_s=compile_s, error="synthetic")
        noise = 1 + NOISE * (2 * self.uniform(config, "noise") - 1)
        return Trial(config, "ok", self.time_ms(config) * noise, compile_s)

    def time_ms(self, config: Config) -> float:
        """The noise-free time: BEST_MS at the optimum, growing away from it."""
        values = self.space.values(config)
        penalty = sum(self.penalty(n, v) for n, v in values.items())
        return BEST_MS * math.exp(penalty + _interactions(values))

    def failure(self, config: Config) -> str | None:
        """The failing status of a config, or None if it runs."""
        v = self.space.values(config)
        tile = v["block_sizes[0]"] * v["block_sizes[1]"]
        if self.fail_all or (v["num_warps"] == 32 and tile >= 4096):
            return "compile_error"
        if v["num_stages"] == 5 and tile >= 16384:
            return "compile_error"  # out of shared memory
        if v["pid_type"] == "xyz" and v["block_sizes[0]"] <= 2:
            return "timeout"
        if v["range_num_stages[0]"] == 4 and v["range_unroll_factors[0]"] == 4:
            return "wrong_result"
        slow = self.time_ms(config) > 1.3 * BEST_MS
        return "runtime_error" if slow and self.uniform(config, "flaky") < FLAKY else None

    def run_seconds(self, trial: Trial) -> float:
        if trial.status == "timeout":
            return TIMEOUT_S
        return 0.2 + 0.05 * (trial.time_ms or 0.0)

    def target(self, knob: Knob) -> Any:
        value = TARGET[knob.name]
        return knob.choices[value] if isinstance(value, int) and value < 0 else value

    def penalty(self, name: str, value: Any) -> float:
        if name in TABLES:
            return TABLES[name].get(value, TABLE_MISSING)
        return WEIGHTS[name] * self.distance(name, value) ** 2

    def distance(self, name: str, value: Any) -> int:
        knob = self.knobs[name]
        return abs(knob.choices.index(value) - knob.choices.index(self.target(knob)))

    def uniform(self, config: Config, salt: str) -> float:
        """A number in [0, 1) fixed by the seed, the config and `salt`."""
        key = f"{self.seed}:{salt}:{config.to_json()}".encode()
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2.0**64


def _interactions(values: dict[str, Any]) -> float:
    """The penalty of a tile away from its best size, and of warps that do not fit it."""
    off = math.log2(values["block_sizes[0]"] * values["block_sizes[1]"]) - TILE_LOG2
    warps_off = math.log2(values["num_warps"]) - math.log2(TARGET["num_warps"]) - off / 2
    return TILE_WEIGHT * off**2 + WARPS_WEIGHT * warps_off**2


@dataclass
class UntilBudget(Budget):
    """A Budget that also runs out once `landscape` has measured `until_ms` or less."""

    landscape: Landscape | None = None
    until_ms: float = 0.0

    def exhausted(self) -> bool:
        reached = self.landscape is not None and self.landscape.best_ms <= self.until_ms
        return reached or super().exhausted()
