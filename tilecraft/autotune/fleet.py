"""Tuning a whole manifest: every entry, spread over worker processes (one per local GPU,
or N under Triton's interpreter on a CPU), or over a Dask cluster (`cluster`).

Local workers tune straight into the tuning database of this machine (SQLite, safe for
concurrent writers), so every trial lands there the moment its batch is measured: a
worker that dies loses no finished trial, and its entry goes back to the queue for
another worker. Entries whose best config is stored already are skipped, so a stopped
run resumes where it was. A GPU worker tunes two entries at once (`concurrent`), each
with a warm pool of benchmark processes: one entry's candidates compile on the CPU
cores while the other's are timed on the GPU (timings take turns, never sharing it).

Example::

    results = tune_manifest(Manifest.load("manifest.json"), TuneOptions(effort="quick"))
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import random
import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tilecraft.autotune.manifest import Entry, Manifest, ManifestError, build_args, resolve
from tilecraft.runtime.settings import Settings

MAX_ATTEMPTS = 3  # an entry whose worker died this often is given up (it may be the cause)
STARTUP_S = 120.0  # a worker's imports and first compile, on a busy machine
HUNG_FACTOR = 4.0  # an entry taking this many times its budget is hung
FULL_EFFORT_S = 300.0  # the longest effort preset's budget (tune.EFFORTS["full"])


@dataclass
class TuneOptions:
    """How each entry is tuned, and where the results go (this machine's cache dir)."""

    effort: str | None = None
    search: str | None = None
    budget_s: float | None = None
    max_configs: int | None = None
    seed: int = 0
    # Benchmark subprocesses of each tuning worker: None shares the CPU cores among the
    # GPU workers (compiling overlaps timing); 0 benchmarks inside the worker itself.
    compile_workers: int | None = None
    cache_dir: str | None = None  # default: Settings().cache_dir of the process running
    # Entries each local worker tunes at once, so that one's candidates compile while
    # another's are timed (the GPU takes timings in turns). None: 2 on a GPU, 1 on a CPU.
    concurrent: int | None = None
    retune: bool = False  # tune entries that have a stored best config too

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Outcome:
    """What became of one entry."""

    entry: Entry
    status: str  # "tuned", "skipped" (tuned before), "failed"
    config: str | None = None  # the winner, as Config JSON
    trials: int = 0
    failed_trials: int = 0
    best_ms: float | None = None
    error: str = ""
    worker: str = ""
    phases: dict[str, float] = field(default_factory=dict)  # where its tuning time went


def versions() -> str:
    """The versions part of a TuneKey, as `tune.tune_key` writes it."""
    from tilecraft.autotune.tune import versions as key_versions

    return key_versions()


def _device(entry: Entry) -> str:
    import torch

    recorded = {a["device"] for a in entry.args if a.get("kind") == "tensor"}
    return "cuda" if "cuda" in recorded and torch.cuda.is_available() else "cpu"


def tune_entry(entry: Entry, options: TuneOptions) -> dict[str, Any]:
    """Tune one entry in this process, into the tuning database of `options.cache_dir`;
    a dict of the outcome (JSON-ready). Skips it when a best config is stored already."""
    import torch

    from tilecraft.autotune.db import TuningDB
    from tilecraft.autotune.tune import autotune, db_path, tune_key

    kernel = resolve(entry)
    random.seed(options.seed)
    torch.manual_seed(options.seed)
    device = _device(entry)
    args = build_args(entry, device)
    overrides: dict[str, Any] = {"autotune_quiet": True}
    if options.compile_workers is not None or device == "cpu":  # interpreted: in-process
        overrides["autotune_workers"] = options.compile_workers or 0
    if options.cache_dir:
        overrides["cache_dir"] = Path(options.cache_dir)
    settings = dataclasses.replace(kernel.settings, **overrides)
    bound = kernel.bind(args)
    key = tune_key(bound, args)
    if not options.retune:
        with TuningDB(db_path(settings)) as db:
            stored = db.load_best(key)
        if stored is not None:
            return {"status": "skipped", "config": stored.to_json()}
    config = autotune(
        bound,
        args,
        settings,
        effort=options.effort,
        search=options.search,
        budget_s=options.budget_s,
        max_configs=options.max_configs,
    )
    return {
        "status": "tuned",
        "config": config.to_json(),
        "trials": bound.tuning.get("configs", 0),
        "failed_trials": bound.tuning.get("failed", 0),
        "best_ms": bound.tuning.get("best_ms"),
        "phases": bound.tuning.get("phases", {}),
    }


def safe_tune_entry(entry: Entry, options: TuneOptions) -> dict[str, Any]:
    """`tune_entry`, with any error of the entry's own (not of the worker) as a failure."""
    try:
        return tune_entry(entry, options)
    except Exception as e:  # noqa: BLE001 - one entry's problem must not stop the run
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"[-800:]}


# -- local worker processes --------------------------------------------------------------
@dataclass
class Slot:
    """One tuning worker process and the entries it is on (several at once: one entry's
    candidates compile while another's are timed)."""

    name: str
    env: dict[str, str]
    proc: subprocess.Popen[Any] | None = None
    # index -> (entry, attempt, when its worker is taken for hung and killed)
    jobs: dict[int, tuple[Entry, int, float]] = field(default_factory=dict)
    done: int = 0
    unread: bytes = b""  # the start of a line it is writing

    @property
    def job(self) -> tuple[int, Entry, int] | None:
        """The first entry it is on, (index, entry, attempt); None when idle."""
        for index, (entry, attempt, _) in self.jobs.items():
            return index, entry, attempt
        return None

    def start(self) -> None:
        command = [sys.executable, "-m", "tilecraft.autotune.fleet"]
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env
        )
        self.unread = b""

    def submit(self, index: int, entry: Entry, attempt: int, options: TuneOptions) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        # entries tuned at once share the worker: each may take as long as all of them
        hung = time.monotonic() + entry_timeout(options) * at_once(options)
        self.jobs[index] = (entry, attempt, hung)
        job = {"index": index, "entry": entry.to_dict(), "options": options.to_dict()}
        data = (json.dumps(job) + "\n").encode()
        try:
            while data:
                data = data[os.write(self.proc.stdin.fileno(), data) :]
        except OSError:
            pass  # it died: its stdout ends, and its entries are retried

    def messages(self) -> list[dict] | None:
        """The answers it wrote since the last call (None once its output has ended);
        read unbuffered, so that two answers at once both wake `select`."""
        assert self.proc is not None and self.proc.stdout is not None
        data = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not data:
            return None
        *lines, self.unread = (self.unread + data).split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
        self.proc = None


def at_once(options: TuneOptions) -> int:
    """How many entries each local worker tunes at once."""
    return max(1, options.concurrent or 1)


def local_slots(workers: int | None = None, cpu: bool | None = None) -> list[Slot]:
    """One slot per visible GPU (each seeing only its own), or `workers` CPU slots running
    Triton's interpreter where there is no GPU (or `cpu` is asked)."""
    import torch

    base = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    if cpu is None:
        cpu = not torch.cuda.is_available()
    if cpu:
        count = workers or max(1, (os.cpu_count() or 2) - 1)
        env = {**base, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
        return [Slot(f"cpu{i}", env) for i in range(count)]
    gpus = _visible_gpus(torch.cuda.device_count())
    gpus = gpus[:workers] if workers else gpus
    return [Slot(f"gpu{g}", {**base, "CUDA_VISIBLE_DEVICES": g}) for g in gpus]


def _visible_gpus(count: int) -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [g.strip() for g in visible.split(",") if g.strip()][:count]
    return [str(i) for i in range(count)]


@dataclass
class RunState:
    """Where a run stands; the progress display and `on_update` read it."""

    total: int
    slots: list[Slot]
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    retries: int = 0
    started: float = field(default_factory=time.monotonic)


def run_local(
    entries: Sequence[Entry],
    options: TuneOptions,
    slots: list[Slot],
    on_update: Callable[[RunState], None] | None = None,
    known: dict[int, Outcome] | None = None,
) -> list[Outcome]:
    """Tune `entries` on the slots' worker processes (started only when needed), but for
    those with `known` outcomes; outcomes in the entries' order."""
    state = RunState(len(entries), slots, dict(known or {}))
    todo = [i for i in heaviest_first(entries) if i not in state.outcomes]
    pending = deque((i, entries[i], 1) for i in todo)
    try:
        while pending or any(s.jobs for s in slots):
            for _ in range(at_once(options)):  # one entry each first, then a second
                for slot in slots:
                    if len(slot.jobs) <= _ and pending:
                        slot.submit(*pending.popleft(), options)
            _collect(state, pending)
            if on_update is not None:
                on_update(state)
    finally:
        for slot in slots:
            slot.stop()
    return [state.outcomes[i] for i in range(len(entries))]


def heaviest_first(entries: Sequence[Entry]) -> list[int]:
    """The entries' indices, the costliest to tune first, so that no GPU is left tuning a
    long entry alone at the end (longest-processing-time order). The cost is guessed from
    the size of the kernel's device code, its loops' syntax trees (compile time and the
    config space grow with it); an entry
    whose kernel cannot be found here counts as cheap, and its worker reports why."""

    def cost(entry: Entry) -> int:
        try:
            src = resolve(entry).source
        except Exception:  # noqa: BLE001 - only an ordering hint
            return 0
        loops = [n for n in src.tree.body if isinstance(n, ast.For)]
        return sum(1 for loop in loops for _ in ast.walk(loop))

    costs = [cost(e) for e in entries]
    return sorted(range(len(entries)), key=lambda i: -costs[i])


def entry_timeout(options: TuneOptions) -> float:
    """How long one entry may take before its worker is taken for hung: well beyond its
    tuning budget (the full effort's when none is given), plus starting up."""
    return STARTUP_S + HUNG_FACTOR * (options.budget_s or FULL_EFFORT_S)


def _collect(state: RunState, pending: deque[tuple[int, Entry, int]]) -> None:
    busy = {s.proc.stdout.fileno(): s for s in state.slots if s.jobs and s.proc and s.proc.stdout}
    for slot in busy.values():
        hung = any(time.monotonic() > deadline for _, _, deadline in slot.jobs.values())
        if hung and slot.proc is not None:
            slot.proc.kill()  # its stdout ends: read below as a death, its entries retried
    ready, _, _ = select.select(list(busy), [], [], 0.1)
    for fd in ready:
        slot = busy[fd]
        assert slot.proc is not None
        messages = slot.messages()
        if messages is None:
            _died(state, slot, pending)
            continue
        for message in messages:
            index = message.pop("index", None)
            if index in slot.jobs:
                entry, _, _ = slot.jobs.pop(index)
                state.outcomes[index] = outcome_from(entry, message, slot.name)
                slot.done += 1


def _died(state: RunState, slot: Slot, pending: deque[tuple[int, Entry, int]]) -> None:
    """The slot's worker died: the trials it stored stay, its entries go back."""
    assert slot.proc is not None
    code = slot.proc.wait()
    slot.proc = None
    for index, (entry, attempt, _) in slot.jobs.items():
        if attempt < MAX_ATTEMPTS:
            state.retries += 1
            pending.append((index, entry, attempt + 1))
        else:
            error = f"its worker died {attempt} times (last exit {code})"
            state.outcomes[index] = Outcome(entry, "failed", error=error, worker=slot.name)
    slot.jobs = {}


def outcome_from(entry: Entry, result: dict[str, Any], worker: str) -> Outcome:
    """The Outcome of an entry from what its worker reported."""
    return Outcome(
        entry,
        result.get("status", "failed"),
        result.get("config"),
        int(result.get("trials", 0)),
        int(result.get("failed_trials", 0)),
        result.get("best_ms"),
        result.get("error", ""),
        worker,
        result.get("phases", {}),
    )


def tune_manifest(
    manifest: Manifest | Sequence[Entry],
    options: TuneOptions | None = None,
    *,
    workers: int | None = None,
    cpu: bool | None = None,
    client: Any = None,
    progress: bool = True,
    on_update: Callable[[RunState], None] | None = None,
) -> list[Outcome]:
    """Tune every entry of `manifest`: over local GPUs (one worker each), over `workers`
    CPU processes under Triton's interpreter where there is none, or over a Dask cluster
    when `client` (a `distributed.Client`) is given. Every trial lands in this machine's
    tuning database (`options.cache_dir`, default TILECRAFT_CACHE_DIR)."""
    options = dataclasses.replace(options or TuneOptions())
    options.cache_dir = str(options.cache_dir or Settings().cache_dir)
    entries = list(manifest)
    if not entries:
        raise ManifestError("the manifest has no entries: record a model that calls kernels")
    from tilecraft.autotune.fleetview import FleetView

    with FleetView(len(entries), enabled=progress) as view:

        def update(state: RunState) -> None:
            view.update(state, options.cache_dir)
            if on_update is not None:
                on_update(state)

        if client is not None:
            from tilecraft.autotune.cluster import run_cluster

            known = already_tuned(entries, options, None)
            return run_cluster(entries, options, client, update, known)
        slots = local_slots(workers, cpu)
        if not slots:
            raise ManifestError("no GPU to tune on: tune under the interpreter with --cpu")
        if options.compile_workers is None:
            options.compile_workers = compile_workers(slots)
        if options.concurrent is None:
            options.concurrent = 1 if slots[0].name.startswith("cpu") else 2
        known = already_tuned(entries, options, _local_hardware(slots))
        return run_local(entries, options, slots, update, known)


def already_tuned(
    entries: Sequence[Entry], options: TuneOptions, hardware: str | None
) -> dict[int, Outcome]:
    """Entries whose winner is stored for these versions (and `hardware`, unless None): a
    resumed run skips them without starting a worker. Workers check again themselves."""
    if options.retune:
        return {}
    from tilecraft.autotune.db import DB_NAME, TuningDB
    from tilecraft.runtime.cache import usable_dir

    current = versions()
    known = {}
    with TuningDB(usable_dir(options.cache_dir or Settings().cache_dir) / DB_NAME) as db:
        for i, entry in enumerate(entries):
            rows = db.best_rows(kernel=entry.fingerprint, spec_key=entry.spec_key)
            fits = [
                r for r in rows if r["versions"] == current and hardware in (None, r["hardware"])
            ]
            if fits:
                known[i] = Outcome(entry, "skipped", fits[0]["config"], worker="-")
    return known


def _local_hardware(slots: list[Slot]) -> str:
    """The device name the slots' workers key their trials by (`tune.hardware`)."""
    import torch

    if not slots or slots[0].name.startswith("cpu"):
        return "cpu"
    return torch.cuda.get_device_name(0)


def compile_workers(slots: list[Slot]) -> int:
    """Benchmark subprocesses per tuning worker: the CPU cores shared among GPU workers;
    none under the interpreter, whose workers are themselves one per core."""
    if any(s.name.startswith("cpu") for s in slots):
        return 0
    return max(1, ((os.cpu_count() or 2) - 1) // max(1, len(slots)))


def serve(stdin: IO[str], protocol: IO[str]) -> None:
    """A worker's loop: one JSON job a line in (tuned in a thread of its own, as many at
    once as the options say), one JSON outcome a line out, naming the job's index."""
    lock = threading.Lock()
    started = False

    def tune(job: dict[str, Any], options: TuneOptions) -> None:
        result = safe_tune_entry(Entry.from_dict(job["entry"]), options)
        with lock:
            protocol.write(json.dumps({**result, "index": job.get("index")}) + "\n")
            protocol.flush()

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="tilecraft-entry") as pool:
        for line in stdin:
            job = json.loads(line)
            options = TuneOptions(**job["options"])
            if not started:
                started = True
                warm_start(Entry.from_dict(job["entry"]), options)
            pool.submit(tune, job, options)


def warm_start(entry: Entry, options: TuneOptions) -> None:
    """Start the benchmark workers of every entry this worker will tune at once, now,
    while the first entry is being set up; they stay for the whole run."""
    from tilecraft.autotune import workers

    concurrent = at_once(options)
    workers.keep_warm(concurrent, entry_timeout(options))
    size = options.compile_workers or 0
    if options.max_configs:
        size = min(size, options.max_configs)
    if size <= 0 or _device(entry) != "cuda":
        return
    timeout = Settings().autotune_timeout_s
    pools = [workers.acquire(size, timeout, device="cuda:0") for _ in range(concurrent)]
    for pool in pools:
        workers.give_back(pool)


def main() -> None:
    """Worker entry point: answers on the original stdout; anything else printed (by a
    user's module, by Triton) goes to stderr so it cannot garble the protocol."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    serve(sys.stdin, protocol)


if __name__ == "__main__":
    main()
