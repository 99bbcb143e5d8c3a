"""Lanes, several streams and the buffer pool, on frames in memory (no video files needed).

On the CPU by default; `TILECRAFT_TEST_DEVICE=cuda` runs them on a GPU: CUDA streams,
pinned staging buffers, asynchronous copies, and the steady state counted by
`torch.cuda.memory_stats` as well as by the pool.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import DEVICE

import tilecraft.vision as vision
from tilecraft.vision import streams
from tilecraft.vision.lanes import Lane, frames_to_rgb
from tilecraft.vision.memory import BufferPool, empty
from tilecraft.vision.video_io import Frames, TensorSource


def device_allocations() -> int:
    """Tensors PyTorch's CUDA allocator has handed out so far (0 on the CPU)."""
    if DEVICE != "cuda":
        return 0
    torch.cuda.synchronize()
    return int(torch.cuda.memory_stats().get("allocation.all.allocated", 0))


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
    lane = Lane(pipeline, torch.device(DEVICE))
    shape = (2, 14, 20, 3) if fmt == "rgb" else (2, 14 * 20 * 3 // 2)
    batches = [torch.randint(0, 256, shape, dtype=torch.uint8) for _ in range(3)]
    expected = [pipeline(frames_to_rgb(b.to(DEVICE), fmt, 14, 20)).cpu() for b in batches]
    for i, data in enumerate(batches):
        lane.submit(Frames(data, fmt, 14, 20))
        (result,) = next(lane.results())
        assert result.device.type == "cpu" and torch.equal(result, expected[i])
        if i == 0:
            warm, allocations = lane.pool.allocations, device_allocations()
    assert warm > 0 and lane.pool.allocations == warm
    assert device_allocations() == allocations  # nor did PyTorch's allocator hand out any


def test_streams(tmp_path: Path) -> None:
    feeds = [torch.randint(0, 256, (n, 10, 14, 3), dtype=torch.uint8) for n in (3, 5, 1)]
    pipeline = vision.Pipeline.parse("resize=7x5,hflip")
    expected = [pipeline(frames.to(DEVICE)).cpu() for frames in feeds]
    for combine in (False, True):
        sources = [TensorSource(f) for f in feeds]
        run = streams.process_many(
            sources, pipeline, batch=2, device=DEVICE, combine=combine, timeline=True
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


def test_streams_batched_together_when_faster() -> None:
    feeds = [torch.randint(0, 256, (9, 6, 8, 3), dtype=torch.uint8) for _ in range(2)]
    pipeline = vision.Pipeline.parse("hflip")
    run = streams.process_many(
        [TensorSource(f) for f in feeds], pipeline, batch=2, device=DEVICE, combine="auto"
    )
    got: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    for i, batch in run:
        got[i].append(batch.clone())
        if sum(run.frames) < 16:  # four rounds of trials, two batches of 2 frames each
            assert run.combined is None
    assert set(run.trial_s) == {True, False} and run.combined in (True, False)
    for i, frames in enumerate(feeds):
        assert torch.equal(torch.cat(got[i]), pipeline(frames.to(DEVICE)).cpu())
    with pytest.raises(ValueError, match="combine is True, False or 'auto'"):
        streams.process_many([TensorSource(feeds[0])], pipeline, combine="yes")


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
