"""Video through tilecraft's vision kernels: decode, a pipeline on the GPU, encode.

    import tilecraft.vision.video as video

    run = video.process("in.mp4", "resize=640x360,blur=5,gray", out="out.mp4")
    stats = run.run()                      # every frame: decoded, processed, encoded
    print(run.decoder, stats.fps)

    for batch in video.process("in.mp4", "letterbox=640x640,normalize"):
        model(batch)                       # (N, 3, 640, 640) float16 batches on the GPU

`process` returns a `VideoRun`: iterate it for the processed batches (on the device, or on
the host when it writes `out`), or `run()` it to the end with a callback per batch. The
kernels run on the GPU when there is one, else on the CPU through Triton's interpreter:
right answers, slowly, for small frames (it says so once). A corrupt or truncated input or
an unsupported codec raises one `VideoError` after the frames before it are written, and
the output file is closed properly. `tilecraft video IN -o OUT --ops ...` is the command.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tilecraft.exc import VideoError
from tilecraft.vision.lanes import Lane, PipelineFn
from tilecraft.vision.pipeline import Pipeline
from tilecraft.vision.video_io import Encoder, Source, open_video

Ops = str | Pipeline | PipelineFn


def default_device() -> torch.device:
    """The GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pipeline_of(ops: Ops) -> Pipeline | PipelineFn:
    """A pipeline from a spec (`"resize=640x360,gray"`, see `Pipeline.parse`) or as given."""
    return Pipeline.parse(ops) if isinstance(ops, str) else ops


def say_slow_once(device: torch.device) -> str | None:
    """On the CPU, the notice that the kernels are interpreted (None on a GPU). The kernels
    themselves warn once per process (`SlowOnCPU`); the command prints this instead."""
    if device.type != "cpu":
        return None
    return "no GPU: kernels run in Triton's CPU interpreter (slow; for small frames)"


@dataclass
class VideoStats:
    """What a run did: frames, seconds, frames per second, memory."""

    frames: int
    seconds: float
    pool_allocations: int  # device buffers the run's pool created (none in steady state)
    pool_bytes: int  # bytes of device buffers the pool holds: the run's working memory
    peak_bytes: int | None  # torch.cuda.max_memory_allocated on a GPU

    @property
    def fps(self) -> float:
        """Frames per second over the run."""
        return self.frames / self.seconds if self.seconds > 0 else 0.0


class VideoRun:
    """One video through a pipeline; see the module's docstring. Iterating yields each
    processed batch, valid until the next one is asked for (copy what you keep)."""

    def __init__(
        self,
        source: Source,
        pipeline: Pipeline | PipelineFn,
        out: str | Path | None,
        device: torch.device,
        batch: int,
        codec: str | None,
    ) -> None:
        self.source, self.device, self.batch = source, device, batch
        self.decoder = source.describe()
        self.encoder = Encoder(out, source.fps, codec) if out is not None else None
        self.lane = Lane(pipeline, device, to_host=out is not None or device.type == "cpu")
        self.frames = 0
        self.seconds = 0.0
        self._start: float | None = None
        self.notice = say_slow_once(device)

    @property
    def written(self) -> int:
        """Frames encoded into the output file so far."""
        return self.encoder.written if self.encoder else 0

    def elapsed(self) -> float:
        """Seconds spent iterating so far."""
        running = time.perf_counter() - self._start if self._start is not None else 0.0
        return self.seconds + running

    def __iter__(self) -> Iterator[torch.Tensor]:
        start, error = time.perf_counter(), None
        self._start = start
        batches = self.source.batches(self.batch)
        try:
            while True:
                try:
                    frames = next(batches)
                except StopIteration:
                    break
                except VideoError as e:  # after the frames decoded before it
                    error = e
                    break
                self.lane.submit(frames)
                yield from self._finished(keep=1)
            yield from self._finished(keep=0)
        finally:
            self._close()
            self.seconds += time.perf_counter() - start
            self._start = None
        if error is not None:
            where = f" to {self.encoder.path}" if self.encoder else ""
            raise VideoError(f"{error.message}; {self.written} frames written{where}")

    def _finished(self, keep: int) -> Iterator[torch.Tensor]:
        for (result,) in self.lane.results(keep):
            if self.encoder is not None:
                self.encoder.write(_nhwc(result, self.lane.pipeline))
            self.frames += len(result)
            yield result

    def _close(self) -> None:
        if self.encoder is not None:
            self.encoder.close()

    def run(self, on_batch: Callable[[torch.Tensor], object] | None = None) -> VideoStats:
        """Process every frame, calling `on_batch` with each processed batch."""
        for result in self:
            if on_batch is not None:
                on_batch(result)
        return self.stats()

    def stats(self) -> VideoStats:
        """The run's numbers so far."""
        gpu = self.device.type == "cuda"
        peak = torch.cuda.max_memory_allocated(self.device) if gpu else None
        pool = self.lane.pool
        return VideoStats(self.frames, self.seconds, pool.allocations, pool.bytes, peak)


def _nhwc(result: torch.Tensor, pipeline: Pipeline | PipelineFn) -> torch.Tensor:
    """A result as the encoder takes it: NHWC (a pipeline in NCHW gives NCHW frames)."""
    if isinstance(pipeline, Pipeline) and pipeline.layout == "NCHW" and result.dim() == 4:
        return result.permute(0, 2, 3, 1)
    return result


def process(
    source: str | Path | Source,
    ops: Ops,
    out: str | Path | None = None,
    *,
    batch: int = 8,
    device: torch.device | str | None = None,
    codec: str | None = None,
    decoder: str = "auto",
) -> VideoRun:
    """Frames of `source` (a video file, or any `Source`) through `ops` (a spec such as
    `"resize=640x360,blur=5,gray"`, a `Pipeline`, or a function of an (N, H, W, 3) uint8
    batch), `batch` frames at a time, on `device` (the GPU if there is one); encoded into
    `out` (PyAV; H.264 or `codec`) when given. Returns the `VideoRun` to iterate or `run()`.
    `decoder`: "auto" (torchcodec's GPU decoder where it is importable, else PyAV), "pyav",
    "torchcodec"."""
    if batch < 1:
        raise ValueError(f"batch is at least 1, not {batch}")
    chosen = torch.device(device) if device is not None else default_device()
    pipeline = pipeline_of(ops)
    if isinstance(source, (str, Path)):
        source = open_video(source, chosen, decoder)
    return VideoRun(source, pipeline, out, chosen, batch, codec)


def make_clip(
    path: str | Path,
    frames: int = 12,
    size: tuple[int, int] = (48, 64),
    fps: int = 12,
    codec: str = "mpeg4",
) -> Path:
    """Write a short synthetic clip (a moving gradient and bar), for demos and tests.
    `size` is (height, width); the container comes from `path`'s suffix."""
    import av

    path = Path(path)
    height, width = size
    rows, cols = np.mgrid[0:height, 0:width]
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        for i in range(frames):
            image = np.stack([(cols * 4 + i * 16) % 256, rows * 5 % 256, (cols + rows) * 2], -1)
            bar = (cols // 4 - i) % (width // 4) == 0
            image[bar] = 255
            picture = av.VideoFrame.from_ndarray(image.astype(np.uint8), format="rgb24")
            for packet in stream.encode(picture):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
