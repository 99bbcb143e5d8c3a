"""User settings that are never tuned, each with one `TILECRAFT_*` environment variable."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").lower() in ("1", "true", "yes", "on")


def _number(name: str) -> float | None:
    value = os.environ.get(name)
    return float(value) if value else None


def _default_workers() -> int:
    return max(1, min((os.cpu_count() or 2) - 1, 8))


def _cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tilecraft"
    return Path(os.environ.get("TILECRAFT_CACHE_DIR", default))


@dataclass
class Settings:
    """Choices for how kernels run, read from the environment unless given."""

    #: TILECRAFT_INTERPRET=1 runs kernel bodies eagerly in PyTorch, for debugging.
    interpret: bool = field(default_factory=lambda: _flag("TILECRAFT_INTERPRET"))
    #: TILECRAFT_PRINT_CODE=1 prints the generated Triton code of each compiled config.
    print_code: bool = field(default_factory=lambda: _flag("TILECRAFT_PRINT_CODE"))
    #: TILECRAFT_CACHE_DIR: where generated code (and later tuning data) is kept.
    cache_dir: Path = field(default_factory=_cache_dir)
    #: TILECRAFT_ALLOW_TF32=1 lets float32 matrix products use TF32 (faster, ~1e-3 error).
    allow_tf32: bool = field(default_factory=lambda: _flag("TILECRAFT_ALLOW_TF32"))
    #: TILECRAFT_AUTOTUNE_EFFORT: none, quick or full; how hard the first call on a GPU tunes.
    autotune_effort: str = field(
        default_factory=lambda: os.environ.get("TILECRAFT_AUTOTUNE_EFFORT", "quick")
    )
    #: TILECRAFT_AUTOTUNE_BUDGET_S: wall seconds a tuning run may take (overrides the effort's).
    autotune_budget_s: float | None = field(
        default_factory=lambda: _number("TILECRAFT_AUTOTUNE_BUDGET_S")
    )
    #: TILECRAFT_AUTOTUNE_SEARCH: the search strategy (overrides the effort's).
    autotune_search: str | None = field(
        default_factory=lambda: os.environ.get("TILECRAFT_AUTOTUNE_SEARCH") or None
    )
    #: TILECRAFT_AUTOTUNE_QUIET=1 hides the progress bar and the summary line.
    autotune_quiet: bool = field(default_factory=lambda: _flag("TILECRAFT_AUTOTUNE_QUIET"))
    #: TILECRAFT_AUTOTUNE_LOG: a .csv or .jsonl file that receives every trial.
    autotune_log: str | None = field(
        default_factory=lambda: os.environ.get("TILECRAFT_AUTOTUNE_LOG") or None
    )
    #: TILECRAFT_AUTOTUNE_WORKERS: processes that compile and check candidates in parallel.
    autotune_workers: int = field(
        default_factory=lambda: int(_number("TILECRAFT_AUTOTUNE_WORKERS") or _default_workers())
    )
    #: TILECRAFT_AUTOTUNE_TIMEOUT_S: a candidate taking longer than this fails as a timeout.
    autotune_timeout_s: float = field(
        default_factory=lambda: _number("TILECRAFT_AUTOTUNE_TIMEOUT_S") or 20.0
    )
    #: TILECRAFT_LLM_PROVIDER: openai (or any OpenAI-compatible server) or anthropic; unset: none.
    llm_provider: str | None = field(
        default_factory=lambda: os.environ.get("TILECRAFT_LLM_PROVIDER") or None
    )
    #: TILECRAFT_LLM_MODEL: the model the LLM-guided searches ask, e.g. gpt-4o or a local one.
    llm_model: str | None = field(
        default_factory=lambda: os.environ.get("TILECRAFT_LLM_MODEL") or None
    )
    #: TILECRAFT_LLM_BASE_URL: an OpenAI-compatible server (vLLM, Ollama, ...); unset: the vendor's.
    llm_base_url: str | None = field(
        default_factory=lambda: os.environ.get("TILECRAFT_LLM_BASE_URL") or None
    )
    #: TILECRAFT_LLM_TIMEOUT_S: seconds one request to the model may take.
    llm_timeout_s: float = field(default_factory=lambda: _number("TILECRAFT_LLM_TIMEOUT_S") or 60.0)
    #: TILECRAFT_LLM_MAX_ROUNDS: most rounds of proposals an LLM-guided search asks for.
    llm_max_rounds: int = field(
        default_factory=lambda: int(_number("TILECRAFT_LLM_MAX_ROUNDS") or 4)
    )
    #: TILECRAFT_LLM_MAX_TOKENS: most tokens of one reply of the model.
    llm_max_tokens: int = field(
        default_factory=lambda: int(_number("TILECRAFT_LLM_MAX_TOKENS") or 2000)
    )
    #: Accepted for Helion compatibility; kernels are currently always compiled per exact
    #: shape (generated code has the sizes in it), whatever this says.
    static_shapes: bool = True

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
