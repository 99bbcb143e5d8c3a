"""An isolated benchmarking process: reads jobs as JSON lines on stdin, answers on stdout.

Started by a `WorkerPool` as `python -m tilecraft.autotune.worker [--interpret] [--device
D]`: it imports PyTorch and Triton (and creates its CUDA context on `D`), says it is ready,
then runs jobs. A job names the files holding the arguments and the reference outputs;
they are loaded at the first job that names them and kept for the next ones, so one
process serves tuning run after tuning run. A `{"release": true}` line drops them (the
run ended). A candidate that crashes or hangs takes down only this process, which the
pool restarts; so does one that leaves the process unable to compute (a GPU's sticky
error, such as a misaligned address, fails every later call of the process): the worker
then answers with `"exiting": true` and exits.

The process exits when its parent does (stdin closes, or it is orphaned) and after
`--idle-s` seconds without a job.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

IDLE_S = 60.0  # seconds without a job after which a worker exits


class State:
    """What a worker holds between jobs: the loaded data and since when it is idle."""

    def __init__(self) -> None:
        self.paths: tuple[str, str] | None = None
        self.args: tuple = ()
        self.expected: list[Any] | None = None  # loaded when a first check needs it
        self.idle_since: float | None = None  # None while starting up or running a job

    def load(self, job: dict) -> float:
        """Load the job's arguments unless held; the seconds it took."""
        paths = (job["args"], job["ref"])
        if paths == self.paths:
            return 0.0
        import torch

        start = time.perf_counter()
        self.release()
        self.args = torch.load(paths[0], weights_only=False)
        self.paths = paths
        return time.perf_counter() - start

    def reference(self) -> list[Any]:
        """The reference outputs, waited for (the parent may still be computing them)."""
        from tilecraft.autotune.reference import wait_for

        if self.expected is None:
            assert self.paths is not None
            self.expected = wait_for(self.paths[1])
        return self.expected

    def release(self) -> None:
        """Drop the loaded data (and the GPU memory it held)."""
        self.paths, self.args, self.expected = None, (), None
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def watch(state: State, parent: int, idle_s: float) -> None:
    """Exit once orphaned (the parent died without closing stdin) or idle too long."""
    while True:
        time.sleep(0.5)
        idle = state.idle_since
        if os.getppid() != parent or (idle is not None and time.monotonic() - idle > idle_s):
            os._exit(0)


def start_up(options: argparse.Namespace) -> None:
    """Everything a first job would otherwise wait for: imports, the CUDA context."""
    if options.interpret:  # before Triton is imported: it decides then
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    import tilecraft.autotune.runner  # noqa: F401

    if options.device:
        torch.empty(1, device=options.device)  # creates the CUDA context
        warm_triton_driver()


def warm_triton_driver() -> None:
    """Load Triton's GPU driver glue and its benchmarking module now, not at the first
    compile; a Triton whose API differs only loses this head start."""
    try:
        import triton.testing  # noqa: F401
        from triton.runtime import driver

        driver.active.get_current_device()
    except Exception:  # noqa: BLE001 - an optimization, never a failure
        pass


def answer(state: State, message: dict, notify: Any = None) -> dict | None:
    """The reply to one message (None for a release, which has none); `notify` sends a
    message before it (that the job waits for the GPU)."""
    from tilecraft.autotune.runner import run_job

    if message.get("release"):
        state.release()
        return None
    try:
        load_s = state.load(message)
    except Exception as e:  # noqa: BLE001 - a lost file fails this job, not the process
        return {"status": "runtime_error", "error": f"cannot load the arguments: {e}"}
    result = run_job(message, state.args, state.reference, notify)
    return {**result, "load_s": load_s} if load_s else result


def usable(device: str) -> bool:
    """Whether this process can still compute on `device` ("" for the CPU): after a sticky
    CUDA error (a misaligned or illegal address) every call fails, this one too."""
    import torch

    try:
        return torch.ones(1, device=device or "cpu").add_(1).item() == 2.0  # synchronizes
    except Exception:  # noqa: BLE001 - any failure means the same
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interpret", action="store_true")
    parser.add_argument("--device", default="")
    parser.add_argument("--idle-s", type=float, default=IDLE_S)
    options = parser.parse_args()
    state = State()
    threading.Thread(target=watch, args=(state, os.getppid(), options.idle_s), daemon=True).start()
    # the protocol gets its own descriptor; prints (Python's or native code's) go to stderr
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    start_up(options)

    def send(message: dict) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    send({"ready": True, "at": time.monotonic()})
    state.idle_since = time.monotonic()
    for line in sys.stdin:
        state.idle_since = None
        reply = answer(state, json.loads(line), send)
        lost = reply is not None and reply.get("status") != "ok" and not usable(options.device)
        if reply is not None:
            send({**reply, "exiting": True} if lost else reply)
        if lost:  # every later job would fail here: the pool starts a fresh process
            os._exit(5)
        state.idle_since = time.monotonic()


if __name__ == "__main__":
    main()
