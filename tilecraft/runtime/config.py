"""`Config`: the tunable choices for one compiled kernel, JSON-serializable."""

from __future__ import annotations

import json
from typing import Any

from tilecraft.exc import InvalidConfig

FIELDS = {
    "block_sizes": list,
    "reduction_loops": list,
    "loop_orders": list,
    "l2_groupings": list,
    "range_num_stages": list,
    "range_unroll_factors": list,
    "range_flattens": list,
    "range_multi_buffers": list,
    "range_warp_specializes": list,  # Hopper/Blackwell: producer warps feed the loop's loads
    "load_eviction_policies": list,
    "indexing": (str, list),
    "pid_type": str,
    "reversed_launches": list,  # per top-level loop: its programs launched last tile first
    "num_warps": int,
    "num_stages": int,
    "num_sm_multiplier": int,  # persistent kernels launch this many programs per SM
    "maxnreg": int,  # a cap on registers per thread (more programs fit on an SM)
}
# Helion's Config fields that only steer Helion's own code generation: accepted (a config
# pasted from Helion works) and without effect here.
HELION_ONLY = {
    "flatten_loops": list,
    "static_ranges": list,
    "advanced_controls_file": str,
}
PID_TYPES = ("flat", "xyz", "persistent_blocked", "persistent_interleaved")
EVICTIONS = (None, "", "first", "last")  # load_eviction_policies entries ("", None: no hint)


class Config:
    """Tunable choices, with Helion's field names; other keywords are user tunables
    (`tc.register_tunable`), and a kernel rejects names it has no tunable for.

    Example::

        @tc.kernel(config=tc.Config(block_sizes=[32, 64], num_warps=4))
    """

    def __init__(self, **values: Any) -> None:
        for key, value in values.items():
            _validate(key, value)
        self._values = {k: v for k, v in values.items() if v is not None}

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    @property
    def block_sizes(self) -> list[int | None]:
        return list(self._values.get("block_sizes", []))

    @property
    def reduction_loops(self) -> list[int | None]:
        return list(self._values.get("reduction_loops", []))

    @property
    def num_warps(self) -> int | None:
        return self._values.get("num_warps")

    @property
    def num_stages(self) -> int | None:
        return self._values.get("num_stages")

    @property
    def tunables(self) -> dict[str, Any]:
        return {k: v for k, v in self._values.items() if k not in FIELDS and k not in HELION_ONLY}

    def check_tunables(self, names: set[str], kernel: str) -> None:
        """Raise InvalidConfig for a keyword that is neither a field nor one of `names`
        (the kernel's tunables): a typo such as `block_size=` must not pass unnoticed."""
        unknown = sorted(set(self.tunables) - names)
        if unknown:
            fields = ", ".join([*FIELDS, *sorted(names)])
            raise InvalidConfig(
                f"Config has unknown field(s) {', '.join(unknown)} for `{kernel}`; "
                f"fields are: {fields}"
            )

    def merged(self, defaults: Config) -> Config:
        """This config with missing entries (and None block sizes) filled from `defaults`."""
        values = dict(defaults._values)
        for key, value in self._values.items():
            base = defaults._values.get(key)
            if isinstance(value, list) and isinstance(base, list):
                fill = key == "block_sizes"
                value = [b if fill and v is None else v for v, b in zip(value, base, strict=False)]
                value += self._values[key][len(base) :] + base[len(value) :]
            values[key] = value
        return Config(**values)

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def to_json(self) -> str:
        return json.dumps(self._values, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Config:
        return cls(**json.loads(text))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self._values == other._values

    def __hash__(self) -> int:
        return hash(self.to_json())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"tc.Config({args})"


def _validate(key: str, value: Any) -> None:
    expected: Any = FIELDS.get(key) or HELION_ONLY.get(key)
    if expected is None or value is None:
        return
    if not isinstance(value, expected):
        raise InvalidConfig(f"Config.{key} must be a {_type_name(expected)}, got {value!r}")
    if key in ("num_warps",) and (value < 1 or value & (value - 1) or value > 32):
        raise InvalidConfig(f"Config.num_warps must be a power of two <= 32, got {value}")
    if key == "num_sm_multiplier" and (value < 1 or value & (value - 1) or value > 128):
        raise InvalidConfig(f"Config.num_sm_multiplier must be a power of two <= 128, got {value}")
    if key == "maxnreg" and not 1 <= value <= 256:
        raise InvalidConfig(f"Config.maxnreg must be between 1 and 256, got {value}")
    if key == "num_stages" and value < 1:
        raise InvalidConfig(f"Config.num_stages must be >= 1, got {value}")
    if key == "pid_type" and value not in PID_TYPES:
        raise InvalidConfig(f"Config.pid_type must be one of {PID_TYPES}, got {value!r}")
    if key == "load_eviction_policies" and any(p not in EVICTIONS for p in value):
        raise InvalidConfig(
            f"Config.load_eviction_policies entries must be '', 'first' or 'last', got {value!r}"
        )
    if key == "reversed_launches" and any(not isinstance(r, (bool, type(None))) for r in value):
        raise InvalidConfig(
            f"Config.reversed_launches entries must be True or False, got {value!r}"
        )
    if key in ("block_sizes", "reduction_loops"):
        for item in value:
            if item is not None and (not isinstance(item, int) or item < 1 or item & (item - 1)):
                raise InvalidConfig(f"Config.{key} entries must be powers of two, got {item!r}")


def _type_name(expected: Any) -> str:
    if isinstance(expected, tuple):
        return " or ".join(t.__name__ for t in expected)
    return expected.__name__
