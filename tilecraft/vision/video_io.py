"""Reading and writing video: decoders (PyAV, torchcodec on a GPU), an encoder (PyAV).

A source yields batches of decoded frames (`Frames`). PyAV decodes with FFmpeg's software
decoders on the CPU; where `torchcodec` is importable and frames go to a GPU, its NVDEC
decoder puts them on the GPU directly. `describe()` of a source says which decoder it is.
YUV 4:2:0 frames (what most video holds) are handed over as their planes, converted to RGB
by a tilecraft kernel on the device: half the bytes of RGB to copy, and no CPU conversion.

Failures are `VideoError`s in one line: a missing, corrupt or truncated file, a codec
FFmpeg has no decoder (or encoder) for. A source raises after handing over the frames it
decoded before the failure, so they are processed and written.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from tilecraft.exc import VideoError

FORMATS = ("rgb", "i420", "nv12")
# colorspaces the BT.601 limited-range kernel converts exactly: unspecified, BT470BG, SMPTE170M
BT601 = (2, 5, 6)


@dataclass
class Frames:
    """A batch of decoded frames. `data` is (N, H, W, 3) uint8 RGB for "rgb"; for "i420"
    (N, H*W*3/2) uint8, each frame's Y, U and V planes one after another, for "nv12" its Y
    plane then its interleaved UV plane. A tensor (on the host or the device), or a list of
    one numpy array per frame, as a decoder hands them over."""

    data: torch.Tensor | list[np.ndarray]
    format: str
    height: int
    width: int

    def __len__(self) -> int:
        return len(self.data)

    def tensor(self) -> torch.Tensor:
        """The batch as one tensor (stacked when it is a list of arrays)."""
        if isinstance(self.data, torch.Tensor):
            return self.data
        return torch.from_numpy(np.stack(self.data))

    def shape(self) -> tuple[int, ...]:
        """The shape of `tensor()` (without stacking)."""
        if isinstance(self.data, torch.Tensor):
            return tuple(self.data.shape)
        return (len(self.data), *self.data[0].shape)


class Source(Protocol):
    """Where frames come from: a video file, a camera, frames in memory."""

    fps: float
    expected: int | None  # frames the container says it holds, when it says

    def describe(self) -> str:
        """The decoder, in words."""
        ...

    def batches(self, size: int) -> Iterator[Frames]:
        """Batches of up to `size` frames, in order."""
        ...


class TensorSource:
    """Frames already in memory, in a `Frames` layout: (N, H, W, 3) uint8 RGB, or flattened
    I420 or NV12 planes (N, H*W*3/2) with `format=` and `size=(H, W)`. For benchmarks and
    tests, and for frames that come from elsewhere (a camera's driver)."""

    def __init__(
        self,
        frames: torch.Tensor,
        format: str = "rgb",
        size: tuple[int, int] | None = None,
        fps: float = 30.0,
    ) -> None:
        if format not in FORMATS:
            raise ValueError(f"frame format is one of {FORMATS}, not {format!r}")
        self.frames, self.format, self.fps, self.expected = frames, format, fps, len(frames)
        self.size = size or (int(frames.shape[1]), int(frames.shape[2]))

    def describe(self) -> str:
        """The decoder, in words."""
        return f"frames in memory ({self.format}, {'x'.join(map(str, self.size[::-1]))})"

    def batches(self, size: int) -> Iterator[Frames]:
        """Batches of up to `size` frames (views of the tensor, no copy)."""
        for i in range(0, len(self.frames), size):
            yield Frames(self.frames[i : i + size], self.format, *self.size)


def _fail(path: str | Path, what: str, error: BaseException | None = None) -> VideoError:
    detail = f" ({type(error).__name__}: {error})" if error is not None else ""
    return VideoError(f"{path}: {what}{detail}")


def _open(path: str | Path) -> Any:
    import av

    try:
        return av.open(str(path))
    except FileNotFoundError:
        raise _fail(path, "no such file") from None
    except (av.FFmpegError, IndexError, ValueError) as e:
        raise _fail(path, "not a video FFmpeg can read: corrupt or truncated", e) from None


class PyAVSource:
    """A video file decoded by PyAV (FFmpeg's software decoders, on the CPU)."""

    def __init__(self, path: str | Path, threads: bool = True) -> None:
        import av

        self.path = path
        self.container = _open(path)
        if not self.container.streams.video:
            self.container.close()
            raise _fail(path, "no video stream: corrupt, truncated or not a video")
        self.stream = self.container.streams.video[0]
        if self.stream.codec_context is None:
            self.container.close()
            raise _fail(path, f"unsupported codec: FFmpeg {av.ffmpeg_version_info} has no decoder")
        if threads:
            self.stream.thread_type = "AUTO"  # frame and slice threads
        self.fps = float(self.stream.average_rate or self.stream.guessed_rate or 30)
        self.expected = self._expected()

    def _expected(self) -> int | None:
        if self.stream.frames:
            return int(self.stream.frames)
        if self.container.duration:  # microseconds, when the container records it
            return int(self.container.duration * self.fps / 1e6)
        return None

    def describe(self) -> str:
        """The decoder, in words."""
        import av

        codec = self.stream.codec_context.codec
        return f"PyAV {av.__version__}: FFmpeg's {codec.name} software decoder on the CPU"

    def batches(self, size: int) -> Iterator[Frames]:
        """Decoded batches; a decoding error ends them with a VideoError after the frames
        decoded before it, and so does a file holding fewer frames than its header says."""
        import av

        batch: list[np.ndarray] = []
        layout: tuple[str, int, int] | None = None
        decoded, error = 0, None
        try:
            for frame in self.container.decode(self.stream):
                layout = layout or _layout(frame)
                batch.append(frame.to_ndarray(format=_av_format(layout[0])).reshape(-1))
                decoded += 1
                if len(batch) == size:
                    yield _frames(batch, layout)
                    batch = []
        except av.FFmpegError as e:
            error = _fail(self.path, f"corrupt or truncated after {decoded} frames", e)
        finally:
            self.container.close()
        if batch and layout:
            yield _frames(batch, layout)
        if error is None and self.expected and decoded < 0.95 * self.expected - 1:
            error = _fail(self.path, f"truncated: {decoded} of {self.expected} frames")
        if error is not None:
            raise error


def _layout(frame: Any) -> tuple[str, int, int]:
    """How a decoded frame is handed over: its planes when the device kernel converts them
    as the video means them (BT.601, limited range, even sizes), else RGB from FFmpeg."""
    planar = (
        frame.format.name == "yuv420p"
        and frame.colorspace in BT601
        and frame.color_range in (0, 1)  # unspecified or limited ("MPEG") range
        and frame.width % 2 == 0
        and frame.height % 2 == 0
    )
    return ("i420" if planar else "rgb"), frame.height, frame.width


def _av_format(layout: str) -> str:
    return "yuv420p" if layout == "i420" else "rgb24"


def _frames(batch: list[np.ndarray], layout: tuple[str, int, int]) -> Frames:
    fmt, h, w = layout
    data = batch if fmt == "i420" else [a.reshape(h, w, 3) for a in batch]
    return Frames(data, fmt, h, w)


class TorchCodecSource:
    """A video file decoded on the GPU by torchcodec (NVDEC), frames landing on the device."""

    def __init__(self, path: str | Path, device: torch.device) -> None:
        from torchcodec.decoders import VideoDecoder

        try:
            self.decoder = VideoDecoder(str(path), device=str(device), dimension_order="NHWC")
        except Exception as e:  # torchcodec raises RuntimeError and ValueError alike
            raise _fail(path, "torchcodec cannot decode it", e) from None
        meta = self.decoder.metadata
        self.fps = float(meta.average_fps or 30)
        self.expected: int | None = len(self.decoder)
        self.codec = meta.codec

    def describe(self) -> str:
        """The decoder, in words."""
        return f"torchcodec: NVDEC ({self.codec}) on the GPU"

    def batches(self, size: int) -> Iterator[Frames]:
        """Batches of RGB frames on the device."""
        for i in range(0, len(self.decoder), size):
            data = self.decoder[i : i + size]
            yield Frames(data, "rgb", int(data.shape[1]), int(data.shape[2]))


def open_video(
    path: str | Path, device: torch.device | str = "cpu", decoder: str = "auto"
) -> Source:
    """A source decoding `path`: torchcodec's GPU decoder for "auto" on a GPU device where
    torchcodec is importable (PyAV if it refuses the file), else PyAV."""
    if decoder not in ("auto", "pyav", "torchcodec"):
        raise ValueError(f"decoder is auto, pyav or torchcodec, not {decoder!r}")
    if not Path(path).is_file():
        raise _fail(path, "no such file")
    gpu = torch.device(device).type == "cuda"
    has_torchcodec = importlib.util.find_spec("torchcodec") is not None
    if decoder == "torchcodec" and not has_torchcodec:
        raise _fail(path, "the torchcodec decoder was asked for, and torchcodec is not installed")
    if decoder == "torchcodec" or (decoder == "auto" and gpu and has_torchcodec):
        try:
            return TorchCodecSource(path, torch.device(device))
        except VideoError:
            if decoder == "torchcodec":
                raise
    return PyAVSource(path)


def _codec_for(codec: str | None) -> str:
    """The encoder: `codec`, else H.264 (libx264) where FFmpeg has it, else MPEG-4 part 2."""
    import av

    if codec:
        return codec
    return "libx264" if "libx264" in av.codecs_available else "mpeg4"


class Encoder:
    """Frames (N, H, W, 1 or 3) uint8 on the host, encoded by PyAV into `path` (its container
    from the suffix: .mp4, .mkv, .avi, .mov). Opened at the first batch, when the size is
    known; `close()` flushes and closes, and is safe to call twice."""

    def __init__(self, path: str | Path, fps: float, codec: str | None = None) -> None:
        self.path, self.fps, self.codec = Path(path), fps, _codec_for(codec)
        self.written = 0
        self._container: Any = None
        self._stream: Any = None

    def _start(self, height: int, width: int) -> None:
        import av

        if height % 2 or width % 2:
            raise VideoError(
                f"{self.path}: {self.codec} in yuv420p needs an even width and height, not "
                f"{width}x{height}: resize to an even size first"
            )
        try:
            self._container = av.open(str(self.path), "w")
            rate = Fraction(self.fps).limit_denominator(1001)
            self._stream = self._container.add_stream(self.codec, rate=rate)
        except (av.FFmpegError, ValueError) as e:
            self.close()
            raise _fail(self.path, f"cannot encode with {self.codec!r}", e) from None
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = "yuv420p"

    def write(self, frames: torch.Tensor) -> None:
        """Encode a batch: (N, H, W, C) uint8 on the host, C = 1 (gray) or 3 (RGB)."""
        import av

        if frames.dtype != torch.uint8 or frames.dim() != 4 or frames.shape[-1] not in (1, 3):
            raise VideoError(
                f"{self.path}: only uint8 frames (N, H, W, 1 or 3) can be encoded, not "
                f"{frames.dtype} {tuple(frames.shape)} (a pipeline ending in normalize feeds "
                "a model: hand its batches to a callback instead of an output file)"
            )
        if self._container is None:
            self._start(int(frames.shape[1]), int(frames.shape[2]))
        gray = frames.shape[-1] == 1
        for frame in frames.numpy():
            image = frame[..., 0] if gray else frame
            picture = av.VideoFrame.from_ndarray(image, format="gray" if gray else "rgb24")
            for packet in self._stream.encode(picture):
                self._container.mux(packet)
            self.written += 1

    def close(self) -> None:
        """Flush the encoder and close the file (it then holds every frame written)."""
        container, self._container = self._container, None
        if container is None:
            return
        try:
            if self._stream is not None:
                for packet in self._stream.encode():
                    container.mux(packet)
        finally:
            container.close()
