"""`tilecraft report` (autotune/runs.py, report.py, reporthtml.py, cli_report.py): tuning
runs read back from a tuning database, pictures written as valid PNG files and one HTML
page, with and without measured energy; clear errors when there is nothing to draw."""

from __future__ import annotations

import base64
import importlib.util
import sqlite3
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tilecraft import cli
from tilecraft.autotune import regress
from tilecraft.autotune.db import TuningDB
from tilecraft.autotune.report import bench_labels, pareto_front, write_report
from tilecraft.autotune.runs import RUN_GAP_S, read_runs, shape_pattern
from tilecraft.exc import ReportError
from tilecraft.runtime.config import Config

PNG = b"\x89PNG\r\n\x1a\n"
SPEC = "bfloat16[4096, 4096]"
T0 = 1_790_000_000.0


def trial_row(created: float, search: str, time_ms: float | None, **key: str) -> dict:
    """One stored trial, as `TuningDB.add_trial_rows` takes it."""
    config = Config(block_sizes=[1], num_warps=4 + (len(search) % 2) * 4, num_stages=1)
    return {
        "created": created,
        "kernel": key.get("kernel", "f00d"),
        "kernel_name": key.get("kernel_name", "softmax"),
        "spec_key": key.get("spec_key", SPEC),
        "hardware": "NVIDIA H200",
        "versions": "v1",
        "search": search,
        "config": config.to_json(),
        "status": "ok" if time_ms is not None else "timeout",
        "time_ms": time_ms,
        "compile_s": 2.0,
        "error": "",
    }


def batches(search: str, start: float, times: list[list[float | None]], **key: str) -> list:
    """Batches of trials stored 5 s apart from `start`."""
    rows = []
    for i, batch in enumerate(times):
        rows += [trial_row(start + 5.0 * (i + 1), search, t, **key) for t in batch]
    return rows


@pytest.fixture
def tuning_db(tmp_path: Path) -> Path:
    """softmax tuned by "fast" and "random" (twice, the first run older), matmul once, and
    imported landscape trials (no run)."""
    path = tmp_path / "tuning.sqlite3"
    rows = batches("fast", T0, [[0.5, 0.3, None], [0.2, 0.25]])
    rows += batches("random", T0 + 1000, [[0.9, 0.4]])
    rows += batches("random", T0 + 5000, [[0.6, None], [0.35, 0.3], [0.28]])
    rows += batches("quick", T0 + 6000, [[1.0, 0.8]], kernel="beef", kernel_name="matmul",
                    spec_key="bfloat16[512, 512],bfloat16[512, 512]")  # fmt: skip
    rows += [trial_row(T0, "landscape", 0.1)] * 3
    with TuningDB(path) as db:
        db.add_trial_rows(rows)
    return path


@pytest.fixture
def bench_db(tmp_path: Path) -> Path:
    """Four runs of one kernel, 10 samples each; the third is 20% slower."""
    path = tmp_path / "bench.sqlite3"
    for i, factor in enumerate((1.0, 1.0, 1.2, 1.0)):
        samples = [0.1 * factor * (1 + 0.002 * ((7 * j) % 10)) for j in range(10)]
        versions = f"torch=2.11;triton=3.6;tilecraft=0.{1 + i // 2}.0+abc"
        regress.store_run(path, f"r{i}", {"softmax.softmax-4096x4096": samples}, "H200",
                          versions, f"c0ffee{i}")  # fmt: skip
    return path


def test_runs_are_told_apart_by_search_and_time(tuning_db: Path) -> None:
    runs = read_runs(tuning_db)
    assert [(r.kernel_name, r.search, len(r.trials)) for r in runs] == [
        ("softmax", "fast", 5),
        ("softmax", "random", 2),
        ("softmax", "random", 5),
        ("matmul", "quick", 2),
    ]  # the imported landscape is no run
    fast = runs[0]
    assert fast.id == 1 and fast.best_so_far() == [0.5, 0.3, 0.3, 0.2, 0.2]
    assert fast.best_ms() == 0.2 and fast.failed() == 1 and not fast.has_energy()
    # the first batch was stored 5 s after the start, less its longest compile (2 s)
    assert [t.wall_s for t in fast.trials] == [2.0, 2.0, 2.0, 7.0, 7.0]
    assert runs[2].trials[0].time_ms == 0.6 and runs[2].best_so_far()[:2] == [0.6, 0.6]
    assert RUN_GAP_S < 5000 - 1000  # why the two random runs are two


def test_runs_are_filtered_by_kernel_shape_and_id(tuning_db: Path) -> None:
    assert {r.search for r in read_runs(tuning_db, kernel="matmul")} == {"quick"}
    assert {r.kernel_name for r in read_runs(tuning_db, shape="4096x4096")} == {"softmax"}
    assert len(read_runs(tuning_db, kernel="beef")) == 1  # a fingerprint's prefix
    assert read_runs(tuning_db, kernel="softmax", shape="512x512") == []
    first_random = read_runs(tuning_db)[1].id
    assert [r.search for r in read_runs(tuning_db, ids=[first_random])] == ["random"]
    assert shape_pattern("4096x4096") == "[4096, 4096]" and shape_pattern("int64") == "int64"


class Checker(HTMLParser):
    """Collects the page's images and checks that its elements nest and close."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.images: list[bytes] = []
        self.figures = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            src = dict(attrs)["src"] or ""
            assert src.startswith("data:image/png;base64,")
            self.images.append(base64.b64decode(src.split(",", 1)[1]))
        elif tag not in self.VOID:
            self.open.append(tag)
        self.figures += tag == "figure"

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open.pop() == tag, (tag, self.open)


def check_html(path: Path) -> Checker:
    checker = Checker()
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>")
    checker.feed(text)
    checker.close()
    assert checker.open == []
    return checker


def test_report_draws_tuning_and_bench_history(
    tuning_db: Path, bench_db: Path, tmp_path: Path
) -> None:
    report = write_report(tmp_path / "out", tuning_db, bench_db)
    names = [p.path.name for p in report.pictures]
    assert names == [
        "tuning-matmul-13.png",
        "configs-matmul-13.png",
        "tuning-softmax-1.png",  # the latest run of each search: fast and the second random
        "configs-softmax-1.png",
        "bench-softmax-softmax-4096x4096.png",
    ]
    assert [(r.kernel_name, r.search) for r in report.runs][1:] == [
        ("softmax", "fast"),
        ("softmax", "random"),
    ] and report.runs[2].id == 3 + 5
    for picture in report.pictures:
        assert picture.path.read_bytes().startswith(PNG)
    page = check_html(report.html)
    assert page.figures == 5 and [p.path.read_bytes() for p in report.pictures] == page.images
    softmax = report.pictures[2].caption
    assert "fast: best 0.2 ms after 5 trials (1 failed)" in softmax
    assert "Energy was not measured" in report.pictures[3].caption
    assert "Flagged: r2 (regression), r3 (improvement)." in report.pictures[4].caption
    assert "not measured" in report.html.read_text()


def test_chosen_runs_and_limit(tuning_db: Path, bench_db: Path, tmp_path: Path) -> None:
    first_random = read_runs(tuning_db)[1].id
    report = write_report(tmp_path / "a", tuning_db, bench_db, runs=[1, first_random])
    assert [r.id for r in report.runs] == [1, first_random]
    assert all(p.section == "tuning" for p in report.pictures)  # runs chosen: no history
    report = write_report(tmp_path / "b", tuning_db, bench_db, limit=1, what="tuning")
    assert [r.kernel_name for r in report.runs] == ["matmul"]
    assert report.notes == ["1 more kernel/shape pairs not drawn (--limit)"]


def add_energy(path: Path) -> None:
    """Joules per call for every ok trial (as the energy meter would record them)."""
    with sqlite3.connect(path) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(trials)")}
        if "energy_j" not in columns:
            conn.execute("ALTER TABLE trials ADD COLUMN energy_j REAL")
        conn.execute("UPDATE trials SET energy_j = 0.05 / time_ms WHERE time_ms IS NOT NULL")
    conn.close()


def test_report_scatters_configs_by_energy_when_measured(tuning_db: Path, tmp_path: Path) -> None:
    add_energy(tuning_db)
    report = write_report(tmp_path / "out", tuning_db, kernel="softmax")
    assert all(r.has_energy() for r in report.runs)
    configs = report.pictures[1]
    assert configs.title.startswith("Configs tried for softmax bfloat16[4096, 4096] on")
    assert configs.title.endswith(", by time and energy")
    assert "Pareto front" in configs.caption and configs.path.read_bytes().startswith(PNG)
    assert report.notes == [f"no benchmark database at {tmp_path / 'bench.sqlite3'}"]
    assert "measured" in report.html.read_text() and check_html(report.html).figures == 2


def test_pareto_front() -> None:
    points = [(1.0, 5.0), (2.0, 3.0), (1.5, 6.0), (3.0, 3.0), (4.0, 1.0), (1.0, 4.0)]
    assert pareto_front(points) == [(1.0, 4.0), (2.0, 3.0), (4.0, 1.0)]
    assert pareto_front([]) == []


def test_bench_labels_name_run_commit_and_version_changes(bench_db: Path) -> None:
    runs = regress.history(bench_db)["softmax.softmax-4096x4096"]
    assert [len(r.samples) for r in runs] == [10] * 4 and runs[0].gpu == "H200"
    assert bench_labels(runs) == [
        "r0\nc0ffee0\nv0.1.0",
        "r1\nc0ffee1",
        "r2\nc0ffee2\nv0.2.0",
        "r3\nc0ffee3",
    ]


def test_nothing_to_draw_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "tuning.sqlite3"
    TuningDB(empty).close()
    with pytest.raises(ReportError, match="nothing to draw: no tuning runs in .*; no benchmark"):
        write_report(tmp_path / "out", empty)
    with pytest.raises(ReportError, match="no tuning database at .*missing.sqlite3"):
        write_report(tmp_path / "out", tmp_path / "missing.sqlite3", what="tuning")
    foreign = tmp_path / "other.sqlite3"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(ReportError, match="not a tilecraft tuning database"):
        write_report(tmp_path / "out", foreign, what="tuning")
    with pytest.raises(ReportError, match="what='pictures'"):
        write_report(tmp_path / "out", empty, what="pictures")
    with pytest.raises(ReportError, match="limit=0"):
        write_report(tmp_path / "out", empty, limit=0)
    assert not (tmp_path / "missing.sqlite3").exists()  # reading never creates a file
    assert not (tmp_path / "out").exists()  # nor an output folder when nothing is drawn


def test_cli_exit_codes(
    tuning_db: Path, bench_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    assert cli.main(["report", "--db", str(tuning_db), "-o", str(out)]) == 0
    assert (out / "index.html").is_file() and len(list(out.glob("*.png"))) == 5
    assert "5 pictures; open" in capsys.readouterr().out
    assert cli.main(["report", "--db", str(tuning_db), "--list", "--kernel", "softmax"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("run 1: softmax bfloat16[4096, 4096] (fast) on NVIDIA H200")
    assert listed[-1] == "bench softmax.softmax-4096x4096: 4 runs" and len(listed) == 4
    args = ["report", "--db", str(tuning_db), "--only", "tuning", "-o", str(out)]
    assert cli.main([*args, "--kernel", "conv"]) == 2
    assert "nothing to draw: no tuning runs of kernel conv in" in capsys.readouterr().err
    assert cli.main([*args, "--run", "999"]) == 2
    assert "run ids 999" in capsys.readouterr().err
    empty = tmp_path / "elsewhere" / "tuning.sqlite3"  # and no bench.sqlite3 beside it
    TuningDB(empty).close()
    assert cli.main(["report", "--db", str(empty), "--list"]) == 2
    assert "nothing to list" in capsys.readouterr().err


def load_script(name: str) -> Any:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_script_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_images_script_smoke(tmp_path: Path) -> None:
    """benchmarks/report_images.py, which drew the README's pictures, still runs."""
    result = load_script("report_images").main(
        ["--smoke", "--out", str(tmp_path), "--images", str(tmp_path / "images")]
    )
    assert len(result["pictures"]) == 3
    for kind in ("tuning", "configs", "bench"):
        assert (tmp_path / "images" / f"report-{kind}.png").read_bytes().startswith(PNG)


@pytest.mark.slow  # tunes for real: worker processes and Triton's interpreter, about 15 s
def test_gpu_report_script_smoke(tmp_path: Path) -> None:
    """benchmarks/report_gpu.py (real pictures with energy, on the H200) runs its CPU path."""
    out = tmp_path / "report_gpu.json"
    result = load_script("report_gpu").main(["--smoke", "--searches", "random", "--out", str(out)])
    assert result["searches"][0]["configs"] == 3 and result["objective"] == "time"
    assert [Path(p).name.split("-")[0] for p in result["pictures"]] == ["tuning", "configs"]
    assert all(Path(p).read_bytes().startswith(PNG) for p in result["pictures"])


def test_runs_that_all_failed_or_lack_energy_are_drawn(tmp_path: Path) -> None:
    path = tmp_path / "tuning.sqlite3"
    rows = batches("pattern", T0, [[None]])  # nothing ran
    rows += batches("fast", T0 + 1000, [[0.5, 0.4]]) + batches("de", T0 + 2000, [[0.6]])
    with TuningDB(path) as db:
        db.add_trial_rows(rows)
    with sqlite3.connect(path) as conn:  # energy measured in the "fast" run only
        conn.execute("UPDATE trials SET energy_j = 0.01 WHERE search = 'fast'")
    conn.close()
    report = write_report(tmp_path / "out", path, what="tuning")
    progress, configs = report.pictures
    assert "pattern: best none after 1 trial (1 failed)" in progress.caption
    assert "Energy was not measured in the runs of pattern, de." in configs.caption
    assert all(p.path.read_bytes().startswith(PNG) for p in report.pictures)
