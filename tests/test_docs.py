"""The documentation site (docs/, mkdocs.yml): its python snippets run as written on the CPU,
every page is in the navigation, and the generated tables cover every setting and command."""

from __future__ import annotations

import importlib.util
import re
import sys
import traceback
from pathlib import Path

import pytest
from conftest import REPO
from test_readme import CODE_BLOCK, run_as_module

from tilecraft.runtime.settings import Settings

DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))


def python_blocks(page: Path) -> list[str]:
    """The page's ```python blocks, in order; ```py blocks (fragments) are shown, not run."""
    return [code for lang, code in CODE_BLOCK.findall(page.read_text()) if lang == "python"]


@pytest.mark.parametrize("cpu", ["interpreter", "eager"])
@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_page_python_snippets_run(
    page: Path, cpu: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each snippet runs as written; "eager" is how CPU tensors run on a machine with a GPU
    (Triton there compiles for the GPU, so CPU kernels run eagerly in PyTorch)."""
    if cpu == "eager":
        if page.name == "pytorch.md":
            pytest.skip("its operators register once per process (the interpreter run has them)")
        monkeypatch.setattr("tilecraft.runtime.kernel.cpu_mode", lambda: "eager")
    shared: dict[str, object] = {}  # each page's snippets run in order, seeing earlier ones
    for i, code in enumerate(python_blocks(page)):
        if cpu == "eager" and "meter=" in code:
            continue  # tuning by energy needs tensors where kernels compile
        try:
            shared = run_as_module(code, tmp_path / f"{page.stem}_{i}.py".replace("-", "_"), shared)
        except Exception as e:
            raise AssertionError(f"{page.name}: python block {i + 1} failed:\n{code}") from e


def test_troubleshooting_shows_the_errors_its_snippets_raise(tmp_path: Path) -> None:
    """Each error message shown (a ```text block right after a snippet that catches an
    exception as `error`) is what that snippet raises, but for the file's name and line."""
    blocks = CODE_BLOCK.findall((DOCS / "troubleshooting.md").read_text())
    shared: dict[str, object] = {}
    error: BaseException | None = None
    compared = 0
    for i, (lang, code) in enumerate(blocks):
        if lang == "python":
            shared = run_as_module(code, tmp_path / f"troubleshooting_{i}.py", shared)
            error = shared.pop("error", None)  # type: ignore[assignment]
        elif lang == "text" and error is not None:
            raised = "".join(traceback.format_exception_only(type(error), error))
            assert _without_file_lines(code) == _without_file_lines(raised), code
            error, compared = None, compared + 1
    assert compared >= 7


def _without_file_lines(text: str) -> list[str]:
    return [line for line in text.strip().splitlines() if not line.lstrip().startswith("File ")]


def test_every_page_is_in_the_navigation() -> None:
    config = (REPO / "mkdocs.yml").read_text()
    listed = set(re.findall(r":\s*(\S+\.md)\s*$", config, re.MULTILINE))
    assert listed == {p.name for p in PAGES}, "mkdocs.yml's nav and docs/*.md differ"


def _hooks() -> object:
    spec = importlib.util.spec_from_file_location("_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_settings_table_documents_every_setting() -> None:
    table = _hooks().settings_table()  # type: ignore[attr-defined]
    for name in Settings.names():
        row = next(line for line in table.splitlines() if f"| `{name}` |" in line)
        assert row.rstrip(" |").split("|")[-1].strip(), f"setting {name} has no doc comment"
    assert "`TILECRAFT_CHECK`" in table and "`TILECRAFT_AUTOTUNE_SEARCH`" in table
    assert "<!-- settings-table -->" in (DOCS / "configs.md").read_text()


def test_cli_page_shows_every_subcommand() -> None:
    text = _hooks().cli_help()  # type: ignore[attr-defined]
    for command in ("demo", "code", "prompt", "learn", "record", "tune", "import", "merge-db"):
        assert f"`tilecraft {command} --help`" in text
    assert "<!-- cli-help -->" in (DOCS / "cli.md").read_text()
