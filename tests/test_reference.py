"""The op reference (docs/OPS.md) is generated from the op table and stays current."""

from __future__ import annotations

from conftest import REPO

from tilecraft.frontend.reference import composite_names, render
from tilecraft.ir.ops import OPDEFS


def test_docs_ops_md_is_generated_from_the_op_table() -> None:
    current = (REPO / "docs" / "OPS.md").read_text()
    assert current == render(), (
        "docs/OPS.md is stale: run `python -m tilecraft.frontend.reference > docs/OPS.md`"
    )


def test_reference_lists_every_table_entry_and_composite() -> None:
    text = render()
    assert all(f"| `{name}` |" in text for name in OPDEFS)
    assert "softmax" in composite_names() and "exp" not in composite_names()
