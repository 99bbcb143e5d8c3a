"""The benchmarking engine: check and time candidates in parallel isolated workers.

Workers compile and check concurrently; timing takes a lock (one per GPU for the whole
process, see `housekeeping.gpu_lock`), so one candidate at a time runs on the GPU while the
others compile. The worker that runs the reference config saves its outputs as the
reference for the others, so that config is compiled once.

A candidate that fails to compile, raises, hangs past the timeout or computes a wrong
result becomes a failed Trial; nothing a candidate does stops the search.
"""

from __future__ import annotations

import ast
import functools
import os
import pickle
import shutil
import statistics
import tempfile
import time
import types
import warnings
from pathlib import Path
from typing import Any

import torch

from tilecraft.autotune.energy import EnergyMeter
from tilecraft.autotune.housekeeping import DIR_PREFIX, capped_workers, gpu_lock, remove_stale_dirs
from tilecraft.autotune.phases import Phases
from tilecraft.autotune.reference import Reference, ReferenceFailed
from tilecraft.autotune.runner import fresh, outputs, run_job
from tilecraft.autotune.trial import Trial
from tilecraft.autotune.workers import (
    SKIPPED_RESULT,
    WorkerPool,
    acquire,
    give_back,
    past,
    start_early,
    timed,
)
from tilecraft.exc import TilecraftError
from tilecraft.runtime import guard
from tilecraft.runtime.bound import BoundKernel
from tilecraft.runtime.config import Config
from tilecraft.runtime.cpu import runs_on_cpu, tensors_in
from tilecraft.runtime.interpret import eager_function, run_eagerly


class Benchmarker:
    """Measures configs of one BoundKernel on one set of arguments; call it with a batch.

    `workers=0` runs candidates in this process (fast, but a hang or crash is not
    contained). On a CPU, times come from Triton's interpreter and mean nothing. With a
    `meter`, each ok candidate's energy per call is measured too, after its timing. The
    workers (the process's warm pool, see workers.py) start before the reference outputs
    are computed, so their start-up overlaps it; `phases` receives where the time went.
    """

    def __init__(
        self,
        bound: BoundKernel,
        args: tuple,
        *,
        workers: int = 2,
        timeout_s: float = 60.0,
        reference: Config | None = None,
        phases: Phases | None = None,
        meter: EnergyMeter | None = None,
    ) -> None:
        self.bound, self.args, self.timeout_s, self.meter = bound, args, timeout_s, meter
        self.phases = Phases() if phases is None else phases
        self.on_gpu = any(t.is_cuda for t in tensors_in(args))
        self.pool: WorkerPool | None = None
        self.dir: Path | None = None  # the workers' copies of the inputs and outputs
        self.started = time.monotonic()
        self.deadline: float | None = None  # when a tuning budget runs out (time.monotonic)
        self.measured = 0  # jobs timed (a time, not a failure or a skip) so far
        remove_stale_dirs()  # those of runs that died before they could clean up
        workers = capped_workers(workers, args)
        if workers > 0:
            self.pool = acquire(workers, timeout_s, **pool_kind(args))
        self.expected: list[torch.Tensor] = []  # the reference outputs, in this process
        self.reference: Reference | None = None  # computed here for the workers, if need be
        self.ref_config: Config = bound.default_config
        self.ref_path = Path()  # where the workers find the reference outputs
        self.ref_job: dict | None = None  # the job that computes them in a worker
        self.publisher: dict | None = None  # that job, sent and not answered yet
        self._codes: dict[Config, tuple[Path, str]] = {}  # generated modules, by config
        try:
            self._prepare(reference)
        except BaseException:
            self.close()
            raise

    def _prepare(self, config: Config | None) -> None:
        """The reference outputs: with workers, the worker that runs the reference config
        first saves its outputs for the others (`publish`), so that config is compiled once,
        in a worker, while the other candidates compile; else here and now."""
        self.ref_config = config or self.bound.default_config
        if self.pool is not None:
            with self.phases.timed("save"):
                self._save()
        if self.pool is None or self.dir is None:
            with self.phases.timed("reference"):
                self.expected = self._reference(config)
            return
        self.ref_path = self.dir / "expected.pt"
        try:
            self.ref_job = self._job(self.ref_config, energy=False)
        except TilecraftError:  # its code does not generate: the reference runs eagerly
            self.ref_job = None
            self._fall_back()

    def _fall_back(self) -> None:
        """The reference computed eagerly, in this process, in the background: the worker
        could not compute it (a config that fails or hangs, a full disk)."""
        if self.reference is None and self.dir is not None:
            compute = lambda: self._reference(self.ref_config, False)  # noqa: E731
            self.reference = Reference(compute, self.ref_path, self.phases, device_of(self.args))

    def _reference_pending(self) -> bool:
        """Whether candidates still wait for the reference outputs (raises ReferenceFailed
        once computing them here failed)."""
        if self.reference is not None:
            return self.reference.pending()
        return self.publisher is not None and not self.ref_path.exists()

    def _heard(self, job: dict, result: dict) -> None:
        """A job's result came: the reference's publisher's tells whether it is there."""
        if job is not self.publisher:
            return
        self.publisher = None
        if result.get("published"):
            self.phases.add("reference", float(result.get("compile_s", 0.0)))
        elif not self.ref_path.exists():
            self._fall_back()

    def _publishing(self, jobs: list[dict]) -> tuple[list[dict], list[int]]:
        """The jobs to send, the first computing the reference while it is not there (the
        reference config's own job, or one more when the batch lacks that config); and
        where each of `jobs`' results is among theirs."""
        where = list(range(len(jobs)))
        if self.ref_job is None or self.reference is not None or self.ref_path.exists():
            return jobs, where
        publish = str(self.ref_path)
        ref = [k for k, j in enumerate(jobs) if self._is_reference(j)][:1]
        if ref:
            sent = [{**jobs[ref[0]], "publish": publish}]
            sent += [j for k, j in enumerate(jobs) if k != ref[0]]
            where = [0 if k == ref[0] else k + (k < ref[0]) for k in where]
        else:
            sent = [{**self.ref_job, "publish": publish, "time": False}, *jobs]
            where = [k + 1 for k in where]
        self.publisher = sent[0]
        return sent, where

    def _is_reference(self, job: dict) -> bool:
        """Whether `job` checks (so runs to the end) the reference config."""
        return job.get("check", True) and Config.from_json(job["config"]) == self.ref_config

    def _reference(self, config: Config | None, generated: bool = True) -> list[torch.Tensor]:
        """The outputs every candidate must match: `config` (default: the default config)
        compiled, or the kernel run eagerly in PyTorch where that config fails (or its code
        could not be `generated`)."""
        run_args = fresh(self.args)
        try:
            if not generated:
                raise TilecraftError("the reference config does not generate")
            result = self._compiled_in_time(config)(*run_args)
        except Exception:  # e.g. a default too big for this GPU's shared memory
            run_args = fresh(self.args)
            fn = eager_function(self.bound.src)
            result = run_eagerly(fn, run_args, (config or self.bound.default_config).tunables)
        return [t.detach().clone() for t in outputs(result, run_args)]

    def _compiled_in_time(self, config: Config | None) -> Any:
        """The launcher of `config`, its Triton compile done within the compile timeout;
        TimeoutError when it is not (the compile goes on in the background)."""
        launcher = self.bound.compile(config)
        timeout = self.bound.settings.compile_timeout_s
        work = lambda: guard.precompile(launcher, fresh(self.args))  # noqa: E731
        if guard.needed(self.args) and not guard.finishes_within(work, timeout):
            raise TimeoutError(f"the reference config did not compile in {timeout:g} s")
        return launcher

    def _save(self) -> None:
        """Write the arguments for the workers, in a private temporary directory (removed
        by `close`); without workers, with a warning, when it cannot be written (a full
        disk) or the arguments cannot be pickled."""
        try:
            self.dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))
            torch.save(self.args, self.dir / "args.pt")
        except OSError as e:
            self._no_pool(str(e))
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            # a function argument (an epilogue lambda) cannot travel to another process
            self._no_pool(f"the arguments cannot be sent to a worker process: {e}")

    def _without_workers(self, failed: ReferenceFailed) -> None:
        """The reference could not be saved for the workers (a full disk): candidates run
        in this process. Raises what computing it raised, as the in-process path would."""
        assert self.reference is not None
        if self.reference.expected is None:
            raise failed.__cause__ or failed
        self.expected = self.reference.expected
        self._no_pool(f"the reference outputs cannot be saved: {failed}")

    def _no_pool(self, why: str) -> None:
        self.close()
        message = f"tilecraft: no benchmark workers ({why}); candidates run in this process"
        warnings.warn(message, stacklevel=4)

    def _job(self, config: Config, energy: bool = True) -> dict:
        path, code = self._code(config)
        job = {
            "code_path": str(path),
            "code": code,  # sent, not read back from the cache dir
            "name": self.bound.src.tree.name,
            "imports": self.imports,
            "constants": self.constants,
            "config": config.to_json(),
            "energy": self.meter.to_job() if self.meter and energy else None,
        }
        if self.pool is not None and self.dir is not None:
            job["args"], job["ref"] = str(self.dir / "args.pt"), str(self.dir / "expected.pt")
            job["lock"] = gpu_lock(device_of(self.args))
        return job

    def _code(self, config: Config) -> tuple[Path, str]:
        """The generated module of `config` (its path and code), generated once per run:
        the reference, a batch and each round of re-timing need it again."""
        found = self._codes.get(config)
        if found is None:
            with self.phases.timed("codegen"):
                found = self._codes[config] = self.bound.code_file(config)
        return found

    @functools.cached_property
    def _globals_used(self) -> dict[str, Any]:
        """The module globals the kernel's source names."""
        names = {n.id for n in ast.walk(self.bound.src.tree) if isinstance(n, ast.Name)}
        return {n: self.bound.src.namespace[n] for n in names & set(self.bound.src.namespace)}

    @functools.cached_property
    def constants(self) -> dict[str, Any]:
        """Plain values among those globals (`LOG2E = 1.44...`): sent to workers by value."""
        plain = (bool, int, float, str, type(None))
        return {n: v for n, v in self._globals_used.items() if type(v) in plain}

    @functools.cached_property
    def imports(self) -> dict[str, list[str]]:
        """How a worker finds the other globals the host code uses: [module, attribute path]."""
        found = {}
        for name, value in self._globals_used.items():
            if isinstance(value, types.ModuleType):
                found[name] = [value.__name__, ""]
                continue
            module, qualname = (
                getattr(value, "__module__", None),
                getattr(value, "__qualname__", ""),
            )
            if module and module != "__main__" and qualname and "<" not in qualname:
                found[name] = [module, qualname]
        return found

    def _run(self, jobs: list[dict], deadline: float | None = None) -> list[dict]:
        """Run the jobs; past `deadline` the rest are skipped, but a tuning run goes on until
        one config is timed (a slow start, or first configs that fail, must not leave it
        with nothing)."""
        first = not self.measured
        if self.pool is None:
            results: list[dict] = []
            for job in jobs:
                cut = past(deadline) and not (first and not any(map(timed, results)))
                results.append(SKIPPED_RESULT if cut else run_job(job, self.args, self.expected))
            self.measured += sum(map(timed, results))
            return results
        sent, where = self._publishing(jobs)
        heard = lambda i, result: self._heard(sent[i], result)  # noqa: E731
        try:
            results = self.pool.run(
                sent,
                deadline,
                self.timeout_s,
                hold=self._reference_pending,
                wait_for_one=first,
                on_result=heard,
            )
        except ReferenceFailed as e:
            self._without_workers(e)
            here = [{k: v for k, v in j.items() if k not in WORKER_KEYS} for j in jobs]
            return self._run(here, deadline)
        finally:  # interrupted, its publisher was stopped: the next batch sends another
            self.publisher = None
        self.phases.most("workers_ready", self.pool.started_since(self.started))
        for result in results:
            self.phases.most("load", float(result.get("load_s", 0.0)))
        results = [results[k] for k in where]
        self.measured += sum(map(timed, results))
        return results

    def __call__(self, configs: list[Config]) -> list[Trial]:
        """Check and time every config (in parallel); a Trial each, in order. Configs not
        measured by `self.deadline` (time.monotonic) are "skipped" trials."""
        deadline = self.deadline
        trials: dict[int, Trial] = {}
        jobs: list[tuple[int, dict]] = []
        for i, config in enumerate(configs):
            try:
                jobs.append((i, self._job(config)))
            except TilecraftError as e:
                trials[i] = Trial(config, "invalid", error=e.message)
        results = self._run([job for _, job in jobs], deadline)
        for (i, _), result in zip(jobs, results, strict=True):
            trials[i] = _trial(configs[i], result)
            self.phases.most("compile_max", trials[i].compile_s)
            self.phases.add("compile_sum", trials[i].compile_s)
            self.phases.add("timing", trials[i].bench_s)
        return [trials[i] for i in range(len(configs))]

    def retime(self, configs: list[Config], rounds: int = 2) -> dict[Config, float]:
        """Time the leaders again, interleaved, and keep each one's median over the rounds
        (the median, not the best: one lucky round must not pick the winner)."""
        samples = self.samples(configs, rounds)
        return {c: statistics.median(times) for c, times in samples.items() if times}

    def samples(self, configs: list[Config], rounds: int = 2) -> dict[Config, list[float]]:
        """Each config's times over `rounds` interleaved rounds (each round times every
        config once; its order turns by one each round, so no config always goes first),
        aligned by round. The first round always runs in full; a later one starts only if
        it should end by `self.deadline` (as long as the longest round so far: one cut
        there would stop its workers, which the next tuning run must then restart), and a
        round cut all the same, or in which a config failed, is dropped whole, so that
        every config is judged on the same rounds. A config that fails in the first round
        is left out."""
        samples: dict[Config, list[float]] = {c: [] for c in configs}
        with self.phases.timed("retime"):
            job = lambda c: {**self._job(c, energy=False), "check": False, **RETIME_JOB}  # noqa: E731
            jobs = {c: job(c) for c in configs}
            longest = 0.0
            for i in range(rounds):
                turn = [c for c in configs if i == 0 or samples[c]]
                if len(turn) < (1 if i == 0 else 2) or (i and past_by(self.deadline, longest)):
                    break
                turn = turn[i % len(turn) :] + turn[: i % len(turn)]
                started = time.monotonic()
                results = self._run([jobs[c] for c in turn], self.deadline if i else None)
                longest = max(longest, time.monotonic() - started)
                times = {c: r.get("time_ms") for c, r in zip(turn, results, strict=True)}
                if i and any(t is None for t in times.values()):
                    break
                for config, time_ms in times.items():
                    if time_ms is not None:
                        samples[config].append(time_ms)
        return {c: times for c, times in samples.items() if times}

    def close(self) -> None:
        """Hand the workers back (the warm pool stays) and remove the temporary directory."""
        pool, self.pool = self.pool, None
        if pool is not None:
            give_back(pool)
        if self.reference is not None:
            self.reference.join()  # it writes into the directory
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Benchmarker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# Re-timing's jobs: shorter samples than a search's (more rounds of them fit the budget,
# and rounds, not long samples, are what averages out the GPU's drift)
RETIME_JOB = {"warmup_ms": 5, "rep_ms": 25}
WORKER_KEYS = ("args", "ref", "lock", "publish")  # the parts of a job for workers only


def past_by(deadline: float | None, seconds: float) -> bool:
    """Whether `seconds` from now is past `deadline` (time.monotonic; None: never)."""
    return deadline is not None and time.monotonic() + seconds > deadline


def device_of(args: tuple) -> str:
    """The GPU the arguments live on ("" on the CPU), where workers make their context."""
    return next((str(t.device) for t in tensors_in(args) if t.is_cuda), "")


def pool_kind(args: tuple) -> dict[str, Any]:
    """How the workers for `args` start: under Triton's interpreter, or on their GPU."""
    return {"interpret": runs_on_cpu(args), "device": device_of(args)}


def prestart(args: tuple, workers: int, timeout_s: float) -> None:
    """Start the warm pool's workers for a tuning run about to begin (before its set-up),
    unless it is held; for arguments on the CPU or a GPU only (not "meta")."""
    workers = capped_workers(workers, args)
    if workers > 0 and (runs_on_cpu(args) or device_of(args)):
        start_early(workers, timeout_s, **pool_kind(args))


def _trial(config: Config, result: dict) -> Trial:
    return Trial(
        config,
        result.get("status", "runtime_error"),
        result.get("time_ms"),
        float(result.get("compile_s", 0.0)),
        result.get("error", ""),
        float(result.get("bench_s", 0.0)),
        result.get("energy_j"),
    )
