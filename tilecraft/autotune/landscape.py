"""Landscapes: many trials of one kernel at one shape, recorded on a GPU, kept as a file.

A landscape file (`.jsonl.gz`) holds a header line (which example kernel, shape and
dtype; the hardware and versions; the knobs' choices at recording time) and then one
line per trial. `replay.py` answers benchmarks from it; `features.py` and `model.py`
learn from it.

Example::

    land = Landscape.load("benchmarks/landscapes/h200/softmax-4096x4096.jsonl.gz")
    bound = land.case.bind("meta")[1]   # the kernel, analysed without any data
    space = land.space(bound)           # the space the trials were drawn from
"""

from __future__ import annotations

import gzip
import importlib
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from tilecraft.autotune.db import TuningDB
from tilecraft.autotune.features import describe
from tilecraft.autotune.space import ConfigSpace, Knob, space_of
from tilecraft.autotune.trial import Trial
from tilecraft.autotune.tune import tune_key
from tilecraft.runtime.bound import BoundKernel
from tilecraft.runtime.config import Config
from tilecraft.shipped import examples_folder

FORMAT = 1
EXAMPLES = examples_folder()


@dataclass(frozen=True)
class Case:
    """An example kernel at one shape and dtype: `examples/<example>.py`'s `function`.

    `example` may also be a dotted module of the package (`tilecraft.nn.cases`). Its
    arguments come from the module's `<function>_inputs`, or else its `inputs`, called with
    the shape, dtype, device and `params` (more keywords, such as attention's `causal`)."""

    example: str
    function: str
    shape: tuple[int, ...]
    dtype: str = "bfloat16"
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def name(self) -> str:
        flags = "".join(f"-{_param_text(k, v)}" for k, v in self.params)
        return f"{self.function}-{'x'.join(map(str, self.shape))}{flags}-{self.dtype}"

    def bind(
        self, device: str = "meta", examples: Path = EXAMPLES
    ) -> tuple[Any, BoundKernel, tuple]:
        """(kernel, bound kernel, arguments) on `device`; "meta" allocates nothing."""
        if str(examples) not in sys.path:
            sys.path.insert(0, str(examples))  # plain imports, so workers can import them too
        module = importlib.import_module(self.example)
        make = getattr(module, f"{self.function}_inputs", None) or module.inputs
        dtype = getattr(torch, self.dtype)
        args = make(shape=self.shape, dtype=dtype, device=device, **dict(self.params))
        kernel = getattr(module, self.function)
        return kernel, kernel.bind(args), args

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "example": self.example,
            "function": self.function,
            "shape": list(self.shape),
            "dtype": self.dtype,
        }
        if self.params:  # written only when there are any: older files stay as they were
            out["params"] = dict(self.params)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Case:
        params = tuple(sorted(d.get("params", {}).items()))
        shape, dtype = tuple(d["shape"]), d.get("dtype", "bfloat16")
        return cls(d["example"], d["function"], shape, dtype, params)


def _param_text(key: str, value: Any) -> str:
    """A parameter in a case's name: the key for a true flag, `key=value` otherwise."""
    if value is True:
        return key
    return f"no_{key}" if value is False else f"{key}={value}"


@dataclass
class Landscape:
    """The recorded trials of one Case on one machine."""

    case: Case
    hardware: str
    versions: str
    knobs: dict[str, list[Any]]
    trials: list[Trial] = field(default_factory=list)

    @property
    def best_ms(self) -> float:
        return min(t.time_ms for t in self.trials if t.ok and t.time_ms is not None)

    def space(self, bound: BoundKernel) -> ConfigSpace:
        """The bound kernel's space with the knob choices of the recording machine (which
        may differ from this one's, e.g. in the indexing modes its Triton supports)."""
        space = space_of(bound)
        space.knobs = [_with_choices(k, self.knobs.get(k.name)) for k in space.knobs]
        return space

    def save(self, path: Path | str) -> None:
        """Write atomically (a crash leaves the old file or none, never half of one)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {
            "format": FORMAT,
            "case": self.case.to_json(),
            "hardware": self.hardware,
            "versions": self.versions,
            "knobs": self.knobs,
        }
        tmp = path.with_name(path.name + ".tmp")
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            f.write(json.dumps(header) + "\n")
            for t in self.trials:
                f.write(json.dumps(_trial_json(t)) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path | str) -> Landscape:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            header = json.loads(f.readline())
            if header.get("format") != FORMAT:
                raise ValueError(f"{path}: landscape format {header.get('format')} is unknown")
            trials = [_trial_from_json(json.loads(line)) for line in f if line.strip()]
        return cls(
            Case.from_json(header["case"]),
            header["hardware"],
            header["versions"],
            header["knobs"],
            trials,
        )


def load_all(folder: Path | str) -> list[Landscape]:
    """Every landscape in a folder, by file name."""
    return [Landscape.load(p) for p in sorted(Path(folder).glob("*.jsonl.gz"))]


def knob_choices(space: ConfigSpace) -> dict[str, list[Any]]:
    """The knobs' choices as JSON can hold them."""
    return {
        k.name: [list(c) if isinstance(c, tuple) else c for c in k.choices] for k in space.knobs
    }


def _with_choices(knob: Knob, recorded: list[Any] | None) -> Knob:
    if recorded is None:
        return knob
    choices = tuple(tuple(c) if isinstance(c, list) else c for c in recorded)
    default = knob.default if knob.default in choices else choices[0]
    return type(knob)(knob.field, knob.index, choices, default)


def _trial_json(t: Trial) -> dict[str, Any]:
    out: dict[str, Any] = {
        "config": t.config.to_dict(),
        "status": t.status,
        "time_ms": t.time_ms,
        "compile_s": round(t.compile_s, 3),
        "bench_s": round(t.bench_s, 3),
    }
    if t.error:
        out["error"] = t.error[:200]
    return out


def _trial_from_json(d: dict[str, Any]) -> Trial:
    return Trial(
        Config(**d["config"]),
        d["status"],
        d.get("time_ms"),
        d.get("compile_s", 0.0),
        d.get("error", ""),
        d.get("bench_s", 0.0),
    )


def import_landscapes(db: TuningDB, folder: Path | str) -> int:
    """Store every landscape in `folder` in the tuning database (trials, descriptions and
    best configs), as if tuned on its machine; returns the number of trials."""
    count = 0
    for land in load_all(folder):
        _, bound, args = land.case.bind("meta")
        key = replace(tune_key(bound, args), hardware=land.hardware, versions=land.versions)
        db.record_for(key, land.trials, bound.src.tree.name, "landscape")
        db.save_description(key.kernel, key.spec_key, key.hardware, describe(bound, key.hardware))
        best = next(t for t in land.trials if t.ok and t.time_ms == land.best_ms)
        db.save_best(key, best.config, land.best_ms)
        count += len(land.trials)
    return count
