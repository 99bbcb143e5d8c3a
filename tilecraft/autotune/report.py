"""Pictures of what tuning did and how kernels' times moved: PNG files and one HTML page.

From the tuning database, for each kernel and specialization tuned (on one machine): the
best time found so far against wall time and against trials, one line per search (the
latest run of each), and the configs tried, scattered by time and energy where energy
was measured (with the time/energy Pareto front), else by time and trial order. From
the benchmark database of `tilecraft bench`: each kernel's time per stored run, as a
box of its samples, labelled with the run, its commit and tilecraft version, and
coloured where the run is significantly slower or faster than the one before
(`regress.compare`'s test).

Drawing uses matplotlib (`pip install "tilecraft[report]"`) with its Agg backend, so it
needs no display.

Example::

    report = write_report("report", kernel="softmax")
    print(report.html, [p.path.name for p in report.pictures])
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilecraft.autotune import regress
from tilecraft.autotune.reporthtml import page
from tilecraft.autotune.runs import TuningRun, read_runs
from tilecraft.autotune.trial import OK, Trial
from tilecraft.exc import ReportError
from tilecraft.runtime.config import Config

LIMIT = 8  # at most this many kernel/shape pairs, and kernels' histories, unless asked
WHAT = ("all", "tuning", "bench")
# One color per search, the same in every picture (matplotlib's tab10 order).
SEARCH_ORDER = ("fast", "quick", "classifier", "pattern", "de", "random", "predict", "llm")
_DPI = 100


@dataclass(frozen=True)
class Picture:
    """One drawn picture: its PNG file, a title and a caption saying what it shows."""

    path: Path
    title: str
    caption: str
    section: str  # "tuning" or "bench"


@dataclass
class Report:
    """What `write_report` wrote: the HTML page, its pictures, the runs drawn, and notes
    on what was not drawn and why."""

    html: Path
    pictures: list[Picture] = field(default_factory=list)
    runs: list[TuningRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def write_report(
    out_dir: Path | str,
    db: Path | str | None = None,
    bench_db: Path | str | None = None,
    *,
    kernel: str | None = None,
    shape: str | None = None,
    runs: Iterable[int] = (),
    limit: int = LIMIT,
    what: str = "all",
) -> Report:
    """Draw the tuning runs in `db` and the benchmark history in `bench_db` (defaults:
    the cache dir's) into `out_dir`: PNG files and `index.html` (self-contained: the
    pictures are embedded too). `kernel` (a name), `shape` ("4096x4096") and `runs` (run
    ids, see `tilecraft report --list`) choose what is drawn; `what` is "all", "tuning"
    or "bench". Raises ReportError when there is nothing to draw."""
    if what not in WHAT:
        raise ReportError(f"what={what!r}: expected one of {', '.join(WHAT)}")
    if limit < 1:
        raise ReportError(f"limit={limit}: draw at least one kernel (a limit of 1 or more)")
    _need_matplotlib()
    db_file, bench_file = default_paths(db, bench_db)
    report = Report(Path(out_dir) / "index.html")
    ids = list(runs)
    groups = _tuning_groups(report, db_file, kernel, shape, ids, limit) if what != "bench" else []
    wanted = what != "tuning" and not ids  # runs chosen by id: their tuning only
    histories = _histories(report, bench_file, kernel, shape, limit) if wanted else {}
    if not groups and not histories:
        raise ReportError("nothing to draw: " + "; ".join(report.notes))
    out = report.html.parent
    out.mkdir(parents=True, exist_ok=True)
    for group in groups:
        report.runs += group
        report.pictures += [_progress(group, out), _configs(group, out)]
    report.pictures += [_bench(name, history, out) for name, history in histories.items()]
    sources = {"tuning database": db_file, "benchmark database": bench_file}
    report.html.write_text(page(report.pictures, report.runs, report.notes, sources))
    return report


def default_paths(db: Path | str | None, bench_db: Path | str | None) -> tuple[Path, Path]:
    """The tuning and benchmark databases: those given, else the cache dir's (the
    benchmark database beside the tuning database given)."""
    from tilecraft.autotune.tune import db_path
    from tilecraft.runtime.settings import Settings

    db_file = Path(db) if db else db_path(Settings())
    return db_file, Path(bench_db) if bench_db else db_file.with_name(regress.BENCH_DB)


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ReportError(
            "`tilecraft report` draws with matplotlib, which is not installed:"
            ' pip install "tilecraft[report]"'
        ) from None


def _tuning_groups(
    report: Report,
    db_file: Path,
    kernel: str | None,
    shape: str | None,
    ids: list[int],
    limit: int,
) -> list[list[TuningRun]]:
    """The groups of runs to draw (see `chosen_groups`); why none, in the report's notes."""
    try:
        runs = read_runs(db_file, kernel, shape, ids)
    except ReportError as error:
        report.notes.append(str(error))
        return []
    if not runs:
        report.notes.append(_no_runs(db_file, kernel, shape, ids))
    groups = chosen_groups(runs, latest_only=not ids)
    if len(groups) > limit:
        report.notes.append(f"{len(groups) - limit} more kernel/shape pairs not drawn (--limit)")
    return groups[:limit]


def _no_runs(db_file: Path, kernel: str | None, shape: str | None, ids: list[int]) -> str:
    asked = [f"kernel {kernel}" if kernel else "", f"shape {shape}" if shape else ""]
    asked += [f"run ids {', '.join(map(str, ids))}"] if ids else []
    wanted = ", ".join(a for a in asked if a)
    return f"no tuning runs{' of ' + wanted if wanted else ''} in {db_file}"


def chosen_groups(runs: Sequence[TuningRun], latest_only: bool) -> list[list[TuningRun]]:
    """Runs grouped by kernel, specialization and machine, the most recently tuned group
    first; with `latest_only`, each group keeps the latest run of each search."""
    groups: dict[tuple[str, str, str], dict[Any, TuningRun]] = {}
    for run in runs:  # oldest first, so a later run of a search replaces an earlier one
        key = run.search if latest_only else run.id
        groups.setdefault(run.group, {})[key] = run
    chosen = [sorted(g.values(), key=_search_rank) for g in groups.values()]
    return sorted(chosen, key=lambda g: -max(r.id for r in g))


def _search_rank(run: TuningRun) -> tuple[int, str, int]:
    known = run.search in SEARCH_ORDER
    return (SEARCH_ORDER.index(run.search) if known else len(SEARCH_ORDER), run.search, run.id)


def color(search: str) -> str:
    """The search's color in every picture."""
    names = list(SEARCH_ORDER)
    index = names.index(search) if search in names else 8 + sum(map(ord, search)) % 2
    return f"C{index}"


def _line_labels(group: list[TuningRun]) -> list[str]:
    """Each run's legend entry: its search, and its id where a search has several runs."""
    searches = [r.search for r in group]
    return [
        r.search if searches.count(r.search) == 1 else f"{r.search} (run {r.id})" for r in group
    ]


def _figure(width: float, height: float) -> Any:
    """A figure drawn by the Agg backend (no display, no pyplot global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Any, path: Path) -> Path:
    figure.savefig(path, format="png", metadata={"Software": None})
    return path


def slug(*parts: str) -> str:
    """A file-name-safe form of `parts`."""
    return re.sub(r"[^A-Za-z0-9]+", "-", "-".join(parts)).strip("-").lower()


def _title(run: TuningRun) -> str:
    return f"{run.kernel_name} {run.spec_key} on {run.hardware}"


def _progress(group: list[TuningRun], out: Path) -> Picture:
    """Best time so far against wall time (left) and trials (right), a line per run."""
    figure = _figure(9.0, 3.6)
    by_time, by_trials = figure.subplots(1, 2, sharey=True)
    for run, label in zip(group, _line_labels(group), strict=True):
        best = run.best_so_far()
        points = [(t, b) for t, b in zip(run.trials, best, strict=True) if b is not None]
        if not points:
            continue
        style = {"where": "post", "color": color(run.search), "label": label}
        by_time.step([t.wall_s for t, _ in points], [b for _, b in points], **style)
        by_trials.step([t.index for t, _ in points], [b for _, b in points], **style)
    by_time.set(xlabel="wall time (s)", ylabel="best time so far (ms)")
    by_time.ticklabel_format(axis="x", useOffset=False)
    by_trials.set(xlabel="trials")
    _integer_ticks(by_trials)
    if by_trials.get_lines():  # none when every trial failed
        by_trials.legend(title="search", fontsize="small")
    _log_if_wide(by_time, [b for r in group for b in r.best_so_far() if b is not None])
    figure.suptitle(_title(group[0]), fontsize="medium")
    path = _save(figure, out / f"tuning-{slug(group[0].kernel_name, str(group[0].id))}.png")
    return Picture(path, f"Tuning {_title(group[0])}", _progress_caption(group), "tuning")


def _progress_caption(group: list[TuningRun]) -> str:
    parts = [
        f"{r.search}: best {_ms(r.best_ms())} after {_count(len(r.trials), 'trial')}"
        f" ({r.failed()} failed) in {r.wall_s():.1f} s"
        for r in group
    ]
    return (
        "Best kernel time found so far, against wall time (estimated from when each batch"
        " was stored) and against trials. " + "; ".join(parts) + "."
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _ms(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g} ms"


def _log_if_wide(axes: Any, values: list[float], axis: str = "y") -> None:
    """A log scale where values span more than 5x (slow configs would flatten the rest),
    its ticks written as plain numbers."""
    from matplotlib.ticker import FuncFormatter

    positive = [v for v in values if v > 0]
    if not positive or max(positive) <= 5 * min(positive):
        return
    (axes.set_yscale if axis == "y" else axes.set_xscale)("log")
    ticks = axes.yaxis if axis == "y" else axes.xaxis
    few_decades = max(positive) < 100 * min(positive)
    ticks.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ticks.set_minor_formatter(FuncFormatter(lambda value, _: _minor(value, few_decades)))


def _integer_ticks(axes: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))


def _minor(value: float, labelled: bool) -> str:
    """Minor ticks of a log axis: 2, 3 and 5 times a power of ten, where there is room."""
    if not labelled or value <= 0:
        return ""
    mantissa = round(value / 10 ** math.floor(math.log10(value)))
    return f"{value:g}" if mantissa in (2, 3, 5) else ""


def _configs(group: list[TuningRun], out: Path) -> Picture:
    """Every config tried: by time and energy where measured, else by trial and time."""
    figure = _figure(7.2, 4.0)
    axes = figure.subplots()
    measured = any(r.has_energy() for r in group)
    caption = (_energy_scatter if measured else _time_scatter)(axes, group)
    if axes.collections:  # none when every trial failed
        axes.legend(title="search", fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    figure.suptitle(_title(group[0]), fontsize="medium")
    name = f"configs-{slug(group[0].kernel_name, str(group[0].id))}.png"
    kind = "by time and energy" if measured else "by time"
    title = f"Configs tried for {_title(group[0])}, {kind}"
    return Picture(_save(figure, out / name), title, caption, "tuning")


def _energy_scatter(axes: Any, group: list[TuningRun]) -> str:
    points: list[tuple[float, float]] = []
    for run, label in zip(group, _line_labels(group), strict=True):
        mine = [(t.time_ms, t.energy_j) for t in run.trials if t.time_ms and t.energy_j]
        points += mine
        if mine:
            axes.scatter(*_columns(mine), s=14, alpha=0.7, color=color(run.search), label=label)
    front = pareto_front(points)
    unmeasured = [r.search for r in group if not r.has_energy()]
    if unmeasured:
        axes.set_title(f"energy not measured: {', '.join(unmeasured)}", fontsize="small")
    if not front:
        return "No trial with both a time and a measured energy."
    axes.plot(*_columns(front), "k--", lw=1, drawstyle="steps-post", label="Pareto front")
    axes.scatter(*_columns(front), s=40, facecolors="none", edgecolors="k", linewidths=1)
    axes.set(xlabel="time per call (ms)", ylabel="energy per call (J)")
    _log_if_wide(axes, [p[0] for p in points], "x")
    _log_if_wide(axes, [p[1] for p in points])
    fastest, frugal = front[0], front[-1]
    return (
        f"Each ok trial with its measured energy ({len(points)} configs). The dashed line"
        f" is the time/energy Pareto front ({len(front)} configs): the fastest takes"
        f" {fastest[0]:.4g} ms and {fastest[1]:.4g} J per call, the most frugal"
        f" {frugal[0]:.4g} ms and {frugal[1]:.4g} J."
        + (
            f" Energy was not measured in the runs of {', '.join(unmeasured)}."
            if unmeasured
            else ""
        )
    )


def _columns(points: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    return [p[0] for p in points], [p[1] for p in points]


def pareto_front(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (time, energy) points no other point beats on both, fastest first (the tuner's
    own `energy.pareto_front`, on bare points)."""
    from tilecraft.autotune import energy

    trials = [Trial(Config(), OK, time_ms, energy_j=joules) for time_ms, joules in points]
    return [(t.time_ms or 0.0, t.energy_j or 0.0) for t in energy.pareto_front(trials)]


def _time_scatter(axes: Any, group: list[TuningRun]) -> str:
    times = [t.time_ms for r in group for t in r.trials if t.time_ms]
    for run, label in zip(group, _line_labels(group), strict=True):
        ok = [(t.index, t.time_ms) for t in run.trials if t.time_ms]
        if ok:
            axes.scatter(*_columns(ok), s=14, alpha=0.7, color=color(run.search), label=label)
    failed = [t.index for r in group for t in r.trials if not t.time_ms]
    if failed and times:
        top = [max(times) * 1.1] * len(failed)
        axes.scatter(failed, top, marker="x", s=14, color="0.5", label="failed")
    axes.set(xlabel="trial", ylabel="time per call (ms)")
    _integer_ticks(axes)
    _log_if_wide(axes, times)
    axes.set_title("energy not measured", fontsize="small", color="0.4")
    return (
        f"Each config's kernel time, in the order tried ({len(times)} ok, {len(failed)}"
        " failed, marked x at the top). Energy was not measured for these trials (no"
        " joules per call in the tuning database), so configs are not scattered by energy."
    )


def _histories(
    report: Report, bench_file: Path, kernel: str | None, shape: str | None, limit: int
) -> dict[str, list[regress.BenchRun]]:
    """The benchmark histories to draw, by kernel; why none, in the report's notes."""
    try:
        history = regress.history(bench_file)
    except ReportError as error:
        report.notes.append(str(error))
        return {}
    wanted = {k: v for k, v in history.items() if bench_matches(k, kernel, shape)}
    if not wanted:
        asked = " of " + " ".join(filter(None, (kernel, shape))) if kernel or shape else ""
        report.notes.append(f"no benchmark runs{asked} in {bench_file}")
    if len(wanted) > limit:
        report.notes.append(f"{len(wanted) - limit} more kernels' histories not drawn (--limit)")
    return dict(list(wanted.items())[:limit])


def bench_matches(key: str, kernel: str | None, shape: str | None) -> bool:
    """Bench keys read "example.function-4096x4096": `kernel` is the example's or the
    function's name (or the key's start), `shape` a part of the key."""
    names = key.partition("-")[0].split(".")
    return (not kernel or kernel in names or key.startswith(kernel)) and (not shape or shape in key)


def _bench(kernel: str, runs: list[regress.BenchRun], out: Path) -> Picture:
    """Each run's samples as a box, medians joined; red/green: slower/faster than before."""
    figure = _figure(max(4.8, 0.9 * len(runs) + 2.5), 3.6)
    axes = figure.subplots()
    verdicts = _verdicts(runs)
    positions = list(range(1, len(runs) + 1))
    boxes = axes.boxplot([list(r.samples) for r in runs], positions=positions, widths=0.5,
                         patch_artist=True, showfliers=True)  # fmt: skip
    for box, verdict in zip(boxes["boxes"], verdicts, strict=True):
        box.set(facecolor=_VERDICT_COLORS.get(verdict, "#c6dbef"), edgecolor="0.3")
    medians = [statistics.median(r.samples) for r in runs]
    axes.plot(positions, medians, color="0.3", lw=1, zorder=0)
    _verdict_legend(axes, verdicts)
    axes.set_xticks(positions, bench_labels(runs), fontsize="small")
    axes.set(ylabel="time per call (ms)", xlabel="benchmark run (oldest first)")
    gpus = sorted({r.gpu for r in runs if r.gpu}) or ["an unnamed GPU"]
    figure.suptitle(f"{kernel} on {', '.join(gpus)}", fontsize="medium")
    path = _save(figure, out / f"bench-{slug(kernel)}.png")
    return Picture(path, f"Benchmark history of {kernel}", _bench_caption(runs, verdicts), "bench")


_VERDICT_COLORS = {"regression": "#fb6a4a", "improvement": "#74c476"}


def _verdict_legend(axes: Any, verdicts: list[str]) -> None:
    """A legend of the colors used, if any run was flagged."""
    from matplotlib.patches import Patch

    shown = [v for v in _VERDICT_COLORS if v in verdicts]
    if shown:
        handles = [Patch(facecolor=_VERDICT_COLORS[v], edgecolor="0.3", label=v) for v in shown]
        axes.legend(handles=handles, fontsize="small", title="against the run before")


def _verdicts(runs: list[regress.BenchRun]) -> list[str]:
    """Each run against the one before it, as `tilecraft bench --compare` judges."""
    out = ["first"]
    for before, now in zip(runs, runs[1:], strict=False):
        change = regress.compare({"k": list(before.samples)}, {"k": list(now.samples)})
        out.append(change[0].verdict)
    return out


def bench_labels(runs: list[regress.BenchRun]) -> list[str]:
    """Tick labels: the run, its commit when that differs from the run's name, and the
    tilecraft version where it changed."""
    labels, last = [], None
    for run in runs:
        lines = [run.run[:12]]
        if run.commit and run.commit != run.run:
            lines.append(run.commit[:9])
        version = _tilecraft_version(run.versions)
        if version and version != last:
            lines.append(f"v{version}")
        last = version or last
        labels.append("\n".join(lines))
    return labels


def _tilecraft_version(versions: str) -> str:
    """ "torch=...;triton=...;tilecraft=0.1.0+abc123" -> "0.1.0" (the compiler hash dropped)."""
    found = re.search(r"tilecraft=([^;+]+)", versions)
    return found.group(1) if found else ""


def _bench_caption(runs: list[regress.BenchRun], verdicts: list[str]) -> str:
    counts = sorted({len(r.samples) for r in runs})
    each = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    flagged = [
        f"{run.run} ({verdict})"
        for run, verdict in zip(runs, verdicts, strict=True)
        if verdict in _VERDICT_COLORS
    ]
    return (
        f"Time per call in {len(runs)} stored runs of tilecraft bench"
        f" ({each} samples each):"
        " boxes span the middle half of the samples, whiskers 1.5 times that, the line joins"
        " the medians. Red: slower than the run before, green: faster (one-sided"
        f" Mann-Whitney U, p < {regress.ALPHA}, and a median change beyond"
        f" {regress.THRESHOLD:.0%}). " + (f"Flagged: {', '.join(flagged)}." if flagged else "")
    ).strip()


__all__ = ["Picture", "Report", "write_report"]
