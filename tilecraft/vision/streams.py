"""Several videos (or camera feeds) at once, each on its own CUDA stream.

    results = process_many(["a.mp4", "b.mp4", "c.mp4", "d.mp4"], "resize=640x360,gray")
    for index, batch in results:         # batches of each source, in each one's order
        ...
    results.stats(), results.timeline()

Every source gets a `Lane`: its CUDA stream, pinned double-buffered host buffers and a
buffer pool, so one source's host-to-device copy overlaps another's kernels and a third's
device-to-host copy. `combine=True` batches the frames of all sources into one launch per
round instead (same frame size and format), which is faster when the frames are small
and launches dominate; `combine="auto"` times both on the first rounds and keeps the
faster. On the CPU the same calls run one source after another.
`timeline()` gives each lane's copy and kernel spans; `plot_timeline` draws them and
`trace` records a PyTorch profiler trace (Chrome's trace format) of the same run.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tilecraft.vision.lanes import Clock, Interval, Lane
from tilecraft.vision.video import Ops, default_device, pipeline_of, say_slow_once
from tilecraft.vision.video_io import Frames, Source, open_video


@dataclass
class StreamStats:
    """One source's numbers: frames, and its lane's device memory."""

    frames: int
    pool_allocations: int
    pool_bytes: int  # the lane's buffers: its peak device memory once warm


class ManyRun:
    """Sources through one pipeline concurrently; iterate for (source index, batch).
    `combined`: whether the sources' frames are batched together (None while undecided)."""

    TRIAL_ROUNDS = 4  # with combine="auto": apart, together (warm-ups), apart, together (timed)

    def __init__(
        self,
        sources: Sequence[Source],
        ops: Ops,
        device: torch.device,
        batch: int,
        combine: bool | str,
        to_host: bool,
        timeline: bool,
    ) -> None:
        if combine not in (True, False, "auto"):
            raise ValueError(f"combine is True, False or 'auto', not {combine!r}")
        self.sources, self.device, self.batch = list(sources), device, batch
        self.clock = Clock(device, enabled=timeline)
        pipeline = pipeline_of(ops)
        apart = range(len(self.sources)) if combine is not True else range(0)
        self.separate = [Lane(pipeline, device, str(i), to_host, self.clock) for i in apart]
        self.joint = Lane(pipeline, device, "all", to_host, self.clock) if combine else None
        self.lanes = self.separate + ([self.joint] if self.joint else [])
        self.combined: bool | None = combine if isinstance(combine, bool) else None
        self.trial_s: dict[bool, float] = {}  # combine="auto": seconds per frame each way
        # which sources each submitted batch holds, per lane, in order
        self._owners: dict[str, deque[list[int]]] = {lane.name: deque() for lane in self.lanes}
        self.frames = [0] * len(self.sources)
        self.seconds = 0.0
        self.notice = say_slow_once(device)

    def __iter__(self) -> Iterator[tuple[int, torch.Tensor]]:
        start = time.perf_counter()
        feeds = [source.batches(self.batch) for source in self.sources]
        live, rounds = list(range(len(feeds))), 0
        # on a GPU keep one batch per lane in flight while the host stages the next
        keep = 1 if self.device.type == "cuda" else 0
        try:
            while live:
                round_ = [(i, f) for i in live if (f := next(feeds[i], None)) is not None]
                live = [i for i, _ in round_]
                if self.combined is None and round_:
                    yield from self._trial(round_, rounds)
                else:
                    self._submit(round_, bool(self.combined))
                    yield from self._drain(keep)
                rounds += 1
            yield from self._drain(0)
        finally:
            self.seconds += time.perf_counter() - start

    def _trial(self, round_: list[tuple[int, Frames]], rounds: int) -> Iterator:
        """One round of combine="auto": apart or together in turn, each drained before the
        next (so batches stay in order); from the third on timed, then the faster chosen."""
        together = rounds % 2 == 1
        start = time.perf_counter()
        self._submit(round_, together)
        seconds = time.perf_counter() - start
        seconds += yield from _timed(self._drain(0))
        if rounds >= 2:
            self.trial_s[together] = seconds / sum(len(f) for _, f in round_)
        if rounds + 1 >= self.TRIAL_ROUNDS and len(self.trial_s) == 2:
            self.combined = self.trial_s[True] < self.trial_s[False]

    def _submit(self, round_: list[tuple[int, Frames]], together: bool) -> None:
        if not together:
            for i, frames in round_:
                self.separate[i].submit(frames)
                self._owners[str(i)].append([i])
            return
        assert self.joint is not None
        # one launch for every source's batch; frames of another size go apart
        groups: dict[tuple, list[tuple[int, Frames]]] = {}
        for i, frames in round_:
            groups.setdefault((frames.format, frames.shape()[1:]), []).append((i, frames))
        for group in groups.values():
            self.joint.submit([frames for _, frames in group])
            self._owners[self.joint.name].append([i for i, _ in group])

    def _drain(self, keep: int) -> Iterator[tuple[int, torch.Tensor]]:
        for lane in self.lanes:
            for parts in lane.results(keep):
                owners = self._owners[lane.name].popleft()
                for i, result in zip(owners, parts, strict=True):
                    self.frames[i] += len(result)
                    yield i, result

    def _lane_of(self, source: int) -> Lane:
        """The lane a source's frames go through (the joint one once combined)."""
        if self.joint is not None and (self.combined or not self.separate):
            return self.joint
        return self.separate[source]

    def stats(self) -> list[StreamStats]:
        """Per source: frames processed, and the pool of its lane (shared when combined)."""
        lanes = [self._lane_of(i) for i in range(len(self.sources))]
        return [
            StreamStats(frames, lane.pool.allocations, lane.pool.bytes)
            for frames, lane in zip(self.frames, lanes, strict=True)
        ]

    def timeline(self) -> list[Interval]:
        """Each lane's copy and kernel spans (with `timeline=True`)."""
        return self.clock.intervals()


def _timed(items: Iterator[tuple[int, torch.Tensor]]) -> Generator[Any, None, float]:
    """Yield `items`; return the seconds spent producing them (not the caller's time)."""
    spent, start = 0.0, time.perf_counter()
    for item in items:
        spent += time.perf_counter() - start
        yield item
        start = time.perf_counter()
    return spent + time.perf_counter() - start


def process_many(
    sources: Sequence[str | Path | Source],
    ops: Ops,
    *,
    batch: int = 8,
    device: torch.device | str | None = None,
    combine: bool | str = False,
    to_host: bool = True,
    timeline: bool = False,
    decoder: str = "auto",
) -> ManyRun:
    """Process every source (video files or `Source`s) through `ops` at once, each on its
    own CUDA stream (one after another on the CPU). `combine=True` batches the sources'
    frames together, "auto" times both ways on the first rounds and keeps the faster
    (`run.combined` says which). `to_host` hands results back in host memory (for encoders)
    rather than on the device (for a model); `timeline` records copy and kernel spans.
    Iterate the result."""
    chosen = torch.device(device) if device is not None else default_device()
    opened = [open_video(s, chosen, decoder) if isinstance(s, (str, Path)) else s for s in sources]
    return ManyRun(opened, ops, chosen, batch, combine, to_host or chosen.type == "cpu", timeline)


def plot_timeline(intervals: Sequence[Interval], path: str | Path, title: str = "") -> Path:
    """Draw each lane's spans (one row per lane and phase) into a picture at `path`."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone

    colors = {"h2d": "tab:blue", "kernels": "tab:green", "d2h": "tab:orange", "cpu": "tab:gray"}
    order = ["h2d", "kernels", "d2h", "cpu"]  # a batch's path, top to bottom
    rows = sorted(
        {(i.lane, i.phase) for i in intervals}, key=lambda r: (len(r[0]), r[0], order.index(r[1]))
    )
    fig = Figure(figsize=(10, 0.35 * len(rows) + 1.2))
    ax = fig.subplots()
    ax.invert_yaxis()
    for y, (lane, phase) in enumerate(rows):
        spans = [
            (i.start_ms, i.end_ms - i.start_ms)
            for i in intervals
            if (i.lane, i.phase) == (lane, phase)
        ]
        ax.broken_barh(spans, (y - 0.4, 0.8), color=colors.get(phase, "tab:purple"))
    ax.set_yticks(range(len(rows)), [f"stream {lane} {phase}" for lane, phase in rows])
    ax.set_xlabel("ms")
    ax.set_title(title or "copies and kernels per stream")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return Path(path)


@contextlib.contextmanager
def trace(path: str | Path) -> Iterator[None]:
    """Record the PyTorch profiler's trace of what runs inside (CPU and CUDA activity)
    into `path`, in Chrome's trace format (chrome://tracing, Perfetto)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as profiler:
        yield
    profiler.export_chrome_trace(str(path))
