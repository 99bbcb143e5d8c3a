"""Energy per kernel call: meters, and the time/energy Pareto front of a tuning run.

A meter reads a device's cumulative energy counter. On NVIDIA GPUs it is NVML's
(`nvidia-ml-py`, `pip install tilecraft[energy]`), in millijoules since the driver
loaded; it updates only every 20-100 ms, so one call is never measured alone: the kernel
is launched again and again for a window of at least `WINDOW_S`, from one update of the
counter to another, and the counter's difference is divided by the calls made.
`SimulatedMeter` stands in for tests and CPU runs: a power drawn as a function of the
config, so the config that uses least energy is not the fastest one.

Example::

    meter = default_meter(args)  # None without NVML or a GPU
    joules = meter.per_call(lambda: kernel(*args), torch.cuda.synchronize, config, 0.05)
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from tilecraft.autotune.trial import OBJECTIVES, Trial
from tilecraft.exc import SettingsError
from tilecraft.runtime.config import Config
from tilecraft.runtime.cpu import tensors_in

WINDOW_S = 0.2  # the shortest window measured: several updates of NVML's counter
EDGE_WAIT_S = 0.15  # how long to wait for the counter to move (it updates every <= 100 ms)
BATCH_S = 0.002  # launches between synchronizations: short against the window


class EnergyMeter:
    """A device's energy counter and the energy of one call of a kernel measured on it."""

    kind = "base"

    def counter_j(self) -> float:
        """The device's cumulative energy in joules (from an arbitrary origin)."""
        raise NotImplementedError

    def per_call(
        self, run: Callable[[], Any], sync: Callable[[], None], config: Config, time_ms: float
    ) -> float | None:
        """Joules one call of `run` (the kernel at `config`, about `time_ms` long) uses."""
        return windowed_per_call(run, sync, self.counter_j, time_ms)

    def to_job(self) -> dict[str, Any]:
        """What a benchmark worker process rebuilds this meter from (`meter_from_job`)."""
        return {"kind": self.kind, **asdict(self)}  # type: ignore[call-overload]


def windowed_per_call(
    run: Callable[[], Any],
    sync: Callable[[], None],
    counter: Callable[[], float],
    time_ms: float,
    window_s: float = WINDOW_S,
) -> float | None:
    """Energy per call from `counter`'s difference between two of its updates at least
    `window_s` apart, calling `run` all the while; None if the counter never moved."""
    batch = max(1, min(100_000, math.ceil(BATCH_S * 1e3 / max(time_ms, 1e-6))))

    def launch() -> None:
        for _ in range(batch):
            run()
        sync()

    launch()  # warm: clocks up, caches filled
    start_j, _ = _await_update(launch, counter)
    if start_j is None:
        return None
    calls, began = 0, time.perf_counter()
    while time.perf_counter() - began < window_s:
        launch()
        calls += batch
    end_j, batches = _await_update(launch, counter)
    calls += batches * batch
    if end_j is None or end_j <= start_j:
        return None
    return (end_j - start_j) / calls


def _await_update(
    launch: Callable[[], None], counter: Callable[[], float]
) -> tuple[float | None, int]:
    """Launch batches until the counter changes (its next update): the new reading (None
    if it never moved) and how many batches ran meanwhile. The GPU stays busy while
    waiting, so the window ends, as it began, right after an update."""
    first, batches, began = counter(), 0, time.perf_counter()
    while time.perf_counter() - began < EDGE_WAIT_S:
        launch()
        batches += 1
        now = counter()
        if now != first:
            return now, batches
    return None, batches


_NVML_READY = False


def _nvml() -> Any:
    """The pynvml module, initialized once per process; ImportError or pynvml.NVMLError
    when NVML is not installed or finds no driver."""
    global _NVML_READY
    import pynvml

    if not _NVML_READY:
        pynvml.nvmlInit()
        _NVML_READY = True
    return pynvml


@dataclass
class NvmlMeter(EnergyMeter):
    """NVML's energy counter of one NVIDIA GPU, found by its UUID (else its index)."""

    uuid: str | None = None
    index: int = 0
    kind = "nvml"

    def counter_j(self) -> float:
        return _nvml().nvmlDeviceGetTotalEnergyConsumption(_handle(self.uuid, self.index)) / 1e3


@functools.cache
def _handle(uuid: str | None, index: int) -> Any:
    """NVML's handle of a GPU (looked up once: counters are read many times a second)."""
    nvml = _nvml()
    if uuid:
        return nvml.nvmlDeviceGetHandleByUUID(uuid)
    return nvml.nvmlDeviceGetHandleByIndex(index)


@dataclass
class SimulatedMeter(EnergyMeter):
    """A GPU that draws `base_w + warp_w * num_warps + stage_w * num_stages` watts while a
    kernel runs and `idle_w` otherwise: more warps may run faster yet cost more energy.
    Energy per call is that power times the call's time (`fixed_ms` instead, when given,
    for results that do not depend on noisy CPU timings)."""

    base_w: float = 100.0
    warp_w: float = 40.0
    stage_w: float = 10.0
    idle_w: float = 50.0
    fixed_ms: float | None = None
    kind = "simulated"

    def watts(self, config: Config) -> float:
        """The power drawn while `config` runs."""
        warps, stages = config.get("num_warps") or 4, config.get("num_stages") or 1
        return self.base_w + self.warp_w * warps + self.stage_w * stages

    def per_call(
        self, run: Callable[[], Any], sync: Callable[[], None], config: Config, time_ms: float
    ) -> float | None:
        ms = self.fixed_ms if self.fixed_ms is not None else time_ms
        return self.watts(config) * ms / 1e3

    def counter_j(self) -> float:
        return self.idle_w * time.monotonic()


METERS: dict[str, type[EnergyMeter]] = {"nvml": NvmlMeter, "simulated": SimulatedMeter}


def meter_from_job(spec: dict[str, Any]) -> EnergyMeter:
    """The meter `EnergyMeter.to_job` described."""
    fields = {k: v for k, v in spec.items() if k != "kind"}
    return METERS[spec["kind"]](**fields)


def default_meter(args: Sequence[Any]) -> EnergyMeter | None:
    """NVML's meter of the GPU the arguments live on; None on a CPU, without
    `nvidia-ml-py`, or where the driver does not report energy."""
    device = next((t.device for t in tensors_in(args) if t.is_cuda), None)
    if device is None:
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    meter = NvmlMeter(uuid=f"GPU-{uuid}" if uuid else None, index=index)
    try:
        meter.counter_j()
    except Exception:  # noqa: BLE001 - no NVML, no driver, a GPU without the counter
        try:  # a UUID torch spells differently: NVML's index (right without
            meter = NvmlMeter(index=index)  # CUDA_VISIBLE_DEVICES reordering)
            meter.counter_j()
        except Exception:  # noqa: BLE001
            return None
    return meter


class EnergyUse:
    """The energy a device used from this object's creation to `joules()` (None without a
    meter or where its counter cannot be read): what a tuning run itself costs."""

    def __init__(self, meter: EnergyMeter | None) -> None:
        self.meter = meter
        self.start = self._read()

    def _read(self) -> float | None:
        if self.meter is None:
            return None
        try:
            return self.meter.counter_j()
        except Exception:  # noqa: BLE001 - an NVML error must not stop the tuning
            return None

    def joules(self) -> float | None:
        end = self._read()
        return None if end is None or self.start is None else end - self.start


def check_objective(objective: str) -> None:
    """Raise SettingsError unless `objective` names one of OBJECTIVES."""
    if objective not in OBJECTIVES:
        raise SettingsError(
            f"objective {objective!r} (TILECRAFT_AUTOTUNE_OBJECTIVE) is not valid: expected"
            f" one of {', '.join(OBJECTIVES)}"
        )


def require_meter(objective: str, meter: EnergyMeter | None) -> None:
    """Raise SettingsError when `objective` needs energy and there is no meter to give it."""
    if objective != "time" and meter is None:
        raise SettingsError(
            f"objective {objective!r} needs the energy of each call, measured through NVML on"
            " an NVIDIA GPU: install nvidia-ml-py (pip install 'tilecraft[energy]'), run on"
            " the GPU, or tune for objective='time'"
        )


def pareto_front(trials: Sequence[Trial]) -> list[Trial]:
    """The ok trials with an energy that no other trial beats in both time and energy
    (at least as fast and as frugal, better in one), fastest first."""
    measured = [t for t in trials if t.ok and t.energy_j is not None]
    front = [t for t in measured if not any(_dominates(o, t) for o in measured)]
    return sorted(front, key=lambda t: (t.time_ms or 0.0, t.energy_j or 0.0))


def _dominates(a: Trial, b: Trial) -> bool:
    ta, tb, ea, eb = a.time_ms or 0.0, b.time_ms or 0.0, a.energy_j or 0.0, b.energy_j or 0.0
    return ta <= tb and ea <= eb and (ta < tb or ea < eb)
