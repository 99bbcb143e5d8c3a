"""Files that ship with tilecraft, found wherever it is installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def examples_folder() -> Path:
    """The example kernels: the `tilecraft.examples` folder of an installed package (setup.py
    maps the repository's `examples/` there, an editable install included), else the
    repository's `examples/` beside the package (a checkout on PYTHONPATH)."""
    spec = importlib.util.find_spec("tilecraft.examples")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[1] / "examples"
