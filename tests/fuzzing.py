"""Loading generated kernels for the fuzz tests: the frontend reads a kernel's source, so
the generated code is written to a file and imported from there."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def load_kernels(tmp_path_factory: pytest.TempPathFactory, name: str, source: str) -> ModuleType:
    """`source` (after tilecraft's and torch's imports) as module `name`."""
    path: Path = tmp_path_factory.mktemp("fuzz") / f"{name}.py"
    path.write_text("import torch\nimport tilecraft as tc\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
