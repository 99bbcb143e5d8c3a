"""Video through the vision kernels on the CPU: decode, process, encode, errors, streams, pool.

Clips are tiny (32x24, a few frames) and generated here: the kernels run through Triton's
interpreter.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

av = pytest.importorskip("av")

import tilecraft.vision as vision  # noqa: E402
from tilecraft import cli, demo  # noqa: E402
from tilecraft.exc import VideoError  # noqa: E402
from tilecraft.vision import streams, video  # noqa: E402
from tilecraft.vision.lanes import Lane, frames_to_rgb  # noqa: E402
from tilecraft.vision.memory import BufferPool, empty  # noqa: E402
from tilecraft.vision.video_io import Frames, PyAVSource, TensorSource  # noqa: E402

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


def test_pool_reuses_buffers() -> None:
    pool = BufferPool("cpu")
    with pool.frame():
        a = empty([2, 3], torch.uint8, "cpu")
        kept = pool.keep(a.t())  # a view of a pooled buffer keeps that buffer
        b = empty([2, 3], torch.uint8, "cpu")
    assert kept is a and pool.allocations == 2
    with pool.frame():
        assert empty([2, 3], torch.uint8, "cpu") is b  # given back at the frame's end
        assert empty([2, 3], torch.float32, "cpu") is not a
    pool.give(a)
    assert pool.allocations == 3 and pool.bytes == 2 * 6 + 24
    assert empty([1], torch.uint8, "cpu") is not a  # no pool active: a plain torch.empty


@pytest.mark.parametrize("fmt", ["rgb", "i420", "nv12"])
def test_steady_state_frames_allocate_nothing(fmt: str) -> None:
    torch.manual_seed(0)
    # every op allocates (resize, blur's scratch, gray; and the conversion from YUV)
    pipeline = vision.Pipeline.parse("resize=12x8,blur=3,gray")
    lane = Lane(pipeline, torch.device("cpu"))
    shape = (2, 14, 20, 3) if fmt == "rgb" else (2, 14 * 20 * 3 // 2)
    batches = [torch.randint(0, 256, shape, dtype=torch.uint8) for _ in range(3)]
    for i, data in enumerate(batches):
        lane.submit(Frames(data, fmt, 14, 20))
        (result,) = next(lane.results())
        assert torch.equal(result, pipeline(frames_to_rgb(data, fmt, 14, 20)))
        if i == 0:
            warm = lane.pool.allocations
    assert warm > 0 and lane.pool.allocations == warm


def test_streams_on_the_cpu(tmp_path: Path) -> None:
    feeds = [torch.randint(0, 256, (n, 10, 14, 3), dtype=torch.uint8) for n in (3, 5, 1)]
    pipeline = vision.Pipeline.parse("resize=7x5,hflip")
    expected = [pipeline(frames) for frames in feeds]
    for combine in (False, True):
        run = streams.process_many(
            [TensorSource(f) for f in feeds], pipeline, batch=2, combine=combine, timeline=True
        )
        got: dict[int, list[torch.Tensor]] = {0: [], 1: [], 2: []}
        for i, batch in run:
            got[i].append(batch.clone())
        for i, frames in enumerate(expected):
            assert torch.equal(torch.cat(got[i]), frames), (combine, i)
        assert [s.frames for s in run.stats()] == [3, 5, 1]
        intervals = run.timeline()
        assert intervals and all(i.end_ms >= i.start_ms >= 0 for i in intervals)
    picture = streams.plot_timeline(intervals, tmp_path / "timeline.png")
    assert picture.stat().st_size > 1000


def test_trace_exports_a_chrome_trace(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    with streams.trace(path):
        torch.ones(4).add_(1)
    assert "traceEvents" in json.loads(path.read_text())


def test_bench_video_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_benchmarks import load_script

    script = load_script("bench_video", monkeypatch)
    result = script.main(["--smoke", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "bench_video.json").read_text()) == result
    assert all(row["matches"] for row in result["rows"] if "matches" in row), result["rows"]
    assert {row["streams"] for row in result["rows"]} == {1, 2}
    assert (tmp_path / "timeline.png").is_file()
