"""The video pipeline at 1080p: frames per second with one stream and several, and memory.

Decoded frames come from memory (no decoder needed on the benchmark machine): 1080p uint8
RGB and NV12 frames in pinned host memory, as a decoder writing into pinned buffers hands
them over. Each pipeline runs through `tilecraft.vision.streams` (a CUDA stream per source,
pinned double buffers, copies overlapping kernels), and so do its peers, computing the same
result with other ops on the same machinery:

- preprocess: RGB -> bilinear 640x360 -> normalize -> NCHW float16, kept on the GPU (a
  model's input); tilecraft's fused kernel against torchvision.transforms.v2 (and kornia,
  and plain PyTorch ops);
- preprocess_nv12: the same from NV12 (the conversion fused too; tilecraft only);
- resize_blur_gray: RGB -> 640x360 -> 5x5 Gaussian blur -> gray uint8, copied back to the
  host (an encoder's input), as `tilecraft video --ops resize=640x360,blur=5,gray`.

Per run: frames/s, peak device memory (`torch.cuda.max_memory_allocated` above what was
allocated before), device allocations per frame once warm (`torch.cuda.memory_stats`),
and the buffer pool's bytes per stream. Also a plain loop with torchvision (pageable
copies, no streams), a timeline picture of 4 tilecraft streams and a profiler trace.

    PYTHONPATH=$PWD python benchmarks/bench_video.py --out benchmarks/results/video
    PYTHONPATH=$PWD python benchmarks/bench_video.py --smoke --out /tmp/video  # CPU, tiny

`--out` is a folder: bench_video.json, timeline.png, trace.json. On the CPU (`--smoke`) the
kernels run through Triton's interpreter: the numbers check the script, nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
Peer = Callable[[torch.Tensor], torch.Tensor]


def _stats(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    mean = torch.tensor(MEAN, device=device)[:, None, None]
    return mean, torch.tensor(STD, device=device)[:, None, None]


def torch_peers(size: tuple[int, int]) -> dict[str, Peer]:
    """The pipelines in plain PyTorch ops, on (N, H, W, 3) uint8 batches."""
    from tilecraft.vision.filters import gaussian_kernel1d

    def preprocess(x: torch.Tensor) -> torch.Tensor:
        mean, std = _stats(x.device)
        y = F.interpolate(x.permute(0, 3, 1, 2).float(), size, mode="bilinear")
        return ((y / 255 - mean) / std).half()

    def resize_blur_gray(x: torch.Tensor) -> torch.Tensor:
        y = F.interpolate(x.permute(0, 3, 1, 2).float(), size, mode="bilinear")
        y = y.round().clamp(0, 255)
        taps = gaussian_kernel1d(5, 1.1).to(x.device)
        weights = (taps[:, None] * taps[None, :]).expand(3, 1, 5, 5).contiguous()
        y = F.conv2d(F.pad(y, (2, 2, 2, 2), mode="reflect"), weights, groups=3)
        y = y.round().clamp(0, 255)
        gray = y[:, 0] * 0.2989 + y[:, 1] * 0.587 + y[:, 2] * 0.114
        return gray.to(torch.uint8)[..., None]

    return {"preprocess": preprocess, "resize_blur_gray": resize_blur_gray}


def torchvision_peers(size: tuple[int, int]) -> dict[str, Peer]:
    """The pipelines in torchvision.transforms.v2's functional ops."""
    from torchvision.transforms.v2 import functional as TF

    def preprocess(x: torch.Tensor) -> torch.Tensor:
        y = TF.resize(x.permute(0, 3, 1, 2), list(size), antialias=False)
        y = TF.to_dtype(y, torch.float32, scale=True)
        return TF.normalize(y, list(MEAN), list(STD)).half()

    def resize_blur_gray(x: torch.Tensor) -> torch.Tensor:
        y = TF.resize(x.permute(0, 3, 1, 2), list(size), antialias=False)
        y = TF.gaussian_blur(y, [5, 5])
        return TF.rgb_to_grayscale(y).permute(0, 2, 3, 1)

    return {"preprocess": preprocess, "resize_blur_gray": resize_blur_gray}


def kornia_peers(size: tuple[int, int]) -> dict[str, Peer]:
    """The pipelines in kornia (float images in 0..1)."""
    import kornia

    def preprocess(x: torch.Tensor) -> torch.Tensor:
        mean, std = (torch.tensor(v, device=x.device) for v in (MEAN, STD))
        y = x.permute(0, 3, 1, 2).float() / 255
        y = kornia.geometry.transform.resize(y, size, interpolation="bilinear")
        return kornia.enhance.normalize(y, mean, std).half()

    def resize_blur_gray(x: torch.Tensor) -> torch.Tensor:
        y = x.permute(0, 3, 1, 2).float() / 255
        y = kornia.geometry.transform.resize(y, size, interpolation="bilinear")
        y = kornia.filters.gaussian_blur2d(y, (5, 5), (1.1, 1.1), border_type="reflect")
        gray = kornia.color.rgb_to_grayscale(y)
        return (gray * 255).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)

    return {"preprocess": preprocess, "resize_blur_gray": resize_blur_gray}


def implementations(size: tuple[int, int]) -> dict[str, dict[str, object]]:
    """pipeline -> implementation name -> ops (a spec for tilecraft, a function for peers)."""
    spec = f"resize={size[1]}x{size[0]}"
    table: dict[str, dict[str, object]] = {
        "preprocess": {"tilecraft": f"{spec},normalize"},
        "preprocess_nv12": {"tilecraft": f"{spec},normalize"},
        "resize_blur_gray": {"tilecraft": f"{spec},blur=5,gray"},
    }
    peers = [("torch", torch_peers)]
    for name, module, build in (
        ("torchvision v2", "torchvision", torchvision_peers),
        ("kornia", "kornia", kornia_peers),
    ):
        if importlib.util.find_spec(module) is not None:
            peers.append((name, build))
    for name, build in peers:
        for pipeline, fn in build(size).items():
            table[pipeline][name] = fn
    return table


def host_frames(count: int, height: int, width: int, device: torch.device) -> dict[str, object]:
    """Synthetic decoded frames in (pinned, on a GPU machine) host memory: RGB and NV12."""
    from tilecraft.vision.video_io import TensorSource

    pin = device.type == "cuda"
    rgb = torch.randint(0, 256, (count, height, width, 3), dtype=torch.uint8)
    nv12 = torch.randint(0, 256, (count, height * width * 3 // 2), dtype=torch.uint8)
    if pin:
        rgb, nv12 = rgb.pin_memory(), nv12.pin_memory()
    return {
        "rgb": lambda: TensorSource(rgb),
        "nv12": lambda: TensorSource(nv12, "nv12", (height, width)),
    }


def allocations(gpu: bool) -> int:
    """Tensors PyTorch's CUDA allocator has handed out so far."""
    return int(torch.cuda.memory_stats().get("allocation.all.allocated", 0)) if gpu else 0


def measure_run(make_run: Callable[[], object], device: torch.device, warm_batches: int) -> dict:
    """Frames/s and peak memory above the start of one timed run, and the device
    allocations per frame after its first `warm_batches` batches (the pools' warm-up)."""
    gpu = device.type == "cuda"
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base, run = torch.cuda.memory_allocated() if gpu else 0, make_run()
    start, frames, batches, warm = time.perf_counter(), 0, 0, (0, 0)
    for _, batch in run:  # type: ignore[attr-defined]
        frames, batches = frames + len(batch), batches + 1
        if batches == warm_batches:
            warm = (frames, allocations(gpu))
    if gpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    row = {"frames": frames, "fps": frames / seconds, "seconds": seconds}
    pools = run.stats()  # type: ignore[attr-defined]
    row["pool_mib_per_stream"] = max(s.pool_bytes for s in pools) / 2**20
    if gpu:
        row["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        if frames > warm[0] > 0:
            row["allocs_per_frame"] = (allocations(gpu) - warm[1]) / (frames - warm[0])
    return row


def check(
    ops: object, peer: object, source: object, device: torch.device, tol: float, batch: int
) -> bool:
    """Whether a peer's output matches tilecraft's on the first batch."""
    from tilecraft.vision.streams import process_many

    outs = []
    for fn in (ops, peer):
        run = process_many([source()], fn, batch=batch, device=device)  # type: ignore[operator]
        outs.append(next(iter(run))[1].float().cpu())
    a, b = outs[0].reshape(-1), outs[1].reshape(-1)
    return a.shape == b.shape and bool((a - b).abs().max() <= tol)


def configs(args: argparse.Namespace) -> list[tuple[int, bool]]:
    """(streams, combined) to run: one stream, several, several batched together."""
    if args.smoke:
        return [(1, False), (args.streams, True)]
    return [(1, False), (args.streams, False), (args.streams, True)]


def run_config(
    args: argparse.Namespace,
    device: torch.device,
    source: Callable,
    ops: object,
    streams: int,
    combine: bool,
    to_host: bool,
) -> dict:
    """The best of `args.repeats` timed runs of one configuration (after a warm-up)."""
    from tilecraft.vision.streams import process_many

    def make() -> object:
        sources = [source() for _ in range(streams)]
        return process_many(
            sources, ops, batch=args.batch, device=device, combine=combine, to_host=to_host
        )

    if device.type == "cuda":  # warm-up: compile, fill the pools
        for _ in make():  # type: ignore[attr-defined]
            pass
    # batches handed back in the first three rounds: each lane's pool fills in the first two
    # (a batch is in flight while the next is queued), the third runs on reused buffers
    warm = 3 * (1 if combine else streams)
    timed = [measure_run(make, device, warm) for _ in range(args.repeats)]
    return max(timed, key=lambda r: r["fps"])


def measure(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """Every pipeline, implementation and configuration."""
    frames = host_frames(args.frames, args.height, args.width, device)
    rows = []
    for pipeline, impls in implementations(args.size).items():
        source = frames["nv12" if pipeline.endswith("nv12") else "rgb"]
        to_host = pipeline == "resize_blur_gray"
        tol = 2.0 if to_host else 3e-2
        for impl, ops in impls.items():
            ours = impls["tilecraft"]
            matches = impl == "tilecraft" or check(ours, ops, source, device, tol, args.batch)
            for streams, combine in configs(args):
                best = run_config(args, device, source, ops, streams, combine, to_host)
                row = {"pipeline": pipeline, "impl": impl, "streams": streams}
                rows.append({**row, "combine": combine, "matches": matches, **best})
                label = f"{streams} streams{' combined' if combine else ''}"
                print(f"  {pipeline:18} {impl:15} {label}: {best['fps']:.0f} frames/s", flush=True)
    rows += plain_loop(args, device, frames)
    return rows


def plain_loop(args: argparse.Namespace, device: torch.device, frames: dict) -> list[dict]:
    """What people write without streams: pageable copies in, the ops, a copy out."""
    impl = "torchvision v2" if importlib.util.find_spec("torchvision") else "torch"
    peer = implementations(args.size)["resize_blur_gray"][impl]
    source = frames["rgb"]().frames.clone()  # pageable, as a decoder's arrays are
    gpu = device.type == "cuda"

    def loop() -> int:
        done = 0
        for i in range(0, len(source), args.batch):
            done += len(peer(source[i : i + args.batch].to(device)).cpu())  # type: ignore[operator]
        return done

    loop()
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if gpu else 0
    start = time.perf_counter()
    count = loop()
    seconds = time.perf_counter() - start
    row = {
        "pipeline": "resize_blur_gray",
        "impl": f"{impl} plain loop",
        "streams": 1,
        "combine": False,
        "frames": count,
        "fps": count / seconds,
        "seconds": seconds,
    }
    if gpu:
        row["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
    return [row]


def timeline(args: argparse.Namespace, device: torch.device, out: Path) -> dict:
    """A picture of the 4 streams' copies and kernels, and a profiler trace of them."""
    from tilecraft.vision.streams import plot_timeline, process_many, trace

    frames = host_frames(args.batch * args.timeline_batches, args.height, args.width, device)
    spec = implementations(args.size)["resize_blur_gray"]["tilecraft"]

    def run(record: bool) -> object:
        return process_many(
            [frames["rgb"]() for _ in range(args.streams)],
            spec,
            batch=args.batch,
            device=device,
            timeline=record,
        )

    # one recorded run inside the profiler on the CPU (interpreted: slow); on a GPU the
    # trace is of a second run, so that profiling does not stretch the timeline's spans
    with trace(out / "trace.json") if args.smoke else contextlib.nullcontext():
        many = run(True)
        for _ in many:  # type: ignore[attr-defined]
            pass
    title = f"{args.streams} streams, resize+blur+gray, batches of {args.batch}"
    picture = plot_timeline(many.timeline(), out / "timeline.png", title)  # type: ignore[attr-defined]
    if not args.smoke:
        with trace(out / "trace.json"):
            for _ in run(False):  # type: ignore[attr-defined]
                pass
    return {"timeline": str(picture), "trace": str(out / "trace.json")}


def copy_ceiling(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """Frames/s of the host-to-device copies alone (pinned RGB and NV12 frames into two
    device buffers per stream, no kernels), with one stream and several: the ceiling the
    pipelines whose copies dominate can reach, and whether more streams raise it."""
    if device.type != "cuda":
        return []
    rows = []
    for name, shape in (
        ("rgb", (args.height, args.width, 3)),
        ("nv12", (args.height * 3 // 2, args.width)),
    ):
        host = torch.empty((args.batch, *shape), dtype=torch.uint8).pin_memory()
        for streams in (1, args.streams):
            lanes = [torch.cuda.Stream() for _ in range(streams)]
            bufs = [[torch.empty_like(host, device=device) for _ in range(2)] for _ in lanes]
            batches = args.frames // args.batch
            best = 0.0
            for _ in range(args.repeats + 1):  # the first round warms up
                torch.cuda.synchronize()
                start = time.perf_counter()
                for i in range(batches):
                    for lane, buf in zip(lanes, bufs, strict=True):
                        with torch.cuda.stream(lane):
                            buf[i % 2].copy_(host, non_blocking=True)
                torch.cuda.synchronize()
                best = max(best, batches * args.batch * streams / (time.perf_counter() - start))
            gbps = best * host[0].numel() / 1e9
            rows.append({"frames": name, "streams": streams, "fps": best, "gb_per_s": gbps})
            print(
                f"  copies only {name:5} {streams} streams: {best:.0f} frames/s ({gbps:.1f} GB/s)"
            )
    return rows


def table(rows: list[dict]) -> str:
    """The markdown table of the rows."""
    lines = [
        "| pipeline | implementation | streams | frames/s | peak MiB (per stream) | "
        "allocs/frame | pool MiB/stream | matches |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        streams = f"{r['streams']}{' combined' if r['combine'] else ''}"
        peak = "-"
        if "peak_mib" in r:
            peak = f"{r['peak_mib']:.0f} ({r['peak_mib'] / r['streams']:.0f})"
        allocs = f"{r['allocs_per_frame']:.2f}" if "allocs_per_frame" in r else "-"
        pool = f"{r['pool_mib_per_stream']:.1f}" if "pool_mib_per_stream" in r else "-"
        ok = {True: "yes", False: "NO"}.get(r.get("matches"), "-")  # type: ignore[arg-type]
        lines.append(
            f"| {r['pipeline']} | {r['impl']} | {streams} | {r['fps']:.0f} | {peak} | "
            f"{allocs} | {pool} | {ok} |"
        )
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--smoke", action="store_true", help="on the CPU, tiny frames: checks the script"
    )
    p.add_argument("--frames", type=int, default=64, help="frames per stream")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--effort", default="none", help="autotuning effort (none, quick, full)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "video")
    args = p.parse_args(argv)
    args.height, args.width, args.size = 1080, 1920, (360, 640)
    args.timeline_batches = 4
    if args.smoke:
        args.frames, args.batch, args.streams, args.repeats = 2, 2, 2, 1
        args.timeline_batches = 1
        args.height, args.width, args.size = 12, 16, (6, 10)
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    """Measure, print the table, write the JSON and pictures; returns what was written."""
    args = parse(argv)
    device = torch.device("cpu" if args.smoke or not torch.cuda.is_available() else "cuda")
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
        print("on the CPU: Triton's interpreter, numbers not meaningful")
    # before tilecraft.vision's kernels are built: they read it then
    os.environ["TILECRAFT_AUTOTUNE_EFFORT"] = args.effort
    args.out.mkdir(parents=True, exist_ok=True)
    rows = measure(args, device)
    result = {
        "rows": rows,
        "device": str(device),
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "frame": f"{args.width}x{args.height}",
        "batch": args.batch,
        "copy_ceiling": copy_ceiling(args, device),
        **timeline(args, device, args.out),
    }
    print(table(rows))
    (args.out / "bench_video.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out / 'bench_video.json'}, {result['timeline']}, {result['trace']}")
    return result


if __name__ == "__main__":
    main()
