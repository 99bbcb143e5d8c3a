"""Video files through the vision kernels on the CPU: decode, process, encode, errors.

Clips are tiny (32x24, a few frames) and generated here: the kernels run through Triton's
interpreter. Streams, lanes and the buffer pool (no video files) are in test_video_streams.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

av = pytest.importorskip("av")

import tilecraft.vision as vision  # noqa: E402
from tilecraft import cli, demo  # noqa: E402
from tilecraft.exc import VideoError  # noqa: E402
from tilecraft.vision import video  # noqa: E402
from tilecraft.vision.lanes import frames_to_rgb  # noqa: E402
from tilecraft.vision.video_io import PyAVSource  # noqa: E402

OPS = "resize=16x12,blur=3,gray"


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return video.make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", frames=5, size=(24, 32))


def decoded(path: Path) -> list[torch.Tensor]:
    """Every frame of `path` as RGB, decoded and converted as `process` does it."""
    frames = []
    for batch in PyAVSource(path).batches(64):
        frames += list(frames_to_rgb(batch.tensor(), batch.format, batch.height, batch.width))
    return frames


def frame_count(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def test_process_matches_the_kernels_frame_by_frame(clip: Path) -> None:
    run = video.process(clip, OPS, batch=2, device="cpu")
    assert run.decoder.startswith("PyAV") and "mpeg4" in run.decoder
    got = torch.cat([batch.clone() for batch in run])
    pipeline = vision.Pipeline.parse(OPS)
    expected = torch.cat([pipeline(frame[None]) for frame in decoded(clip)])
    assert got.shape == (5, 12, 16, 1) and torch.equal(got, expected)
    assert run.stats().frames == 5 and "interpreter" in (run.notice or "")
    # YUV frames reach the device as planes: the color kernel converted them
    assert next(PyAVSource(clip).batches(1)).format == "i420"
    if importlib.util.find_spec("torchcodec") is None:
        with pytest.raises(VideoError, match="torchcodec is not installed"):
            video.process(clip, OPS, decoder="torchcodec")


def test_cli_end_to_end(clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out.mp4"
    code = cli.main(["video", str(clip), "-o", str(out), "--ops", OPS, "--batch", "3"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "frames/s" in printed and "PyAV" in printed
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        assert (stream.width, stream.height) == (16, 12)
        assert sum(1 for _ in container.decode(stream)) == 5


def test_demo_makes_its_own_clip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = video.make_clip

    def tiny(path, frames=12, size=(48, 64), **kw):  # the demo's clip, smaller for CI
        return small(path, frames=3, size=(24, 32), **kw)

    monkeypatch.setattr(video, "make_clip", tiny)
    assert demo.run_video_demo(folder=tmp_path) == 0
    assert frame_count(tmp_path / "clip.tilecraft.mp4") == 3


def fail_cli(args: list[str], capsys: pytest.CaptureFixture) -> str:
    """Run the CLI expecting exit status 1; its one line of error."""
    assert cli.main(args) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tilecraft: "), lines
    return lines[0]


def test_corrupt_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(bytes(range(256)) * 20)
    with pytest.raises(VideoError, match="corrupt or truncated"):
        video.process(garbage, "gray", device="cpu")
    assert "corrupt" in fail_cli(["video", str(garbage), "-o", str(tmp_path / "o.mp4")], capsys)
    assert "no such file" in fail_cli(["video", str(tmp_path / "missing.mp4")], capsys)


def truncated(tmp_path: Path, codec: str, fraction: float) -> Path:
    whole = video.make_clip(tmp_path / f"{codec}.avi", frames=12, size=(24, 32), codec=codec)
    data = whole.read_bytes()
    cut = tmp_path / f"{codec}_cut.avi"
    cut.write_bytes(data[: int(len(data) * fraction)])
    return cut


@pytest.mark.parametrize(
    "codec, fraction, message",
    [
        ("mjpeg", 0.85, "corrupt or truncated after"),  # the decoder fails on a cut frame
        ("mpeg4", 0.95, "truncated: .* of 12 frames"),  # frames missing, no decoder error
    ],
)
def test_truncated_file_keeps_the_frames_before(
    tmp_path: Path, capsys: pytest.CaptureFixture, codec: str, fraction: float, message: str
) -> None:
    cut, out = truncated(tmp_path, codec, fraction), tmp_path / "out.mp4"
    run = video.process(cut, "gray", out, batch=4, device="cpu")
    with pytest.raises(VideoError, match=f"{message}.*; (\\d+) frames written to") as error:
        run.run()
    written = run.written
    assert 0 < written < 12 and f"; {written} frames written" in str(error.value)
    assert frame_count(out) == written  # closed properly: every frame written is there
    line = fail_cli(["video", str(cut), "-o", str(out), "--ops", "gray"], capsys)
    assert f"{written} frames written" in line


def test_unsupported_codecs(clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    whole = video.make_clip(tmp_path / "clip.avi", frames=2, size=(24, 32))
    unknown = tmp_path / "unknown.avi"
    unknown.write_bytes(whole.read_bytes().replace(b"FMP4", b"ZZZZ"))  # a codec tag no one has
    with pytest.raises(VideoError, match="unsupported codec"):
        video.process(unknown, "gray", device="cpu")
    assert "unsupported codec" in fail_cli(["video", str(unknown)], capsys)
    out = tmp_path / "out.mp4"
    with pytest.raises(VideoError, match="cannot encode with 'no-such-codec'"):
        video.process(clip, "gray", out, codec="no-such-codec", device="cpu").run()
    with pytest.raises(VideoError, match="only uint8 frames"):
        video.process(clip, "normalize", tmp_path / "f.mp4", device="cpu").run()


def test_demo_without_pyav_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hint keeps its "[vision]" (rich would read it as markup and drop it)."""
    from rich.console import Console

    console = Console(record=True, width=120)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert demo.video_section(console)
    assert 'pip install "tilecraft[vision]"' in console.export_text()
