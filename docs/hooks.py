"""MkDocs hooks: tables generated from the sources, so the pages cannot drift from them.

A page holds a marker (`<!-- settings-table -->`, `<!-- cli-help -->`) where the hook puts
the table of `Settings` fields (from their `#:` doc comments in
tilecraft/runtime/settings.py) or the `tilecraft --help` text of each subcommand.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

SETTINGS_PY = Path(__file__).resolve().parent.parent / "tilecraft" / "runtime" / "settings.py"
FIELD = re.compile(r"^    (\w+): ")
COMMENT = re.compile(r"^    #: ?(.*)$")


def field_comments(source: str) -> dict[str, str]:
    """Each `Settings` field's `#:` doc comment (the lines just above it), joined."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    inside = False
    for line in source.splitlines():
        if line.startswith("class Settings"):
            inside = True
        elif inside and line and not line.startswith(" "):
            break
        if not inside:
            continue
        if match := COMMENT.match(line):
            pending.append(match.group(1).strip())
        elif match := FIELD.match(line):
            comments[match.group(1)] = " ".join(pending)
            pending = []
    return comments


def settings_table() -> str:
    """A markdown table of every setting: variable, keyword, default, meaning."""
    from tilecraft.runtime.settings import Settings

    comments = field_comments(SETTINGS_PY.read_text())
    defaults = _defaults(Settings)
    rows = ["| variable | `@tc.kernel` keyword | default | what it does |", "|---|---|---|---|"]
    for name in Settings.names():
        text = comments.get(name, "")
        match = VARIABLE.match(text)
        variable = f"`{match.group(1)}`" if match else "-"
        if match and text[match.end(1) :].startswith(": "):
            text = text[match.end(1) + 2 :]  # "TILECRAFT_X: what" -> "what"
        text = VARIABLE_ANYWHERE.sub(r"`\g<0>`", text).replace("|", "\\|")
        rows.append(f"| {variable} | `{name}` | {defaults[name]} | {text} |")
    return "\n".join(rows)


VARIABLE = re.compile(r"^(TILECRAFT_\w+)")
VARIABLE_ANYWHERE = re.compile(r"TILECRAFT_\w+(=\w+)?")
MACHINE_DEPENDENT = {
    "cache_dir": "`$XDG_CACHE_HOME/tilecraft` (`~/.cache/tilecraft`)",
    "autotune_workers": "the cores - 1, at most 8",
}


def _defaults(settings_class: Any) -> dict[str, str]:
    """Each setting's value when no `TILECRAFT_*` variable is set."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("TILECRAFT_")}
    for key in saved:
        del os.environ[key]
    try:
        values = dataclasses.asdict(settings_class())
    finally:
        os.environ.update(saved)
    return {
        name: MACHINE_DEPENDENT.get(name) or ("unset" if value is None else f"`{value!r}`")
        for name, value in values.items()
    }


def cli_help() -> str:
    """`tilecraft --help` and each subcommand's `--help`, as the command prints them."""
    import argparse

    from tilecraft.cli import parser

    top = parser()
    parts = [("tilecraft --help", top.format_help())]
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts.append((f"tilecraft {name} --help", sub.format_help()))
    return "\n\n".join(f"### `{cmd}`\n\n```text\n{text.rstrip()}\n```" for cmd, text in parts)


MARKERS = {"<!-- settings-table -->": settings_table, "<!-- cli-help -->": cli_help}


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace each marker on a page with what it stands for."""
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


def on_page_content(html: str, **kwargs: Any) -> str:
    """Docstrings introduce examples reST-style (`Example::`); show them with one colon."""
    return html.replace("<p>Example::</p>", "<p>Example:</p>")
