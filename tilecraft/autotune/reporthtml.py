"""The report's HTML page: one self-contained file (pictures embedded as base64 PNG, and
also beside it as files), listing what was drawn, the tuning runs, and what was not."""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # report.py imports this module
    from tilecraft.autotune.report import Picture
    from tilecraft.autotune.runs import TuningRun

_STYLE = """
body { font-family: sans-serif; max-width: 70em; margin: 2em auto; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
td.num { text-align: right; }
figure { margin: 1.5em 0; }
img { max-width: 100%; }
figcaption { font-size: 0.9em; color: #444; max-width: 60em; }
"""
_SECTIONS = {"tuning": "Tuning runs", "bench": "Benchmark history"}


def page(
    pictures: Sequence[Picture],
    runs: Sequence[TuningRun],
    notes: Sequence[str],
    sources: Mapping[str, Path],
) -> str:
    """The whole page as text."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    read = ", ".join(f"{name} {escape(str(path))}" for name, path in sources.items())
    body = [
        "<h1>tilecraft report</h1>",
        f"<p>Drawn {when} from the {read}.</p>",
        _contents(pictures),
    ]
    for section, heading in _SECTIONS.items():
        mine = [p for p in pictures if p.section == section]
        if mine:
            body.append(f"<h2>{heading}</h2>")
            body += [_runs_table(runs)] if section == "tuning" else []
            body += [_figure(p) for p in mine]
    if notes:
        body.append("<h2>Not drawn</h2><ul>")
        body += [f"<li>{escape(note)}</li>" for note in notes]
        body.append("</ul>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>tilecraft report</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _contents(pictures: Sequence[Picture]) -> str:
    """The list of pictures drawn, each linking to its figure and naming its file."""
    items = [
        f'<li><a href="#{escape(p.path.stem)}">{escape(p.title)}</a>'
        f' (<a href="{escape(p.path.name)}"><code>{escape(p.path.name)}</code></a>)</li>'
        for p in pictures
    ]
    return f"<p>{len(pictures)} pictures:</p><ul>\n" + "\n".join(items) + "\n</ul>"


def _figure(picture: Picture) -> str:
    data = base64.b64encode(picture.path.read_bytes()).decode("ascii")
    return (
        f'<figure id="{escape(picture.path.stem)}"><h3>{escape(picture.title)}</h3>'
        f'<img src="data:image/png;base64,{data}" alt="{escape(picture.title)}">'
        f"<figcaption>{escape(picture.caption)}</figcaption></figure>"
    )


_RUN_COLUMNS = "run kernel specialization hardware search trials failed best_ms wall_s energy"


def _runs_table(runs: Sequence[TuningRun]) -> str:
    head = "".join(f"<th>{name.replace('_', ' ')}</th>" for name in _RUN_COLUMNS.split())
    rows = [f"<table><tr>{head}</tr>"]
    for r in runs:
        best = r.best_ms()
        cells: list[object] = [r.id, r.kernel_name, r.spec_key, r.hardware, r.search]
        cells += [len(r.trials), r.failed(), "-" if best is None else f"{best:.4g}"]
        cells += [f"{r.wall_s():.1f}", "measured" if r.has_energy() else "not measured"]
        rows.append("<tr>" + "".join(_cell(c) for c in cells) + "</tr>")
    return "\n".join(rows) + "</table>"


def _cell(value: object) -> str:
    numeric = isinstance(value, int) or (isinstance(value, str) and _is_number(value))
    align = ' class="num"' if numeric else ""
    return f"<td{align}>{escape(str(value))}</td>"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
