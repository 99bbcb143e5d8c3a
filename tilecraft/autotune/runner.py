"""Running one candidate: load its generated module, check its outputs, time it.

Used in-process and by the isolated worker process (`worker.py`), so both behave alike.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import math
import statistics
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from tilecraft.autotune.energy import meter_from_job
from tilecraft.runtime.cache import remember_source
from tilecraft.runtime.config import Config
from tilecraft.runtime.cpu import tensors_in
from tilecraft.testing import REL_ERROR_LIMITS, relative_error

WARMUP_MS, REP_MS = 10.0, 40.0  # a search's timing of one candidate (see `measure`)


def load_launcher(
    code_path: str,
    name: str,
    imports: dict[str, list[str]],
    code: str | None = None,
    constants: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """The host launcher of a generated module: `code` (named `code_path` in tracebacks and
    for Triton's source lookup), or the file's text when no code is given."""
    # a module name, so the functions defined get a `__module__` (Triton's compiler calls
    # `.startswith` on that of each global a kernel uses, e.g. a reduction's combine function)
    namespace: dict[str, Any] = {"__name__": "tilecraft_generated", **(constants or {})}
    for alias, (module, path) in imports.items():
        value: Any = importlib.import_module(module)
        for attr in filter(None, path.split(".")):
            value = getattr(value, attr)
        namespace[alias] = value
    if code is None:
        code = Path(code_path).read_text()
    remember_source(Path(code_path), code)  # what Triton reads is what runs
    exec(compile(code, code_path, "exec"), namespace)
    return namespace[name]


def outputs(result: Any, args: tuple) -> list[torch.Tensor]:
    """Everything a kernel produced: its return value and its (maybe mutated) arguments."""
    found = [result] if isinstance(result, torch.Tensor) else list(result or ())
    found += [a for a in args if isinstance(a, torch.Tensor)]
    return [t for t in found if isinstance(t, torch.Tensor)]


def fresh(args: tuple) -> tuple:
    """Copies of the tensor arguments, so a candidate cannot corrupt the originals."""
    return tuple(copy_strided(a) if isinstance(a, torch.Tensor) else a for a in args)


def copy_strided(t: torch.Tensor) -> torch.Tensor:
    """A copy with `t`'s strides: the kernel was specialized (and compiled) for them, but
    `clone` makes a view that is not dense (`qkv[:, :16].t()`) contiguous."""
    copy = t.clone()
    if copy.stride() == t.stride():
        return copy
    storage = t.untyped_storage().clone()  # the whole buffer, so every stride still fits
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        storage, t.storage_offset(), t.size(), t.stride()
    )


def mismatch(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> str:
    """Why outputs differ from the reference, or "" when they agree."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"output {i}: {a.dtype}{list(a.shape)}, expected {e.dtype}{list(e.shape)}"
        if not e.is_floating_point():
            if not torch.equal(a, e):
                return f"output {i}: integer values differ"
            continue
        limit = REL_ERROR_LIMITS.get(e.dtype, 1e-5) * 4
        if not torch.isfinite(a).eq(torch.isfinite(e)).all():
            return f"output {i}: non-finite values differ"
        err = relative_error(torch.nan_to_num(a), torch.nan_to_num(e))
        if not err <= limit:
            return f"output {i}: relative error {err:.1e} > {limit:.0e}"
    return ""


def synchronize(args: tuple) -> None:
    if any(t.is_cuda for t in tensors_in(args)):
        torch.cuda.synchronize()


Expected = list[torch.Tensor] | Callable[[], list[torch.Tensor]]  # or how to get them


def check(
    launcher: Callable[..., Any], args: tuple, expected: Expected, publish: str | None = None
) -> dict:
    """Run once (this compiles) and compare with the reference outputs (`expected()` is
    asked for them only then: a worker may compile before they exist). With `publish` (a
    path), this run's outputs are the reference: saved there for the other candidates,
    not compared, so the reference config is compiled once, here, not again by the parent."""
    run_args = fresh(args)
    start = time.perf_counter()
    try:
        result = launcher(*run_args)
        synchronize(run_args)
    except Exception as e:
        status = "compile_error" if _is_compile_error(e) else "runtime_error"
        return {"status": status, "error": _short(e)}
    compile_s = time.perf_counter() - start
    if publish is not None:
        return _published(outputs(result, run_args), publish, compile_s)
    why = mismatch(outputs(result, run_args), expected() if callable(expected) else expected)
    if why:
        return {"status": "wrong_result", "error": why, "compile_s": compile_s}
    return {"status": "ok", "compile_s": compile_s}


def _published(produced: list[torch.Tensor], path: str, compile_s: float) -> dict:
    """Save `produced` as the reference outputs at `path` (atomically)."""
    from tilecraft.autotune.reference import save

    try:
        save([t.detach().clone() for t in produced], Path(path))
    except Exception as e:  # noqa: BLE001 - a full disk: the parent computes it instead
        return {"status": "runtime_error", "error": f"cannot save the reference: {_short(e)}"}
    return {"status": "ok", "compile_s": compile_s, "published": True}


def measure(
    launcher: Callable[..., Any],
    args: tuple,
    repeats: int = 3,
    warmup_ms: float = WARMUP_MS,
    rep_ms: float = REP_MS,
) -> float:
    """Median kernel time in ms: on a GPU, CUDA events around each launch with the L2
    flushed before it, over `rep_ms` of launches after `warmup_ms` of them (hundreds of
    launches for a kernel of 10-100 us); else the wall time of `repeats` runs."""
    run_args = fresh(args)
    if any(t.is_cuda for t in tensors_in(run_args)):
        run = lambda: launcher(*run_args)  # noqa: E731
        try:
            return gpu_median_ms(run, device_of(run_args), warmup_ms, rep_ms)
        except Exception:  # noqa: BLE001 - the candidate ran in its check: Triton's timing then
            from triton.testing import do_bench

            return float(do_bench(run, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        launcher(*run_args)
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


FLUSH_BYTES = 256 << 20  # written before each timed launch: more than any GPU's L2 cache
HEAD_START_MS = 5.0  # the GPU waits this long before the timed launches (see gpu_median_ms)


def gpu_median_ms(
    fn: Callable[[], Any], device: torch.device, warmup_ms: float, rep_ms: float
) -> float:
    """The median GPU time in ms of `fn`'s launches, each timed with CUDA events after the
    L2 cache was flushed, over about `rep_ms` of launches after `warmup_ms` of them.

    As Triton's `do_bench`, with one difference: the GPU first spins for `HEAD_START_MS`
    while the host queues the timed launches, so they run back to back from a queue the
    host keeps ahead of. Without it, a host slowed by other processes (compiling
    candidates, a test suite) lets the GPU wait between the flush and the launch, and the
    wait counts in the kernel's time: timings taken on a busy host came out several percent
    slow, at random."""
    with torch.cuda.device(device):
        flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=device)
        fn()
        torch.cuda.synchronize(device)
        start, end = _event(), _event()
        start.record()
        for _ in range(5):
            flush.zero_()
            fn()
        end.record()
        torch.cuda.synchronize(device)
        estimate = max(start.elapsed_time(end) / 5, 1e-3)
        for _ in range(max(1, int(warmup_ms / estimate))):
            fn()
        pairs = [(_event(), _event()) for _ in range(max(1, int(rep_ms / estimate)))]
        _head_start(device, HEAD_START_MS)
        for first, last in pairs:
            flush.zero_()
            first.record()
            fn()
            last.record()
        torch.cuda.synchronize(device)
    return statistics.median(first.elapsed_time(last) for first, last in pairs)


def _event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)


def _head_start(device: torch.device, ms: float) -> None:
    """Keep the GPU busy for about `ms` (a spinning kernel), if PyTorch offers one."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return
    khz = getattr(torch.cuda.get_device_properties(device), "clock_rate", 0) or 2_000_000
    sleep(int(ms * khz))


def device_of(args: tuple) -> torch.device:
    """The GPU of the first CUDA tensor among `args`."""
    return next(a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda)


def measure_energy(
    launcher: Callable[..., Any], args: tuple, job: dict, time_ms: float
) -> float | None:
    """Joules per call of the job's candidate on the job's meter; None where the meter
    cannot tell (a counter that does not move, an NVML error): the trial still counts."""
    run_args = fresh(args)
    try:
        meter = meter_from_job(job["energy"])
        config = Config.from_json(job["config"])
        run, sync = (lambda: launcher(*run_args)), (lambda: synchronize(run_args))
        return meter.per_call(run, sync, config, time_ms)
    except Exception:  # noqa: BLE001 - the meter's failure is not the candidate's
        return None


def _timing(job: dict) -> tuple[float, float]:
    """The job's warm-up and timing lengths in ms (re-timing asks for shorter samples)."""
    return float(job.get("warmup_ms") or WARMUP_MS), float(job.get("rep_ms") or REP_MS)


def _is_compile_error(e: Exception) -> bool:
    name = type(e).__name__
    return (
        "Compil" in name
        or "OutOfResources" in name
        or type(e).__module__.startswith("triton.compiler")
    )


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) < 400 else text[:200] + " ... " + text[-200:]


@contextlib.contextmanager
def exclusive(lock_path: str | None, notify: Notify | None = None) -> Iterator[None]:
    """Hold the file lock at `lock_path` (none if None): workers compile and check in
    parallel but time one at a time, so timings never share the GPU. The OS drops the
    lock of a worker that dies. A wait for it is told to `notify` (`{"waiting": true}`,
    then `{"timing": true}` once it is held): the pool stops the job's clock meanwhile,
    since other candidates' timings, not this one, take that time."""
    if lock_path is None:
        yield
        return
    with open(lock_path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if notify is not None:
                notify({"waiting": True})
            fcntl.flock(f, fcntl.LOCK_EX)
            if notify is not None:
                notify({"timing": True})
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


Notify = Callable[[dict], None]  # how a worker tells its pool what it is doing


def run_job(job: dict, args: tuple, expected: Expected, notify: Notify | None = None) -> dict:
    """Check (unless `check` is false) and time the candidate a job names; never raises.

    The result has `status`, `error`, `compile_s` (the first run, which compiles), and
    for ok candidates `time_ms` and `bench_s` (wall time spent timing, waiting excluded),
    and `energy_j` (joules per call) when the job names an energy meter (`energy`).
    A job with `publish` (a path) saves its outputs there as the reference instead of
    checking them; with `time` false it is not timed (the reference alone)."""
    try:
        launcher = load_launcher(
            job["code_path"], job["name"], job["imports"], job.get("code"), job.get("constants")
        )
        publish = job.get("publish")
        checked = job.get("check", True)
        result = check(launcher, args, expected, publish) if checked else {"status": "ok"}
        if result["status"] == "ok" and job.get("time", True):
            with exclusive(job.get("lock"), notify):
                start = time.perf_counter()
                warmup_ms, rep_ms = _timing(job)
                ms = measure(launcher, args, warmup_ms=warmup_ms, rep_ms=rep_ms)
                if job.get("energy") and math.isfinite(ms):
                    result["energy_j"] = measure_energy(launcher, args, job, ms)
                result["bench_s"] = time.perf_counter() - start
            result["time_ms"] = ms if math.isfinite(ms) else None
        return result
    except Exception as e:  # anything else the candidate did
        return {"status": "runtime_error", "error": _short(e) + traceback.format_exc()[-300:]}
