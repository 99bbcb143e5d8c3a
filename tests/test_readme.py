"""README snippets run as written; the README opens with how to run the demo and the tests."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from conftest import REPO

README = REPO / "README.md"
CODE_BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def code_blocks(language: str | None = None) -> list[str]:
    blocks = CODE_BLOCK.findall(README.read_text())
    return [code for lang, code in blocks if language is None or lang in (language, "py")]


def run_as_module(code: str, path: Path, shared: dict[str, object]) -> dict[str, object]:
    """Run a snippet from a real file (kernels read their source), seeing earlier snippets."""
    path.write_text(code)
    name = f"_readme_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update({k: v for k, v in shared.items() if not k.startswith("__")})
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return vars(module)


def test_readme_starts_with_make_demo_and_make_test() -> None:
    assert README.exists()
    blocks = code_blocks()
    assert blocks, "the README has code blocks"
    commands = [line.strip() for line in blocks[0].splitlines() if line.strip()]
    assert commands[:2] == ["make demo", "make test"]


def test_readme_python_snippets_run(tmp_path: Path) -> None:
    snippets = code_blocks("python")
    if not snippets:
        pytest.skip("the README has no python snippets yet")
    shared: dict[str, object] = {}
    for i, code in enumerate(snippets):
        try:
            shared = run_as_module(code, tmp_path / f"snippet_{i}.py", shared)
        except Exception as e:
            raise AssertionError(f"README python block {i + 1} failed:\n{code}") from e
