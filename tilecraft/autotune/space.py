"""`ConfigSpace`: typed knobs derived from a bound kernel, each able to give a default, a
random value, its neighbours and a numeric encoding."""

from __future__ import annotations

import itertools
import math
import random
import weakref
from dataclasses import dataclass
from typing import Any

from tilecraft.codegen.access import supported_indexing
from tilecraft.language.tunables import Choice, IntRange, PowerOfTwo
from tilecraft.runtime.budget import HOPPER, footprint, pow2_ceil
from tilecraft.runtime.config import Config
from tilecraft.runtime.spec import KernelSpec

MAX_ELEMENTS = 1 << 16  # largest tile a program may hold (registers) before it is refused
MAX_BLOCK = 4096
MAX_INNER_BLOCK = 16384  # a device loop's chunk: one long row chunk per step streams best
MIN_CHUNK = 64  # the shortest chunk a looped reduction takes
REGISTERS = 65536  # 32-bit registers per SM (and per block) on Hopper and Ampere


@dataclass(frozen=True)
class Knob:
    """One tunable value: `field` of a Config, at `index` for list fields."""

    field: str
    index: int | None
    choices: tuple[Any, ...]  # ordered: neighbours are the adjacent choices
    default: Any

    @property
    def name(self) -> str:
        return self.field if self.index is None else f"{self.field}[{self.index}]"

    def random(self, rng: random.Random) -> Any:
        return rng.choice(self.choices)

    def neighbors(self, value: Any) -> list[Any]:
        if value not in self.choices:
            return [self.default]
        i = self.choices.index(value)
        return [self.choices[j] for j in (i - 1, i + 1) if 0 <= j < len(self.choices)]

    def encode(self, value: Any) -> float:
        """A number for models: log2 of sizes, the position of other choices."""
        if isinstance(value, bool) or value is None or not isinstance(value, int):
            return float(self.choices.index(value)) if value in self.choices else -1.0
        return math.log2(value) if value > 0 else 0.0

    def snap(self, value: Any) -> Any:
        """The valid choice nearest to `value` (numbers by log distance)."""
        if value in self.choices:
            return value
        numbers = [c for c in self.choices if isinstance(c, int) and not isinstance(c, bool)]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and numbers:
            target = math.log2(max(float(value), 1e-9))
            return min(numbers, key=lambda c: abs(math.log2(max(c, 1e-9)) - target))
        return self.default


@dataclass(frozen=True)
class PermutationKnob(Knob):
    """A loop order: neighbours swap two adjacent dims."""

    def neighbors(self, value: Any) -> list[Any]:
        value = list(value)
        out = []
        for i in range(len(value) - 1):
            swapped = value.copy()
            swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
            out.append(swapped)
        return out

    def encode(self, value: Any) -> float:
        return float(self.choices.index(tuple(value))) if tuple(value) in self.choices else -1.0


def _powers(low: int, high: int) -> tuple[int, ...]:
    return tuple(1 << i for i in range(max(low, 1).bit_length() - 1, high.bit_length()))


class ConfigSpace:
    """The configs of one bound kernel, as knobs."""

    def __init__(
        self,
        spec: KernelSpec,
        default: Config,
        on_gpu: bool = True,
        whole: frozenset[int] = frozenset(),
    ) -> None:
        self.spec, self.default_config = spec, default
        self.whole = whole  # reductions that must not be looped (`space_of`)
        self.knobs = list(self._knobs(spec, default, on_gpu))

    def _knobs(self, spec: KernelSpec, default: Config, on_gpu: bool) -> Any:
        d = default.to_dict()
        for i, block in enumerate(spec.blocks):
            low = spec.smallest_block(i)
            cap = MAX_INNER_BLOCK if block.inner and i not in spec.dot_blocks else MAX_BLOCK
            high = max(low, min(pow2_ceil(block.extent), cap))
            yield Knob("block_sizes", i, _powers(low, high), d["block_sizes"][i])
        for i, extent in enumerate(spec.reductions):
            padded = pow2_ceil(extent)
            chunks = () if i in self.whole else _powers(MIN_CHUNK, padded // 2)
            yield Knob("reduction_loops", i, (None, *reversed(chunks)), d["reduction_loops"][i])
        for i, ndim in enumerate(spec.loop_orders):
            perms = tuple(itertools.permutations(range(ndim)))
            yield PermutationKnob("loop_orders", i, perms, tuple(range(ndim)))
        for i, ndim in enumerate(spec.grids):
            if ndim >= 2:
                yield Knob("l2_groupings", i, (1, 2, 4, 8, 16, 32, 64), 1)
        for i in sorted(spec.uneven_grids):  # programs of uneven work: longest first?
            yield Knob("reversed_launches", i, (False, True), False)
        pid_types = ("flat", "xyz", "persistent_blocked", "persistent_interleaved")
        yield Knob("pid_type", None, pid_types, "flat")
        for i in range(spec.memory_ops):
            yield Knob("indexing", i, tuple(supported_indexing()), "pointer")
        for i in range(spec.loads):  # None: no hint; "last": keep for reuse; "first": streamed
            default_hint = _entry(d, "load_eviction_policies", i)
            yield Knob("load_eviction_policies", i, EVICTIONS, default_hint)
        for i in range(spec.device_loops):
            yield Knob("range_num_stages", i, (None, 1, 2, 3, 4), None)
            yield Knob("range_unroll_factors", i, (None, 1, 2, 4), None)
        yield Knob("num_warps", None, (1, 2, 4, 8, 16, 32), d.get("num_warps", 4))
        yield Knob("num_stages", None, (1, 2, 3, 4, 5), d.get("num_stages", 1))
        if on_gpu:  # launch options Triton's interpreter ignores
            yield Knob("num_sm_multiplier", None, (1, 2, 4, 8), d.get("num_sm_multiplier", 1))
            yield Knob("maxnreg", None, (None, 64, 128, 256), d.get("maxnreg"))
        for name, fragment in spec.tunables.items():
            yield Knob(name, None, _fragment_choices(fragment), d.get(name))

    # -- configs <-> knob values ---------------------------------------------------------
    def values(self, config: Config) -> dict[str, Any]:
        """The knob values of a config (missing entries take the knob's default)."""
        d = config.to_dict()
        out = {}
        for knob in self.knobs:
            raw = d.get(knob.field)
            if knob.index is not None:
                raw = (
                    raw[knob.index]
                    if isinstance(raw, list) and knob.index < len(raw)
                    else (
                        raw if knob.field == "indexing" and isinstance(raw, str) else knob.default
                    )
                )
            value = knob.default if raw is None and knob.field != "reduction_loops" else raw
            if isinstance(knob, PermutationKnob):
                value = tuple(value or knob.default)
            out[knob.name] = value
        return out

    def config(self, values: dict[str, Any]) -> Config:
        """The Config made of these knob values."""
        fields: dict[str, Any] = {}
        for knob in self.knobs:
            value = values.get(knob.name, knob.default)
            value = list(value) if isinstance(knob, PermutationKnob) else value
            if knob.index is None:
                fields[knob.field] = value
            else:  # at its index: some loops have no knob (l2_groupings of a 1-D grid)
                entries = fields.setdefault(knob.field, [])
                entries += [None] * (knob.index + 1 - len(entries))
                entries[knob.index] = value
        if not str(fields.get("pid_type", "flat")).startswith("persistent"):
            fields.pop("num_sm_multiplier", None)  # programs per SM of persistent kernels only
        return Config(**{k: v for k, v in fields.items() if v is not None})

    def default(self) -> Config:
        return self.config(self.values(self.default_config))

    def random(self, rng: random.Random) -> Config:
        """A random valid config: drawn until one fits, else the last draw repaired."""
        values: dict[str, Any] = {}
        for _ in range(100):
            values = {k.name: k.random(rng) for k in self.knobs}
            config = self.config(values)
            if self.is_valid(config):
                return config
        return self.repair(values)

    def neighbors(self, config: Config) -> list[Config]:
        """Valid configs that differ from `config` in one knob by one step."""
        values = self.values(config)
        out = []
        for knob in self.knobs:
            for value in knob.neighbors(values[knob.name]):
                candidate = self.config({**values, knob.name: value})
                if self.is_valid(candidate):
                    out.append(candidate)
        return out

    def encode(self, config: Config) -> list[float]:
        values = self.values(config)
        return [k.encode(values[k.name]) for k in self.knobs]

    def snap(self, values: dict[str, Any]) -> Config:
        """The config of the nearest choices to (possibly invalid) knob values; unknown names
        dropped. It may not fit the budgets: see `is_valid` and `repair`."""
        known = {k.name: k for k in self.knobs}
        snapped = {name: known[name].snap(v) for name, v in values.items() if name in known}
        return self.config({**self.values(self.default_config), **snapped})

    def repair(self, values: dict[str, Any]) -> Config:
        """The config of these knob values, shrunk until it fits the device's register and
        shared-memory budgets: fewer stages while shared memory is over, else the largest
        block halved (each knob by one step down its choices). Values that still do not
        fit give the default config."""
        values = self.values(self.snap(values))
        for _ in range(64):
            config = self.config(values)
            if self.is_valid(config):
                return config
            if not self._shrink(values, config):
                break
        return self.default()

    def _shrink(self, values: dict[str, Any], config: Config) -> bool:
        limits = self.spec.limits or HOPPER
        stages = [k for k in self.knobs if k.field in ("num_stages", "range_num_stages")]
        if footprint(self.spec, config.to_dict()).shared_bytes > limits.shared_per_block:
            for knob in stages:
                if isinstance(values[knob.name], int) and values[knob.name] > 1:
                    values[knob.name] -= 1
                    return True
        blocks = [k for k in self.knobs if k.field in ("block_sizes", "reduction_loops")]
        steps = [
            (k, k.choices.index(values[k.name])) for k in blocks if values[k.name] in k.choices
        ]
        smaller = [(k, i) for k, i in steps if _step_down(k, i) is not None]
        if not smaller:
            return False
        knob, i = max(smaller, key=lambda ki: _size(ki[0], ki[1], self.spec))
        values[knob.name] = _step_down(knob, i)
        return True

    # -- constraints ---------------------------------------------------------------------
    def is_valid(self, config: Config) -> bool:
        """Whether a config fits the hardware limits the space knows of."""
        d = config.to_dict()
        blocks = [int(b) for b in d.get("block_sizes", [])]
        rows = [
            pow2_ceil(n) if c is None else int(c)
            for n, c in zip(self.spec.reductions, d.get("reduction_loops", []), strict=False)
        ]
        if self.spec.value_elements(blocks, rows) > MAX_ELEMENTS:
            return False
        if not footprint(self.spec, d).fits(self.spec.limits or HOPPER):
            return False
        if d.get("pid_type") == "xyz" and (len(self.spec.grids) == 0 or max(self.spec.grids) > 3):
            return False
        groups = d.get("l2_groupings") or []
        if d.get("maxnreg") and d["maxnreg"] * 32 * int(d.get("num_warps") or 4) > REGISTERS:
            return False  # more registers per thread than the SM's file holds for the block
        return not (d.get("pid_type") == "xyz" and any(g and g > 1 for g in groups))


EVICTIONS = (None, "first", "last")


def _entry(d: dict[str, Any], field: str, index: int) -> Any:
    """Entry `index` of the list field `field` of a config dict, else None."""
    values = d.get(field) or []
    return (values[index] or None) if index < len(values) else None


def _step_down(knob: Knob, index: int) -> Any:
    """The next smaller size of a block knob (a whole row becomes its largest chunk)."""
    if knob.field == "reduction_loops":  # choices: None (whole row), then chunks, largest first
        return knob.choices[index + 1] if index + 1 < len(knob.choices) else None
    return knob.choices[index - 1] if index > 0 else None


def _size(knob: Knob, index: int, spec: KernelSpec) -> int:
    """The size a block knob's choice stands for (a whole row: its padded length)."""
    value = knob.choices[index]
    if value is None and knob.index is not None:
        return pow2_ceil(spec.reductions[knob.index])
    return int(value)


def _fragment_choices(fragment: Any) -> tuple[Any, ...]:
    if isinstance(fragment, Choice):
        return fragment.values
    if isinstance(fragment, PowerOfTwo):
        return _powers(fragment.low, fragment.high)
    if isinstance(fragment, IntRange):
        return tuple(range(fragment.low, fragment.high + 1))
    raise TypeError(f"unknown tunable fragment {fragment!r}")


_WHOLE: weakref.WeakKeyDictionary[Any, frozenset[int]] = weakref.WeakKeyDictionary()


def space_of(bound: Any, on_gpu: bool = True) -> ConfigSpace:
    """The config space of a bound kernel, without the looped chunks of a reduction that
    cannot be looped: where a value over it is used in a nested loop or branch (attention's
    backward sums a row over the head dim and multiplies the row in its key loop), every
    such config fails to compile, and 40% of a first recorded landscape's trials did."""
    whole = _WHOLE.get(bound)
    if whole is None:
        sizes = enumerate(bound.spec.reductions)  # a row of MIN_CHUNK or less is never looped
        whole = frozenset(i for i, n in sizes if n > MIN_CHUNK and not _loops(bound, i))
        _WHOLE[bound] = whole
    return ConfigSpace(bound.spec, bound.default_config, on_gpu, whole)


def _loops(bound: Any, reduction: int) -> bool:
    """Whether the kernel compiles with reduction `reduction` looped in chunks (any failure
    to write its code counts as no: a space never fails for this check)."""
    loops: list[int | None] = [None] * len(bound.spec.reductions)
    loops[reduction] = MIN_CHUNK
    try:
        bound.to_triton_code(Config(reduction_loops=loops))
    except Exception:  # noqa: BLE001 - LoweringError above all
        return False
    return True
