"""The warm worker pool: reused across tuning runs, started before the reference, idle
workers exiting, failures still confined to their candidate; and where tuning time goes."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import tilecraft as tc
from tilecraft.autotune import reference as reference_module
from tilecraft.autotune import runner, tune, workers
from tilecraft.autotune.bench import RETIME_JOB, Benchmarker
from tilecraft.autotune.phases import Phases
from tilecraft.autotune.trial import Trial
from tilecraft.autotune.workers import SKIPPED_RESULT
from tilecraft.language import Choice
from tilecraft.runtime.settings import Settings


@tc.kernel
def flaky(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    mode = tc.register_tunable("mode", Choice(0, 1, 2, 3, 4, 5, 6, 7))
    real = x.device.type != "meta"  # bind time runs host code on meta tensors
    while real and mode == 1:  # hangs
        pass
    if real and mode == 2:
        os._exit(3)  # crashes the process
    if real and mode == 3:
        os.write(1, b"noise on the worker's stdout\n")
    if real and mode == 4:  # says it ran
        open(os.environ["TILECRAFT_TEST_MARK"], "w").close()
    if real and mode == 5 and sys.argv[0].endswith("worker.py"):  # crashes a worker only
        os._exit(4)
    if real and mode == 6 and sys.argv[0].endswith("worker.py"):  # slow in a worker
        time.sleep(4.0)
    if real and mode == 7 and sys.argv[0].endswith("worker.py"):
        # breaks its worker for good, as a GPU's sticky error (a misaligned address) does:
        # every later call of the process fails
        setattr(torch, "empty_like", None)  # noqa: B010
        setattr(torch, "ones", None)  # noqa: B010
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] + 1.0
    return out


OK, HANG, CRASH, NOISY, MARKS, CRASHES_WORKERS, SLOW, BREAKS_WORKERS = (
    tc.Config(block_sizes=[16], mode=m) for m in range(8)
)


@pytest.fixture
def cold() -> Iterator[None]:
    """No warm pool at the start, none left behind."""
    workers.shutdown()
    yield
    workers.shutdown()


def pids(bench: Benchmarker) -> set[int]:
    assert bench.pool is not None
    return {w.proc.pid for w in bench.pool.workers if w.proc is not None and w.alive()}


def gone(pid: int, within_s: float = 20.0) -> bool:
    """Whether process `pid` ends (or is a zombie) within `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.2)
    return False


def test_warm_pool_serves_the_next_run_and_confines_a_crash(
    cold: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    computed_here: list[bool] = []
    reference = Benchmarker._reference

    def spying(self: Benchmarker, *how: Any) -> list[torch.Tensor]:
        computed_here.append(True)
        return reference(self, *how)

    monkeypatch.setattr(Benchmarker, "_reference", spying)
    x = torch.randn(40)
    with Benchmarker(flaky.bind((x,)), (x,), workers=1, timeout_s=30) as first:
        assert first([OK])[0].ok
        used = pids(first)
    assert computed_here == []  # the reference came from the worker, not compiled here
    assert first.phases["workers_ready"] > 0 and first.phases["load"] > 0
    y = torch.randn(70)  # another run, other arguments: loaded at its first job
    with Benchmarker(flaky.bind((y,)), (y,), workers=1, timeout_s=30) as second:
        assert pids(second) == used
        statuses = [t.status for t in second([OK, CRASH, NOISY])]
        assert statuses == ["ok", "runtime_error", "ok"]
        assert second([OK])[0].ok  # the crashed worker was replaced
    assert second.phases["load"] > 0


def test_a_candidate_that_breaks_its_worker_fails_alone(cold: None) -> None:
    """A candidate after which its process can compute nothing (a GPU's sticky error) fails;
    its worker says so and exits, and the next candidates run in a fresh one."""
    x = torch.randn(40)
    with Benchmarker(flaky.bind((x,)), (x,), workers=1, timeout_s=30) as bench:
        assert bench([OK])[0].ok
        (before,) = pids(bench)
        statuses = [t.status for t in bench([BREAKS_WORKERS, OK, OK])]
        assert statuses == ["runtime_error", "ok", "ok"]
        assert before not in pids(bench) and gone(before)


def test_a_job_cut_by_the_deadline_keeps_its_worker_and_its_late_answer_is_dropped(
    cold: None,
) -> None:
    """Past the deadline a running job is abandoned, not killed: its worker stays warm for
    the next run (no restart), and what it answers later is not taken for a new job's."""
    x = torch.randn(40)
    with Benchmarker(flaky.bind((x,)), (x,), workers=2, timeout_s=30) as bench:
        assert [t.ok for t in bench([OK, OK])] == [True, True]  # both workers warm
        started = pids(bench)
        bench.deadline = time.monotonic() + 1.5
        assert [t.status for t in bench([OK, SLOW])][0] == "ok"  # SLOW: skipped at 1.5 s
        bench.deadline = None
        assert [t.ok for t in bench([OK, OK])] == [True, True]  # on the free worker
        time.sleep(4.0)  # SLOW answers now, to a run that did not ask
        assert [t.ok for t in bench([OK, OK])] == [True, True]
        assert pids(bench) == started


class Jobs:
    """Counts the jobs a pool runs, by config, and which of them computed the reference."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[tuple[str, bool, bool]] = []  # (config, publishes, is timed)
        run = workers.WorkerPool.run

        def counting(pool: workers.WorkerPool, jobs: list[dict], *a: Any, **k: Any) -> Any:
            self.sent += [(j["config"], "publish" in j, j.get("time", True)) for j in jobs]
            return run(pool, jobs, *a, **k)

        monkeypatch.setattr(workers.WorkerPool, "run", counting)

    def of(self, config: tc.Config) -> list[tuple[str, bool, bool]]:
        return [s for s in self.sent if s[0] == config.to_json()]


def test_the_reference_config_is_compiled_once_in_a_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = Jobs(monkeypatch)
    compiled_here = []
    monkeypatch.setattr(Benchmarker, "_compiled_in_time", lambda *a: compiled_here.append(a))
    x = torch.randn(40)
    bound = flaky.bind((x,))
    default, other = bound.default_config, tc.Config(block_sizes=[32], mode=0)
    with Benchmarker(bound, (x,), workers=2, timeout_s=30) as bench:
        first = bench([other, default])  # the default's job computes the reference too
        again = bench([other])  # the reference is there: no job computes it again
    assert [t.status for t in first + again] == ["ok"] * 3
    assert jobs.of(default) == [(default.to_json(), True, True)] and not compiled_here
    assert bench.phases["reference"] > 0
    assert [publishes for _, publishes, _ in jobs.of(other)] == [False, False]


def test_each_config_is_generated_once_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(40)
    bound = flaky.bind((x,))
    generated: list[tc.Config] = []
    code_file = bound.code_file

    def counting(config: tc.Config | None = None) -> Any:
        generated.append(config)
        return code_file(config)

    monkeypatch.setattr(bound, "code_file", counting)
    other = tc.Config(block_sizes=[32], mode=0)
    with Benchmarker(bound, (x,), workers=0) as bench:
        assert all(t.ok for t in bench([bound.default_config, other]))
        assert set(bench.retime([bound.default_config, other], rounds=2)) == {
            bound.default_config,
            other,
        }
    assert sorted(map(str, generated)) == sorted(map(str, [bound.default_config, other]))


def test_a_batch_without_the_reference_config_computes_it_in_one_more_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = Jobs(monkeypatch)
    x = torch.randn(40)
    bound = flaky.bind((x,))
    with Benchmarker(bound, (x,), workers=1, timeout_s=30) as bench:
        (trial,) = bench([tc.Config(block_sizes=[32], mode=0)])
    assert trial.ok
    assert jobs.of(bound.default_config) == [(bound.default_config.to_json(), True, False)]


def test_a_reference_config_that_crashes_its_worker_falls_back_to_eager() -> None:
    x = torch.randn(40)
    bound = flaky.bind((x,))
    with Benchmarker(bound, (x,), workers=2, timeout_s=30, reference=CRASHES_WORKERS) as bench:
        assert bench.reference is None  # none computed here unless the worker fails
        statuses = [t.status for t in bench([CRASHES_WORKERS, OK])]
        assert bench.reference is not None and bench.reference.expected is not None
    assert statuses == ["runtime_error", "ok"]


def unfit_default(x: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`flaky` bound to `x` with a default config whose code does not generate: its
    reference is computed eagerly in the tuning process, as when a worker cannot."""
    bound = flaky.bind((x,))
    monkeypatch.setattr(bound, "default_config", tc.Config(block_sizes=[16, 16]))
    return bound


def test_candidates_run_before_the_reference_exists(
    cold: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mark = tmp_path / "candidate-ran"
    monkeypatch.setenv("TILECRAFT_TEST_MARK", str(mark))
    reference = Benchmarker._reference

    def after_a_candidate(self: Benchmarker, *how: Any) -> list[torch.Tensor]:
        deadline = time.monotonic() + 60
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mark.exists(), "no candidate ran while the reference was computed"
        return reference(self, *how)

    monkeypatch.setattr(Benchmarker, "_reference", after_a_candidate)
    x = torch.randn(30)
    with Benchmarker(unfit_default(x, monkeypatch), (x,), workers=1, timeout_s=5) as bench:
        (trial,) = bench([MARKS])  # waits past its timeout for the reference, then passes
    assert trial.ok and bench.phases["reference"] > 0


def test_reference_that_cannot_be_saved_runs_candidates_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def full_disk(expected: list[torch.Tensor], path: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reference_module, "save", full_disk)
    x = torch.randn(30)
    with Benchmarker(flaky.bind((x,)), (x,), workers=1, timeout_s=30) as bench:
        bench.ref_path = tmp_path / "missing" / "expected.pt"  # nor can the worker save it
        with pytest.warns(UserWarning, match="no benchmark workers"):
            ok, again = bench([OK, tc.Config(block_sizes=[32], mode=0)])
        assert ok.ok and again.ok and bench.pool is None


def test_reference_that_fails_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(self: Benchmarker, *how: Any) -> list[torch.Tensor]:
        raise RuntimeError("the kernel raises on these arguments")

    monkeypatch.setattr(Benchmarker, "_reference", failing)
    x = torch.randn(30)
    with (
        pytest.raises(RuntimeError, match="raises on these arguments"),
        Benchmarker(unfit_default(x, monkeypatch), (x,), workers=1, timeout_s=30) as bench,
    ):
        bench([OK])


def test_tuning_starts_its_workers_before_its_set_up(
    cold: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[bool] = []
    meter = tune.default_meter

    def spying(args: tuple) -> Any:
        seen.append(any(w.alive() for pool in workers.warm_pools() for w in pool.workers))
        return meter(args)

    monkeypatch.setattr(tune, "default_meter", spying)
    kernel = tc.kernel(flaky.fn, cache_dir=tmp_path, autotune_workers=1, autotune_quiet=True)
    kernel.configs = [OK]
    x = torch.randn(20)
    kernel.autotune((x,))
    assert seen == [True] and kernel.bind((x,)).tuning["ok"] == 1


def test_runs_at_once_keep_warm_pools_and_time_in_turns(cold: None) -> None:
    workers.keep_warm(2, workers.IDLE_S)
    try:
        x, y = torch.randn(30), torch.randn(40)
        with (
            Benchmarker(flaky.bind((x,)), (x,), workers=1, timeout_s=30) as one,
            Benchmarker(flaky.bind((y,)), (y,), workers=1, timeout_s=30) as two,
        ):
            assert one.pool is not two.pool
            pools = {id(one.pool), id(two.pool)}
            assert one._job(OK)["lock"] == two._job(OK)["lock"]  # one GPU, one timing at once
            assert one([OK])[0].ok and two([OK])[0].ok
        assert {id(p) for p in workers.warm_pools()} == pools  # both stay for the next runs
    finally:
        workers.keep_warm(1, 0.0)


def test_a_wait_for_the_gpu_does_not_count_against_a_job(cold: None) -> None:
    import fcntl
    import threading

    x = torch.randn(30)
    with Benchmarker(flaky.bind((x,)), (x,), workers=1, timeout_s=3) as bench:
        assert bench([OK])[0].ok  # the worker is started (its start-up has its own clock)
        lock = bench._job(OK)["lock"]
        with open(lock, "a") as held:  # another run's timings take the GPU for 5 s
            fcntl.flock(held, fcntl.LOCK_EX)
            threading.Timer(5.0, fcntl.flock, (held, fcntl.LOCK_UN)).start()
            start = time.monotonic()
            (trial,) = bench([tc.Config(block_sizes=[32], mode=0)])
            waited = time.monotonic() - start
    assert trial.ok and waited > 4.5, (trial, waited)


def test_missing_data_fails_the_job_not_the_worker() -> None:
    pool = workers.acquire(1, 30, interpret=True)
    try:  # its "ready" line waits unread, its answer follows at once: both must be read
        worker = pool.workers[0]
        if worker.alive() and not worker.ready:
            select.select([worker.proc.stdout], [], [], 60)  # type: ignore[union-attr]
        job = {"args": "/nonexistent/args.pt", "ref": "/nonexistent/expected.pt"}
        (result,) = pool.run([{**job, "code_path": "x.py", "name": "k", "imports": {}}])
        assert result["status"] == "runtime_error" and "cannot load" in result["error"]
        assert pool.workers[0].alive()
    finally:
        workers.give_back(pool)


@pytest.mark.slow
def test_idle_workers_exit_and_are_replaced(cold: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "IDLE_S", 1.0)
    x = torch.randn(30)
    with Benchmarker(flaky.bind((x,)), (x,), workers=1, timeout_s=30) as first:
        assert first([OK])[0].ok
        (pid,) = pids(first)
    assert gone(pid)  # on its own, once idle
    with Benchmarker(flaky.bind((x,)), (x,), workers=1, timeout_s=30) as second:
        assert second([OK])[0].ok


@pytest.mark.slow
def test_a_hang_in_a_warm_pool_fails_alone(cold: None) -> None:
    x = torch.randn(30)
    with Benchmarker(flaky.bind((x,)), (x,), workers=1, timeout_s=30) as first:
        assert first([OK])[0].ok
    with Benchmarker(flaky.bind((x,)), (x,), workers=1, timeout_s=3) as second:
        assert [t.status for t in second([HANG, OK])] == ["timeout", "ok"]


ORPHAN = """
import os, sys, torch
sys.path.insert(0, {tests!r})
from test_workers import OK, flaky
from tilecraft.autotune.bench import Benchmarker
x = torch.randn(20)
bench = Benchmarker(flaky.bind((x,)), (x,), workers=1, timeout_s=60)
assert bench([OK])[0].ok
print(bench.pool.workers[0].proc.pid, flush=True)
os._exit(0)  # no clean-up at all
"""


@pytest.mark.slow
def test_workers_exit_with_their_parent(tmp_path: Path) -> None:
    script = tmp_path / "orphan.py"
    script.write_text(textwrap.dedent(ORPHAN.format(tests=str(Path(__file__).parent))))
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, check=True
    )
    assert gone(int(done.stdout.split()[-1]))


# -- sizing, re-timing, phases (no processes) -----------------------------------------------


def test_pool_is_sized_to_the_batch() -> None:
    settings = Settings(autotune_workers=8)
    assert tune._pool_size(settings, "predict", None, None, None) == tune.TOP
    assert tune._pool_size(settings, "quick", None, None, None) == 8
    assert tune._pool_size(settings, "quick", None, [OK, OK], None) == 2
    assert tune._pool_size(settings, "full", None, None, 5) == 5
    assert tune._pool_size(Settings(autotune_workers=0), "predict", None, None, None) == 0


class Retimer:
    """A Benchmarker on a GPU whose re-timing says the last config is fastest."""

    on_gpu = True

    def __init__(self) -> None:
        self.calls: list[tuple[list[tc.Config], int]] = []

    def retime(self, configs: list[tc.Config], rounds: int = 2) -> dict[tc.Config, float]:
        self.calls.append((configs, rounds))
        return {c: 1.0 - 0.01 * i for i, c in enumerate(configs)}

    def samples(self, configs: list[tc.Config], rounds: int = 2) -> dict[tc.Config, list[float]]:
        self.calls.append((configs, rounds))
        return {c: [1.0 - 0.01 * i] * rounds for i, c in enumerate(configs)}


def test_predict_retimes_only_leaders_within_the_noise_once() -> None:
    a, b, c = (tc.Config(block_sizes=[s]) for s in (16, 32, 64))
    clear = [Trial(a, "ok", 1.0), Trial(b, "ok", 1.1), Trial(c, "ok", 1.2)]
    bench = Retimer()
    assert tune._choose(bench, clear, a, quick=True).config == a  # type: ignore[arg-type]
    assert bench.calls == []  # a lead beyond the noise is kept as measured
    close = [Trial(a, "ok", 1.0), Trial(b, "ok", 1.02), Trial(c, "ok", 1.5)]
    assert tune._choose(bench, close, a, quick=True).config == b  # type: ignore[arg-type]
    assert bench.calls == [([a, b], 1)]
    assert tune._choose(bench, clear, a).config == c  # type: ignore[arg-type]
    assert bench.calls[-1] == ([a, b, c], tune.RETIME_ROUNDS)  # other searches: the leaders


def test_phases_are_recorded_and_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kernel = tc.kernel(flaky.fn, cache_dir=tmp_path, autotune_workers=0, autotune_verbose=True)
    kernel.configs = [OK, tc.Config(block_sizes=[32], mode=0)]
    x = torch.randn(50)
    kernel.autotune((x,))
    phases = kernel.bind((x,)).tuning["phases"]
    assert {"plan", "reference", "compile_max", "compile_sum", "timing", "total"} <= set(phases)
    assert phases["total"] >= phases["reference"] > 0
    assert "phases (s): total" in capsys.readouterr().err
    assert Phases(total=1.0, plan=0.25).summary() == "total 1.00 s: plan 0.25"


def _retimer(rounds: list[dict]) -> SimpleNamespace:
    """A stand-in Benchmarker whose successive `_run` calls give `rounds` (config -> ms or
    a skip), recording the deadline each was given."""
    answers = iter(rounds)
    fake = SimpleNamespace(deadline=time.monotonic() + 3600, phases=Phases(), deadlines=[])

    def run(jobs: list[dict], deadline: float | None) -> list[dict]:
        fake.deadlines.append(deadline)
        answer = next(answers)
        return [answer[j["config"]] for j in jobs]

    fake._run = run
    fake._job = lambda config, energy=True: {"config": config}
    fake.samples = lambda configs, rounds: Benchmarker.samples(fake, configs, rounds)  # type: ignore[arg-type]
    return fake


def test_retime_keeps_the_median_and_drops_a_round_the_deadline_cut() -> None:
    a, b = tc.Config(block_sizes=[16]), tc.Config(block_sizes=[32])
    ms = lambda t: {"status": "ok", "time_ms": t}  # noqa: E731
    lucky = [{a: ms(1.0), b: ms(1.2)}, {a: ms(1.5), b: ms(1.2)}, {a: ms(1.5), b: ms(1.2)}]
    fake = _retimer(lucky)
    times = Benchmarker.retime(fake, [a, b], rounds=3)  # type: ignore[arg-type]
    assert times == {a: 1.5, b: 1.2}  # one lucky round of `a` does not make it the winner
    assert fake.deadlines == [None, fake.deadline, fake.deadline]  # the first runs in full
    cut = [{a: ms(1.0), b: ms(1.2)}, {a: ms(0.5), b: SKIPPED_RESULT}]
    assert Benchmarker.retime(_retimer(cut), [a, b], rounds=3) == {a: 1.0, b: 1.2}  # type: ignore[arg-type]


def test_retime_starts_no_round_that_would_end_past_the_deadline() -> None:
    """A round cut by the deadline is wasted (its jobs are abandoned, their workers busy): a
    round as long as the first would end past it, so none starts."""
    a, b = tc.Config(block_sizes=[16]), tc.Config(block_sizes=[32])
    ms = lambda t: {"status": "ok", "time_ms": t}  # noqa: E731
    fake = _retimer([{a: ms(1.0), b: ms(1.2)}] * 3)
    run = fake._run
    fake._run = lambda jobs, deadline: time.sleep(0.3) or run(jobs, deadline)
    fake.deadline = time.monotonic() + 0.5
    assert Benchmarker.samples(fake, [a, b], rounds=3) == {a: [1.0], b: [1.2]}  # type: ignore[arg-type]
    assert fake.deadlines == [None]


def test_retime_rounds_turn_and_drop_a_config_that_failed() -> None:
    a, b, c = (tc.Config(block_sizes=[s]) for s in (16, 32, 64))
    ms = lambda t: {"status": "ok", "time_ms": t}  # noqa: E731
    failed = {"status": "runtime_error"}
    rounds = [{a: ms(1.0), b: ms(1.1), c: failed}, {a: ms(1.2), b: ms(1.3)}]
    rounds.append({a: ms(1.4), b: ms(1.5)})
    fake = _retimer(rounds)
    sent: list[list[dict]] = []
    run = fake._run
    fake._run = lambda jobs, deadline: sent.append(jobs) or run(jobs, deadline)
    samples = Benchmarker.samples(fake, [a, b, c], rounds=3)  # type: ignore[arg-type]
    assert samples == {a: [1.0, 1.2, 1.4], b: [1.1, 1.3, 1.5]}  # aligned by round
    order = [[j["config"] for j in jobs] for jobs in sent]
    assert order == [[a, b, c], [b, a], [a, b]]  # each round starts one further on
    assert all(j["rep_ms"] == RETIME_JOB["rep_ms"] and not j["check"] for j in sent[0])


def test_gpu_timing_gives_the_gpu_a_head_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timing loop's control flow, with CUDA's events and sleep faked on the CPU: the
    head start comes once, after the warm-up and before the timed launches, which are
    each timed and number about `rep_ms` worth."""
    log: list[str] = []
    clock = [0.0]

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.at = 0.0

        def record(self) -> None:
            self.at = clock[0]

        def elapsed_time(self, other: Event) -> float:
            return other.at - self.at

    def launch() -> None:
        clock[0] += 0.125  # each launch takes 1/8 ms
        log.append("launch")

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append(f"sleep {cycles}"))
    props = SimpleNamespace(clock_rate=1000)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    monkeypatch.setattr(runner, "FLUSH_BYTES", 16)
    ms = runner.gpu_median_ms(launch, torch.device("cpu"), warmup_ms=1.0, rep_ms=4.0)
    assert ms == 0.125
    sleep = log.index(f"sleep {int(runner.HEAD_START_MS * 1000)}")
    assert sleep == 1 + 5 + 8  # after the first run, the estimate's 5 and the warm-up's 8
    assert log[sleep + 1 :] == ["launch"] * 32
