"""The decorator's keywords: tilecraft's settings, and Helion's where they mean something.

`@tc.kernel(...)` takes every `Settings` field by name. A kernel ported from Helion keeps
its `@helion.kernel(...)` keywords: those with a meaning here are translated
(`print_output_code` -> `print_code`, `dot_precision` -> `allow_tf32`, ...), those that
only tune Helion's own machinery are accepted and have no effect (each with the reason
below), and the rest are rejected by name, saying what to do instead.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import torch

from tilecraft.exc import SettingsError
from tilecraft.runtime.settings import Settings


class RefMode(enum.Enum):
    """Helion's `ref_mode=` values: EAGER runs the kernel body in PyTorch (tilecraft's
    interpret mode, TILECRAFT_INTERPRET=1), OFF compiles it."""

    OFF = "off"
    EAGER = "eager"


def _ref_mode(value: Any) -> dict[str, Any]:
    try:
        mode = RefMode(getattr(value, "value", value))
    except ValueError:
        raise SettingsError(f"ref_mode={value!r}: use RefMode.OFF or RefMode.EAGER") from None
    return {"interpret": True} if mode is RefMode.EAGER else {}


def _effort(value: Any) -> dict[str, Any]:
    if value == "auto":  # Helion's "pick for me": tilecraft's default effort
        return {}
    return {"autotune_effort": value}


def _dot_precision(value: Any) -> dict[str, Any]:
    if value not in ("tf32", "tf32x3", "ieee"):
        raise SettingsError(f"dot_precision={value!r}: use 'tf32', 'tf32x3' or 'ieee'")
    return {"allow_tf32": value != "ieee"}


def _log_level(value: Any) -> dict[str, Any]:
    return {"autotune_quiet": not value or int(value) > 20}  # 0 or above INFO: quiet


def _precompile(value: Any) -> dict[str, Any]:
    return {} if value else {"autotune_workers": 0}  # None: compile in this process


def _index_dtype(value: Any) -> dict[str, Any]:
    if value not in (None, torch.int32, torch.int64):
        raise SettingsError(f"index_dtype={value!r}: use torch.int32, torch.int64 or None")
    return {}


def _backend(value: Any) -> dict[str, Any]:
    if value != "triton":
        raise SettingsError(f"backend={value!r}: tilecraft generates Triton only")
    return {}


def _accuracy_check(value: Any) -> dict[str, Any]:
    if not value:
        raise SettingsError(
            "autotune_accuracy_check=False: tilecraft always checks candidates against a "
            "reference run (a config that answers wrong is never picked)"
        )
    return {}


TRANSLATED: dict[str, Callable[[Any], dict[str, Any]]] = {
    "print_output_code": lambda v: {"print_code": bool(v)},
    "autotune_effort": _effort,
    "dot_precision": _dot_precision,
    "autotune_log_level": _log_level,
    "autotune_progress_bar": lambda v: {"autotune_quiet": not v},
    "autotune_compile_timeout": lambda v: {"autotune_timeout_s": float(v)},
    "autotune_random_seed": lambda v: {"autotune_seed": int(v)},
    "autotune_precompile_jobs": lambda v: {} if v is None else {"autotune_workers": int(v)},
    "autotune_precompile": _precompile,
    "index_dtype": _index_dtype,
    "backend": _backend,
    "autotune_accuracy_check": _accuracy_check,
    "ref_mode": _ref_mode,
    # the default config, untuned (on a GPU the cost model's pick where it is confident)
    "use_default_config": lambda v: {"autotune_effort": "none"} if v else {},
}

# Helion keywords accepted with no effect here, and why.
NO_EFFECT = {
    "ignore_warnings": "tilecraft has no compile warnings to silence",
    "autotune_baseline_fn": "candidates are checked against tilecraft's own reference run",
    "autotune_baseline_atol": "tolerances of the accuracy check are per dtype",
    "autotune_baseline_rtol": "tolerances of the accuracy check are per dtype",
    "autotune_max_generations": "the search runs to the effort's time budget",
    "autotune_rebenchmark_threshold": "timings are medians of repeats",
    "autotune_adaptive_timeout": "see autotune_timeout_s",
    "autotune_ignore_errors": "failing candidates are always isolated and skipped",
    "output_origin_lines": "generated code always names the kernel's source lines",
    "print_repro": "TILECRAFT_PRINT_CODE prints the generated code",
    "persistent_reserved_sms": "persistent kernels use every SM",
}

# Helion keywords refused: what to do instead.
REFUSED = {
    "force_autotune": "call kernel.autotune(args) to tune whatever config is given",
    "autotune_config_overrides": "give a partial tc.Config(...) as config=",
    "autotuner_fn": "pick a search with autotune_search= (TILECRAFT_AUTOTUNE_SEARCH)",
    "autotune_benchmark_fn": "tilecraft times candidates with CUDA events itself",
    "autotune_cache": "tuning results are kept in tilecraft's tuning database",
    "autotune_search_acf": "PTXAS control files are not searched",
    "autotune_force_persistent": "give pid_type in the config",
    "allow_warp_specialize": "warp specialization is not a knob here",
    "fast_math": "math follows PyTorch's semantics exactly",
    "debug_dtype_asserts": "dtypes are checked while compiling",
    "autotune_best_available_max_configs": "warm starts come from the tuning database",
    "autotune_best_available_max_cache_scan": "warm starts come from the tuning database",
}


def settings_from_options(options: dict[str, Any]) -> dict[str, Any]:
    """`Settings` keywords from the decorator's keywords (tilecraft's or Helion's)."""
    known = set(Settings.names())
    out: dict[str, Any] = {}
    for name, value in options.items():
        if name in known:
            out[name] = value
        elif name in TRANSLATED:
            out.update(TRANSLATED[name](value))
        elif name in NO_EFFECT:
            continue
        elif name in REFUSED:
            raise SettingsError(f"kernel setting `{name}` is not supported: {REFUSED[name]}")
        else:
            raise SettingsError(
                f"unknown kernel setting `{name}`; settings are: {', '.join(sorted(known))}"
            )
    return out
