"""User settings that are never tuned, each with one `TILECRAFT_*` environment variable.

Reading the environment never raises (a kernel is built at import time): a value that
cannot be used falls back to the default, and `Settings.validate()`, run when tuning
starts, reports it by name with the values it accepts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tilecraft.exc import SettingsError

EFFORT_NAMES = ("none", "predict", "quick", "full")
#: What tuning minimizes: kernel time, energy per call, or energy x delay.
OBJECTIVE_NAMES = ("time", "energy", "edp")
LLM_PROVIDERS = ("openai", "anthropic")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _flag_value(text: str) -> bool:
    value = text.strip().lower()
    if value not in _TRUE + _FALSE:
        raise ValueError(text)
    return value in _TRUE


def _seconds(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(text)
    return value


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())
        if value < minimum:
            raise ValueError(text)
        return value

    return parse


def _one_of(names: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.strip().lower() not in names:
            raise ValueError(text)
        return text.strip().lower()

    return parse


@dataclass(frozen=True)
class Rule:
    """How one setting is read from its variable and which values it accepts."""

    variable: str
    parse: Callable[[str], Any]
    accepted: str


_FLAG = "1, true, yes, on (or 0, false, no, off)"
_SECONDS = "a number of seconds > 0"
RULES: dict[str, Rule] = {
    "interpret": Rule("TILECRAFT_INTERPRET", _flag_value, _FLAG),
    "print_code": Rule("TILECRAFT_PRINT_CODE", _flag_value, _FLAG),
    "check": Rule("TILECRAFT_CHECK", _flag_value, _FLAG),
    "allow_tf32": Rule("TILECRAFT_ALLOW_TF32", _flag_value, _FLAG),
    "fast_launch": Rule("TILECRAFT_FAST_LAUNCH", _flag_value, _FLAG),
    "autotune_effort": Rule(
        "TILECRAFT_AUTOTUNE_EFFORT", _one_of(EFFORT_NAMES), ", ".join(EFFORT_NAMES)
    ),
    "autotune_objective": Rule(
        "TILECRAFT_AUTOTUNE_OBJECTIVE", _one_of(OBJECTIVE_NAMES), ", ".join(OBJECTIVE_NAMES)
    ),
    "autotune_budget_s": Rule("TILECRAFT_AUTOTUNE_BUDGET_S", _seconds, _SECONDS),
    "autotune_quiet": Rule("TILECRAFT_AUTOTUNE_QUIET", _flag_value, _FLAG),
    "autotune_verbose": Rule("TILECRAFT_AUTOTUNE_VERBOSE", _flag_value, _FLAG),
    "autotune_workers": Rule(
        "TILECRAFT_AUTOTUNE_WORKERS", _count(0), "a whole number >= 0 (0: in this process)"
    ),
    "autotune_timeout_s": Rule("TILECRAFT_AUTOTUNE_TIMEOUT_S", _seconds, _SECONDS),
    "compile_timeout_s": Rule("TILECRAFT_COMPILE_TIMEOUT", _seconds, _SECONDS),
    "autotune_seed": Rule("TILECRAFT_AUTOTUNE_SEED", _count(0), "a whole number >= 0"),
    "llm_provider": Rule("TILECRAFT_LLM_PROVIDER", _one_of(LLM_PROVIDERS), "openai, anthropic"),
    "llm_timeout_s": Rule("TILECRAFT_LLM_TIMEOUT_S", _seconds, _SECONDS),
    "llm_max_rounds": Rule("TILECRAFT_LLM_MAX_ROUNDS", _count(1), "a whole number >= 1"),
    "llm_max_tokens": Rule("TILECRAFT_LLM_MAX_TOKENS", _count(1), "a whole number >= 1"),
}


def _env(name: str, default: Any) -> Callable[[], Any]:
    """The factory of a setting: its variable's value, or `default` when unset or bad."""
    rule = RULES[name]

    def read() -> Any:
        text = os.environ.get(rule.variable)
        if not text:
            return default
        try:
            return rule.parse(text)
        except ValueError:
            return default  # reported by Settings.validate() when tuning starts

    return read


def _text(variable: str) -> Callable[[], str | None]:
    return lambda: os.environ.get(variable) or None


def _default_workers() -> int:
    return max(1, min((os.cpu_count() or 2) - 1, 8))


def _cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tilecraft"
    return Path(os.environ.get("TILECRAFT_CACHE_DIR") or default)


@dataclass
class Settings:
    """Choices for how kernels run, read from the environment unless given."""

    #: TILECRAFT_INTERPRET=1 runs kernel bodies eagerly in PyTorch, for debugging.
    interpret: bool = field(default_factory=_env("interpret", False))
    #: TILECRAFT_PRINT_CODE=1 prints the generated Triton code of each compiled config.
    print_code: bool = field(default_factory=_env("print_code", False))
    #: TILECRAFT_CHECK=1 checks every computed index against its tensor's bounds on the
    #: device and raises IndexOutOfBounds naming the line (slower: for finding bugs).
    check: bool = field(default_factory=_env("check", False))
    #: TILECRAFT_CACHE_DIR: where generated code, tuning data and models are kept (private).
    cache_dir: Path = field(default_factory=_cache_dir)
    #: TILECRAFT_ALLOW_TF32=1 lets float32 matrix products use TF32 (faster, ~1e-3 error).
    allow_tf32: bool = field(default_factory=_env("allow_tf32", False))
    #: TILECRAFT_FAST_LAUNCH=0 launches every Triton kernel through Triton's own launch; by
    #: default a launch checked once goes straight to the compiled kernel (runtime/fast_launch.py).
    fast_launch: bool = field(default_factory=_env("fast_launch", True))
    #: TILECRAFT_AUTOTUNE_EFFORT: none, predict, quick or full; how hard a GPU first call tunes.
    autotune_effort: str = field(default_factory=_env("autotune_effort", "quick"))
    #: TILECRAFT_AUTOTUNE_OBJECTIVE: time, energy (joules per call, measured through NVML)
    #: or edp (energy x delay); what tuning minimizes.
    autotune_objective: str = field(default_factory=_env("autotune_objective", "time"))
    #: TILECRAFT_AUTOTUNE_BUDGET_S: wall seconds a tuning run may take (overrides the effort's).
    autotune_budget_s: float | None = field(default_factory=_env("autotune_budget_s", None))
    #: TILECRAFT_AUTOTUNE_SEARCH: the search strategy (overrides the effort's).
    autotune_search: str | None = field(default_factory=_text("TILECRAFT_AUTOTUNE_SEARCH"))
    #: TILECRAFT_AUTOTUNE_QUIET=1 hides the progress bar and the summary line.
    autotune_quiet: bool = field(default_factory=_env("autotune_quiet", False))
    #: TILECRAFT_AUTOTUNE_VERBOSE=1 adds where the tuning time went, phase by phase, to the
    #: summary line (also in `bound.tuning["phases"]`).
    autotune_verbose: bool = field(default_factory=_env("autotune_verbose", False))
    #: TILECRAFT_AUTOTUNE_LOG: a .csv or .jsonl file that receives every trial.
    autotune_log: str | None = field(default_factory=_text("TILECRAFT_AUTOTUNE_LOG"))
    #: TILECRAFT_AUTOTUNE_WORKERS: processes that compile and check candidates in parallel
    #: (capped by the cores and the free memory; 0 runs them in this process).
    autotune_workers: int = field(default_factory=_env("autotune_workers", _default_workers()))
    #: TILECRAFT_AUTOTUNE_TIMEOUT_S: a candidate taking longer than this fails as a timeout.
    autotune_timeout_s: float = field(default_factory=_env("autotune_timeout_s", 20.0))
    #: TILECRAFT_COMPILE_TIMEOUT: seconds a first call's Triton compile may take on a GPU
    #: before a smaller config runs instead (with a warning).
    compile_timeout_s: float = field(default_factory=_env("compile_timeout_s", 60.0))
    #: TILECRAFT_AUTOTUNE_SEED: the searches' random seed; the same seed and tuning
    #: database give the same configs tried, in the same order.
    autotune_seed: int = field(default_factory=_env("autotune_seed", 0))
    #: TILECRAFT_LLM_PROVIDER: openai (or any OpenAI-compatible server) or anthropic; unset: none.
    llm_provider: str | None = field(default_factory=_env("llm_provider", None))
    #: TILECRAFT_LLM_MODEL: the model the LLM-guided searches ask, e.g. gpt-4o or a local one.
    llm_model: str | None = field(default_factory=_text("TILECRAFT_LLM_MODEL"))
    #: TILECRAFT_LLM_BASE_URL: an OpenAI-compatible server (vLLM, Ollama, ...); unset: the vendor's.
    llm_base_url: str | None = field(default_factory=_text("TILECRAFT_LLM_BASE_URL"))
    #: TILECRAFT_LLM_TIMEOUT_S: seconds one request to the model may take, however it trickles.
    llm_timeout_s: float = field(default_factory=_env("llm_timeout_s", 60.0))
    #: TILECRAFT_LLM_MAX_ROUNDS: most rounds of proposals an LLM-guided search asks for.
    llm_max_rounds: int = field(default_factory=_env("llm_max_rounds", 4))
    #: TILECRAFT_LLM_MAX_TOKENS: most tokens of one reply of the model.
    llm_max_tokens: int = field(default_factory=_env("llm_max_tokens", 2000))
    #: Whether the GPU compiler may fuse a multiply and an add into one FMA (Triton's
    #: `enable_fp_fusion`). Off (the default), each rounds as PyTorch's separate ops round
    #: it, and compiled code gives eager mode's bits: fused, `1 - 7 * (1 / x)` at x = 7
    #: was -6e-8 on a GPU, not 0. Ops that PyTorch itself fuses (addcmul, lerp) are FMAs
    #: either way. On, some compute-bound kernels save an instruction per product.
    fp_fusion: bool = False
    #: Accepted for Helion compatibility; kernels are currently always compiled per exact
    #: shape (generated code has the sizes in it), whatever this says.
    static_shapes: bool = True

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def validate(self) -> None:
        """Raise `SettingsError` for the first setting that cannot be used: a variable
        whose text does not parse, or a value (given or read) out of its range."""
        for name, rule in RULES.items():
            text = os.environ.get(rule.variable)
            if text:
                _check(rule, text, f"{rule.variable}={text!r}")
            value = getattr(self, name)
            what = f"setting {name}={value!r} ({rule.variable})"
            if isinstance(value, bool) and rule.parse is not _flag_value:
                raise SettingsError(f"{what} is not valid: expected {rule.accepted}")
            if value is not None:
                _check(rule, str(value), what)


def _check(rule: Rule, text: str, what: str) -> None:
    try:
        rule.parse(text)
    except ValueError:
        raise SettingsError(f"{what} is not valid: expected {rule.accepted}") from None
