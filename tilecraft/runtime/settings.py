"""User settings that are never tuned, each with one `TILECRAFT_*` environment variable."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").lower() in ("1", "true", "yes", "on")


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
    #: Compile one kernel per exact shape (True) or per shape bucket (False).
    static_shapes: bool = True

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
