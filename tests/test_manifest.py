"""Whole-model tuning: recording a manifest, tuning it over worker processes (one killed
mid-run), exporting and importing the winners, merging tuning databases, and Dask."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from add import add
from matmul import matmul
from rms_norm import rms_norm
from softmax import softmax

import tilecraft as tc
from tilecraft.autotune import fleet
from tilecraft.autotune.db import DB_NAME, TuningDB
from tilecraft.autotune.fleet import RunState, TuneOptions, tune_entry, tune_manifest, versions
from tilecraft.autotune.manifest import Manifest, ManifestError, build_args, resolve
from tilecraft.autotune.trial import Trial
from tilecraft.autotune.tune import cached_config, tune_key
from tilecraft.cli import main
from tilecraft.runtime.config import Config

QUICK = {"max_configs": 3, "budget_s": 10.0}


def model(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A small model of example kernels: softmax(x + y), then a smaller add."""
    out = softmax(add(x, y))
    return add(out[:3], y[:3])


def recorded() -> Manifest:
    x, y = torch.randn(5, 37), torch.randn(5, 37)
    with tc.record() as manifest:
        model(x, y)
        model(x, y)
    return manifest


def test_record_a_model(tmp_path: Path) -> None:
    manifest = recorded()
    add(torch.randn(2), torch.randn(2))  # outside the block: not recorded
    assert [(e.qualname, e.spec_key, e.calls) for e in manifest] == [
        ("add", "float32[5, 37],float32[5, 37]", 2),
        ("softmax", "float32[5, 37]", 2),
        ("add", "float32[3, 37],float32[3, 37]", 2),  # views: strides kept
    ]
    x, w = torch.randn(4, 9), torch.randn(9)
    with tc.record() as norms:
        rms_norm(x, w)  # the default eps is recorded too
        rms_norm(x, w, 1e-6)  # another float: the same specialization
    ((entry,),) = [list(norms)]
    assert entry.calls == 2 and entry.args[2] == {"kind": "scalar", "type": "float", "value": 1e-5}
    loaded = Manifest.load(manifest.save(tmp_path / "m.json"))
    assert [e.to_dict() for e in loaded] == [e.to_dict() for e in manifest]
    entry = list(loaded)[2]
    assert entry.args[1]["stride"] == [37, 1] and entry.args[0]["contiguous"]
    args = build_args(entry)
    assert [a.shape for a in args] == [(3, 37), (3, 37)]
    # the kernel is found again, and keyed as the tuning database keys it
    kernel = resolve(entry)
    assert kernel is add
    key = tune_key(kernel.bind(args), args)
    assert (key.kernel, key.spec_key, key.versions) == (
        entry.fingerprint,
        entry.spec_key,
        versions(),
    )


def test_record_sees_calls_through_torch_operators() -> None:
    """An operator's eager call (and its backward's) runs its kernel without `__call__`."""
    from transformer_block import matmul_op

    a = torch.randn(5, 7, requires_grad=True)
    b = torch.randn(7, 3)
    with tc.record() as manifest:
        matmul_op(a, b).sum().backward()
    entries = [(e.name, e.spec_key) for e in manifest]
    assert entries[0] == ("matmul", "float32[5, 7],float32[7, 3]")
    assert len(entries) == 3 and {name for name, _ in entries} == {"matmul"}  # and backward


def test_record_cli_and_bad_entries(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    script = tmp_path / "step.py"
    script.write_text(
        "import sys, torch\nfrom add import add\n"
        "n = int(sys.argv[1])\nadd(torch.ones(n), torch.ones(n))\nsys.exit(0)\n"
    )
    out = tmp_path / "manifest.json"
    assert main(["record", "-o", str(out), str(script), "7"]) == 0
    (entry,) = Manifest.load(out)
    assert (entry.module, entry.spec_key, entry.calls) == ("add", "float32[7],float32[7]", 1)
    entry.fingerprint = "0" * 20
    with pytest.raises(ManifestError, match="changed since it was recorded"):
        resolve(entry)
    (tmp_path / "bad.json").write_text("{}")
    assert main(["tune", str(tmp_path / "bad.json")]) == 2
    assert "not a tilecraft manifest" in capsys.readouterr().err


def test_tune_over_two_workers_one_killed(tmp_path: Path) -> None:
    """Two CPU workers; one is killed once trials are stored: none is lost, its entry is
    retried, every entry ends tuned, and a second run resumes (skips them all)."""
    manifest = recorded()
    options = TuneOptions(cache_dir=str(tmp_path), **QUICK)
    db = TuningDB(tmp_path / DB_NAME)
    seen: dict[str, list] = {}

    def kill_once(state: RunState) -> None:
        busy = [s for s in state.slots if s.job is not None and s.proc is not None]
        if "killed" in seen or not busy or db.count() == 0:
            return
        seen["before"] = db.trial_rows()
        os.kill(busy[0].proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
        seen["killed"] = [busy[0].name]

    outcomes = tune_manifest(manifest, options, workers=2, cpu=True, on_update=kill_once)
    assert [o.status for o in outcomes] == ["tuned"] * 3, [o.error for o in outcomes]
    after = db.trial_rows()
    assert "killed" in seen and all(row in after for row in seen["before"])
    assert {o.worker for o in outcomes} <= {"cpu0", "cpu1"}
    for entry, outcome in zip(manifest, outcomes, strict=True):
        (best,) = db.best_rows(kernel=entry.fingerprint, spec_key=entry.spec_key)
        assert Config.from_json(best["config"]) == Config.from_json(outcome.config or "")
    again = tune_manifest(manifest, options, workers=2, cpu=True, progress=False)
    assert [(o.status, o.worker) for o in again] == [("skipped", "-")] * 3  # no worker ran
    assert db.count() == len(after)
    db.close()


def test_a_worker_tunes_two_entries_at_once(tmp_path: Path) -> None:
    """One worker process, two entries at once (each with a benchmark worker of its own):
    every entry is tuned, every trial stored, each outcome the stored winner."""
    manifest = recorded()
    options = TuneOptions(cache_dir=str(tmp_path), compile_workers=1, concurrent=2)
    options.max_configs, options.budget_s = 3, 120.0  # none skipped: every trial is stored
    at_once: list[int] = []

    def watch(state: RunState) -> None:
        at_once.append(max(len(s.jobs) for s in state.slots))

    outcomes = tune_manifest(
        manifest, options, workers=1, cpu=True, progress=False, on_update=watch
    )
    assert [o.status for o in outcomes] == ["tuned"] * 3, [o.error for o in outcomes]
    assert max(at_once) == 2
    with TuningDB(tmp_path / DB_NAME) as db:
        assert db.count() == sum(o.trials for o in outcomes)
        for entry, outcome in zip(manifest, outcomes, strict=True):
            (best,) = db.best_rows(kernel=entry.fingerprint, spec_key=entry.spec_key)
            assert Config.from_json(best["config"]) == Config.from_json(outcome.config or "")


def test_export_import_then_first_call_does_not_tune(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    manifest = recorded()
    here, there = tmp_path / "here", tmp_path / "there"
    for entry in manifest:
        tune_entry(entry, TuneOptions(cache_dir=str(here), **QUICK))
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(here))  # `tilecraft tune` resumes: no work
    assert main(["tune", str(manifest.save(tmp_path / "m.json")), "--cpu", "--max-configs=2"]) == 0
    assert capsys.readouterr().out.count("skipped") == 3
    shipped = tmp_path / "tuned.json"
    assert main(["export", str(manifest.save(tmp_path / "m.json")), "-o", str(shipped),
                 "--db", str(here / DB_NAME), "--trials"]) == 0  # fmt: skip
    assert main(["import", str(shipped), "--db", str(there / DB_NAME)]) == 0
    with TuningDB(here / DB_NAME) as a, TuningDB(there / DB_NAME) as b:
        winners = [{**row, "created": None} for row in a.best_rows()]
        assert [{**row, "created": None} for row in b.best_rows()] == winners
        assert len(winners) == 3
        assert b.count() == a.count() == 9
    assert main(["import", str(shipped), "--db", str(there / DB_NAME)]) == 0
    deployed = tc.kernel(add.fn, cache_dir=there)  # a fresh process's kernel, fresh cache
    x, y = torch.randn(5, 37), torch.randn(5, 37)
    torch.testing.assert_close(deployed(x, y), x + y)
    bound = deployed.bind((x, y))
    with TuningDB(there / DB_NAME) as b:
        (row,) = b.best_rows(kernel=list(manifest)[0].fingerprint, spec_key=bound.spec_key)
        assert b.count() == 9  # importing twice added nothing; the call tuned nothing
    assert bound.tuning == {}
    assert cached_config(bound, (x, y), deployed.settings) == Config.from_json(row["config"])
    assert bound.launcher is bound.compile(Config.from_json(row["config"]))
    untuned = tc.kernel(add.fn, cache_dir=there, autotune_effort="none")  # deployed, no tuning
    torch.testing.assert_close(untuned(x, y), x + y)
    again = untuned.bind((x, y))
    assert again.launcher is again.compile(Config.from_json(row["config"]))
    assert Config.from_json(row["config"]) != again.default_config  # so the check can fail


def test_merge_two_databases(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    meta = {"kernel_name": "k", "hardware": "cpu", "versions": "v", "search": "test"}
    shared = [Trial(Config(num_warps=w), "ok", float(w)) for w in (1, 2)]
    with TuningDB(tmp_path / "a.db") as a, TuningDB(tmp_path / "b.db") as b:
        a.record(shared, kernel="k1", spec_key="s", **meta)
        b.add_trial_rows(a.trial_rows())  # b has a's trials already
        b.record([Trial(Config(num_warps=8), "timeout", None)], kernel="k1", spec_key="s", **meta)
        a.record([Trial(Config(num_warps=4), "ok", 0.5)], kernel="k2", spec_key="s", **meta)
        key = ("k1", "s", "cpu", "v")
        from tilecraft.autotune.db import TuneKey

        a.save_best(TuneKey(*key), Config(num_warps=2), 2.0)
        b.save_best(TuneKey(*key), Config(num_warps=1), 1.0)
    assert main(["merge-db", str(tmp_path / "a.db"), str(tmp_path / "b.db")]) == 0
    assert "1 of 3 trials were new" in capsys.readouterr().out
    assert main(["merge-db", str(tmp_path / "a.db"), str(tmp_path / "b.db")]) == 0
    with TuningDB(tmp_path / "a.db") as a:
        rows = a.trial_rows()
        assert len(rows) == 4  # 2 shared + b's timeout + a's k2
        assert sorted(r["status"] for r in rows) == ["ok", "ok", "ok", "timeout"]
        (best,) = a.best_rows(kernel="k1")
        assert Config.from_json(best["config"]) == Config(num_warps=1)  # the faster stays
    assert main(["merge-db", str(tmp_path / "a.db"), str(tmp_path / "missing.db")]) == 2


@pytest.mark.slow
def test_tune_on_a_dask_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    manifest = recorded()
    options = TuneOptions(cache_dir=str(tmp_path), **QUICK)
    env = {"TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
            env=env,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):  # fmt: skip
        outcomes = tune_manifest(manifest, options, client=client, progress=False)
        assert [o.status for o in outcomes] == ["tuned"] * 3, [o.error for o in outcomes]
        again = tune_manifest(manifest, options, client=client, progress=False)
    assert [o.status for o in again] == ["skipped"] * 3
    with TuningDB(tmp_path / DB_NAME) as db:
        assert db.count() == 9 and len(db.best_rows()) == 3


@pytest.mark.interpreter
def test_tuning_keeps_the_strides_of_views(tmp_path: Path) -> None:
    """Attention's `q @ k.t()` on slices of one qkv buffer: the candidates run on copies
    with the recorded strides (a plain clone would make them contiguous: wrong results)."""
    qkv = torch.randn(16, 48)
    with tc.record() as manifest:
        matmul(qkv[:8, :16], qkv[:8, 16:32].t())
    (entry,) = manifest
    assert [a["stride"] for a in entry.args] == [[48, 1], [1, 48]]
    assert not entry.args[1]["contiguous"]
    outcome = tune_entry(entry, TuneOptions(cache_dir=str(tmp_path), **QUICK))
    assert outcome["trials"] > 0 and outcome["failed_trials"] == 0, outcome


def test_a_hung_worker_is_killed_and_its_entry_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that never answers is killed past the entry's deadline and the entry
    retried, MAX_ATTEMPTS times in all; then the run ends with it failed."""
    monkeypatch.setattr(fleet, "STARTUP_S", 0.3)
    monkeypatch.setattr(fleet, "HUNG_FACTOR", 1.0)

    def start(slot: fleet.Slot) -> None:
        hang = [sys.executable, "-c", "import time; time.sleep(60)"]
        slot.proc = subprocess.Popen(hang, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    monkeypatch.setattr(fleet.Slot, "start", start)
    entry = next(iter(recorded()))
    slots = [fleet.Slot("cpu0", dict(os.environ))]
    (outcome,) = fleet.run_local([entry], TuneOptions(budget_s=0.1), slots)
    assert outcome.status == "failed" and f"died {fleet.MAX_ATTEMPTS} times" in outcome.error


def test_the_costliest_entries_are_tuned_first() -> None:
    """Longest-processing-time order: softmax (the longer kernel) before the two adds, and
    an entry whose kernel cannot be found last."""
    entries = list(recorded())
    lost = dataclasses.replace(entries[0], qualname="no_such_kernel")
    assert fleet.heaviest_first([*entries, lost]) == [1, 0, 2, 3]
