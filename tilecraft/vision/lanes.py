"""A lane: batches of decoded frames through a pipeline on one CUDA stream (or the CPU).

On a GPU each lane owns a CUDA stream, a pool of device buffers (`BufferPool`) and a pool
of pinned host buffers. `submit` stages a batch into pinned memory, copies it to the device
(asynchronously), runs the pipeline and copies the result back into pinned memory, all
queued on the lane's stream, then returns: the host goes on decoding the next batch while
the GPU works, and other lanes' streams overlap their copies with this one's kernels.
Pinned buffers are double-buffered: one is being filled while the previous one's copy
runs (an event says when it may be refilled). `results` hands back finished batches in
order. On the CPU the same calls run the pipeline at once, through Triton's interpreter.

A submitted batch may be several sources' frames at once (`submit([a, b])`): they are
processed as one batch and handed back apart, when batching beats one launch per source.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from tilecraft.vision import color
from tilecraft.vision.memory import BufferPool
from tilecraft.vision.pipeline import Pipeline
from tilecraft.vision.video_io import Frames

PipelineFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Interval:
    """A span of one lane's work, in milliseconds from the clock's start."""

    lane: str
    phase: str  # "h2d", "kernels", "d2h" (or "cpu" on the CPU)
    start_ms: float
    end_ms: float


class Clock:
    """Records each lane's copy and kernel spans: CUDA events on a GPU (read once the work
    is done, so recording costs no synchronization), the wall clock on the CPU."""

    def __init__(self, device: torch.device, enabled: bool = True) -> None:
        self.enabled, self.cuda = enabled, device.type == "cuda"
        self._marks: list[tuple[str, str, object, object]] = []
        self._base: object = None
        if enabled:
            self._base = self._now(None)

    def _now(self, stream: torch.cuda.Stream | None) -> object:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    @contextlib.contextmanager
    def phase(self, lane: str, phase: str, stream: torch.cuda.Stream | None) -> Iterator[None]:
        """Time what is queued (GPU) or run (CPU) inside as `phase` of `lane`."""
        if not self.enabled:
            yield
            return
        start = self._now(stream)
        yield
        self._marks.append((lane, phase, start, self._now(stream)))

    def intervals(self) -> list[Interval]:
        """Every span recorded (waits for the GPU to finish them)."""
        if self.cuda and self._marks:
            torch.cuda.synchronize()
        return [
            Interval(lane, phase, self._ms(a), self._ms(b)) for lane, phase, a, b in self._marks
        ]

    def _ms(self, mark: object) -> float:
        if self.cuda:
            return float(self._base.elapsed_time(mark))  # type: ignore[attr-defined]
        return (mark - self._base) * 1e3  # type: ignore[operator]


def frames_to_rgb(data: torch.Tensor, fmt: str, height: int, width: int) -> torch.Tensor:
    """A batch in a `Frames` layout as (N, H, W, 3) RGB, by the color kernels for YUV."""
    if fmt == "rgb":
        return data
    n, pixels = data.shape[0], height * width
    y = data[:, :pixels].view(n, height, width)
    if fmt == "nv12":
        uv = data[:, pixels:].view(n, height // 2, width // 2, 2)
        return color.nv12_to_rgb(y, uv, "NHWC")
    u = data[:, pixels : pixels + pixels // 4].view(n, height // 2, width // 2)
    v = data[:, pixels + pixels // 4 :].view(n, height // 2, width // 2)
    return color.i420_to_rgb(y, u, v, "NHWC")


def run_pipeline(pipeline: Pipeline | PipelineFn, data: torch.Tensor, frames: Frames):
    """`pipeline` on a device batch of `frames`' layout: NV12 goes to `Pipeline.from_nv12`
    (which fuses the conversion into a leading resize + normalize), the rest as RGB."""
    h, w = frames.height, frames.width
    if frames.format == "nv12" and isinstance(pipeline, Pipeline):
        n, pixels = data.shape[0], h * w
        uv = data[:, pixels:].view(n, h // 2, w // 2, 2)
        return pipeline.from_nv12(data[:, :pixels].view(n, h, w), uv)
    rgb = frames_to_rgb(data, frames.format, h, w)
    if isinstance(pipeline, Pipeline) and pipeline.layout == "NCHW":
        rgb = rgb.permute(0, 3, 1, 2)
    return pipeline(rgb)


@dataclass
class _Pending:
    """A submitted batch: its result (host or device), when it is done, how to split it."""

    result: torch.Tensor
    done: torch.cuda.Event | None
    counts: list[int]
    lease: torch.Tensor | None = None  # the pooled buffer the result lies in
    pool: BufferPool | None = None


def _item_shape(frames: Frames) -> tuple[int, ...]:
    return frames.shape()[1:]


def _pinned_tensor(data: torch.Tensor | list[np.ndarray]) -> bool:
    return isinstance(data, torch.Tensor) and not data.is_cuda and data.is_pinned()


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@dataclass
class Lane:
    """One stream of frames through `pipeline` on `device`; see the module's docstring.
    `to_host`: hand results back in (pinned) host memory, for an encoder; else on the
    device, for a model. `depth`: batches staged at once (2: double buffering)."""

    pipeline: Pipeline | PipelineFn
    device: torch.device
    name: str = "0"
    to_host: bool = True
    clock: Clock | None = None
    depth: int = 2
    stream: torch.cuda.Stream | None = field(init=False)
    pool: BufferPool = field(init=False)
    host: BufferPool = field(init=False)

    def __post_init__(self) -> None:
        self.device = torch.device(self.device)
        cuda = self.device.type == "cuda"
        self.stream = torch.cuda.Stream(self.device) if cuda else None
        self.pool = BufferPool(self.device)
        self.host = BufferPool("cpu", pin_memory=cuda)
        self.clock = self.clock or Clock(self.device, enabled=False)
        self._staged: deque[tuple[torch.cuda.Event, torch.Tensor]] = deque()
        self._pending: deque[_Pending] = deque()
        self._handed: list[_Pending] = []  # batches the caller may still be reading

    @property
    def in_flight(self) -> int:
        """Batches submitted and not yet handed back."""
        return len(self._pending)

    def submit(self, parts: Frames | Sequence[Frames]) -> None:
        """Queue one batch (or several sources' batches, processed together)."""
        parts = [parts] if isinstance(parts, Frames) else list(parts)
        self._recycle_handed()
        if self.stream is None:
            return self._run_on_cpu(parts)
        with torch.cuda.stream(self.stream):
            data, owned = self._to_device(parts)
            assert self.clock is not None
            with self.clock.phase(self.name, "kernels", self.stream), self.pool.frame():
                result = run_pipeline(self.pipeline, data, parts[0])
                lease = self.pool.keep(result)
            if owned and _same_storage(result, data):
                lease = data  # a pipeline that returned its input
            elif owned:
                self.pool.give(data)  # reused only by work queued after this batch's
            self._finish(result, lease, [len(p) for p in parts])
        return None

    def _run_on_cpu(self, parts: list[Frames]) -> None:
        assert self.clock is not None
        with self.clock.phase(self.name, "cpu", None), self.pool.frame():
            first = parts[0].data
            if len(parts) == 1 and isinstance(first, torch.Tensor):
                data = first
            else:
                data = self._gather(parts, self.pool)
            result = run_pipeline(self.pipeline, data, parts[0])
            lease = self.pool.keep(result)
        counts = [len(p) for p in parts]
        self._pending.append(_Pending(result, None, counts, lease, self.pool))

    def _gather(self, parts: list[Frames], pool: BufferPool) -> torch.Tensor:
        """Several sources' host batches in one buffer of `pool` (lent to the frame)."""
        total = sum(len(p) for p in parts)
        batch = pool.lend((total, *_item_shape(parts[0])), torch.uint8)
        self._fill(batch, parts)
        return batch

    @staticmethod
    def _fill(buffer: torch.Tensor, parts: list[Frames]) -> None:
        offset, view = 0, buffer.numpy()
        for part in parts:
            if isinstance(part.data, torch.Tensor):
                buffer[offset : offset + len(part)].copy_(part.data)
            else:
                for i, array in enumerate(part.data):
                    np.copyto(view[offset + i], array.reshape(view.shape[1:]))
            offset += len(part)

    def _to_device(self, parts: list[Frames]) -> tuple[torch.Tensor, bool]:
        """The batch on the device, and whether it is the pool's: staged through pinned
        memory and copied asynchronously."""
        assert self.clock is not None and self.stream is not None
        first = parts[0].data
        if len(parts) == 1 and isinstance(first, torch.Tensor) and first.is_cuda:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            return first, False  # a GPU decoder's frames: already there
        total = sum(len(p) for p in parts)
        shape = (total, *_item_shape(parts[0]))
        if len(parts) > 1 and all(_pinned_tensor(p.data) for p in parts):
            return self._copy_parts(parts, shape), True
        pinned = self._pinned(parts, shape)
        with self.clock.phase(self.name, "h2d", self.stream):
            data = self.pool.take(shape, torch.uint8)
            data.copy_(pinned, non_blocking=True)
        if pinned is not first:  # our staging buffer: refill it once the copy has run
            copied = torch.cuda.Event()
            copied.record(self.stream)
            self._staged.append((copied, pinned))
        return data, True

    def _copy_parts(self, parts: list[Frames], shape: tuple[int, ...]) -> torch.Tensor:
        """Sources that staged their frames in pinned memory: each part copied into its
        slice of the device batch, with no copy on the host."""
        assert self.clock is not None and self.stream is not None
        with self.clock.phase(self.name, "h2d", self.stream):
            data, offset = self.pool.take(shape, torch.uint8), 0
            for part in parts:
                assert isinstance(part.data, torch.Tensor)
                data[offset : offset + len(part)].copy_(part.data, non_blocking=True)
                offset += len(part)
        return data

    def _pinned(self, parts: list[Frames], shape: tuple[int, ...]) -> torch.Tensor:
        first = parts[0].data
        if len(parts) == 1 and _pinned_tensor(first):
            assert isinstance(first, torch.Tensor)
            return first  # the source staged it already
        while len(self._staged) >= self.depth or (self._staged and self._staged[0][0].query()):
            copied, buffer = self._staged.popleft()
            copied.synchronize()
            self.host.give(buffer)
        pinned = self.host.take(shape, torch.uint8)
        self._fill(pinned, parts)
        return pinned

    def _finish(self, result: torch.Tensor, lease: torch.Tensor | None, counts: list[int]):
        assert self.clock is not None and self.stream is not None
        if self.to_host:
            with self.clock.phase(self.name, "d2h", self.stream):
                host = self.host.take(result.shape, result.dtype)
                host.copy_(result, non_blocking=True)
            if lease is not None:
                self.pool.give(lease)
            result, lease, pool = host, host, self.host
        else:
            pool = self.pool
        done = torch.cuda.Event()
        done.record(self.stream)
        self._pending.append(_Pending(result, done, counts, lease, pool))

    def results(self, keep: int = 0) -> Iterator[list[torch.Tensor]]:
        """Finished batches, oldest first, waiting for them until at most `keep` are left in
        flight; each as one tensor per part submitted. A batch is valid until the lane is
        asked for more (the next batch, or a `submit`): its buffer then goes back to the
        pool. Copy what you keep."""
        while len(self._pending) > keep:
            self._recycle_handed()
            pending = self._pending.popleft()
            if pending.done is not None:
                if self.to_host:
                    pending.done.synchronize()
                else:  # the caller's stream reads it next
                    reader = torch.cuda.current_stream(self.device)
                    reader.wait_event(pending.done)
                    if pending.lease is None:  # PyTorch's allocator's, not the pool's
                        pending.result.record_stream(reader)
            self._handed.append(pending)
            yield _split(pending.result, pending.counts)

    def _recycle_handed(self) -> None:
        while self._handed:
            self._recycle(self._handed.pop())

    def _recycle(self, pending: _Pending) -> None:
        if pending.lease is None or pending.pool is None:
            return
        if self.stream is not None and not self.to_host:
            # the caller's kernels that read it were queued on its stream before this
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
        pending.pool.give(pending.lease)


def _split(result: torch.Tensor, counts: list[int]) -> list[torch.Tensor]:
    if len(counts) == 1:
        return [result]
    return list(torch.split(result, counts))
