"""tilecraft.vision kernels against the same work in plain PyTorch (issue 16).

For each kernel, on a batch of frames: milliseconds, the bandwidth of the bytes it must
move (read once, written once), and the same for a PyTorch peer computing the same result
(`F.interpolate`, a reflect-padded depthwise `F.conv2d`, tensor formulas), whose output the
kernel's is checked against first. A device-to-device copy of the input gives the ceiling.
The fused pipeline row is 1080p NHWC uint8 frames -> 640x360 bilinear -> normalize -> NCHW
float16, against the PyTorch chain (and its `torch.compile` with `--compile`).

    PYTHONPATH=$PWD python benchmarks/bench_vision.py [--batch 16] [--effort quick]
    PYTHONPATH=$PWD python benchmarks/bench_vision.py --device cpu --tiny   # end to end, tiny

Kernels run with their heuristic configs unless `--effort` asks the autotuner (each kernel
and shape then tunes once, and is cached). On the CPU the times mean nothing (Triton's
interpreter); that mode checks the script. JSON goes to --out (benchmarks/results/).
"""

from __future__ import annotations

import argparse
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


def timer(device: torch.device, tiny: bool) -> Callable[[Callable[[], object]], float]:
    """Milliseconds per call: Triton's do_bench (L2 flushed) on a GPU, one call on the CPU."""
    if device.type == "cuda" and not tiny:
        from triton.testing import do_bench

        return lambda fn: float(do_bench(fn, warmup=25, rep=100))

    def once(fn: Callable[[], object]) -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    return once


def conv_reflect(x: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    r = taps.shape[0] // 2
    padded = F.pad(x, (r, r, r, r), mode="reflect")
    c = x.shape[1]
    return F.conv2d(padded, taps[None, None].expand(c, 1, *taps.shape).contiguous(), groups=c)


def yuv_peer(y: torch.Tensor, uv: torch.Tensor) -> torch.Tensor:
    from tilecraft.vision.color import B_U, G_U, G_V, R_V, Y_SCALE

    h, w = y.shape[-2:]
    chroma = uv.permute(0, 3, 1, 2).repeat_interleave(2, -2).repeat_interleave(2, -1)
    cb, cr = (chroma[:, i, :h, :w].float() - 128 for i in (0, 1))
    luma = (y.float() - 16) * Y_SCALE
    rgb = (luma + R_V * cr, luma + G_U * cb + G_V * cr, luma + B_U * cb)
    return torch.stack(rgb, 1).round().clamp(0, 255).to(torch.uint8)


def peer_pipeline(frames: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    mean = torch.tensor(MEAN, device=frames.device)[:, None, None]
    std = torch.tensor(STD, device=frames.device)[:, None, None]
    x = frames.permute(0, 3, 1, 2).float()
    x = F.interpolate(x, size, mode="bilinear", align_corners=False)
    return ((x / 255 - mean) / std).half()


def cases(frames: torch.Tensor, out_size: tuple[int, int]) -> list[tuple]:
    """(name, tilecraft call, PyTorch call, bytes moved, tolerance in output units)."""
    import tilecraft.vision as vision
    from tilecraft.vision.filters import gaussian_kernel1d

    n, h, w, _ = frames.shape
    nchw = frames.permute(0, 3, 1, 2).contiguous()
    floats = nchw.float()
    y = frames[..., 0].contiguous()
    uv = frames[:, : (h + 1) // 2, : (w + 1) // 2, 1:].contiguous()
    taps = gaussian_kernel1d(5, 1.1).to(frames.device)
    pixels, small = n * h * w, n * out_size[0] * out_size[1]
    half = (max(1, h // 2), max(1, w // 2))
    return [
        ("copy (ceiling)", frames.clone, frames.clone, 2 * 3 * pixels, 0),
        (
            "rgb_to_gray uint8",
            lambda: vision.rgb_to_gray(nchw),
            lambda: (floats[:, :1] * 0.2989 + floats[:, 1:2] * 0.587 + floats[:, 2:] * 0.114).to(
                torch.uint8
            ),
            4 * pixels,
            1,
        ),
        (
            "nv12_to_rgb",
            lambda: vision.nv12_to_rgb(y, uv),
            lambda: yuv_peer(y, uv),
            4.5 * pixels,
            1,
        ),
        (
            "normalize NHWC u8 -> NCHW f16",
            lambda: vision.normalize(frames, MEAN, STD, torch.float16, layout="NHWC"),
            lambda: (
                (
                    frames.permute(0, 3, 1, 2).float() / 255
                    - torch.tensor(MEAN, device=frames.device)[:, None, None]
                )
                / torch.tensor(STD, device=frames.device)[:, None, None]
            ).half(),
            9 * pixels,
            1e-2,
        ),
        (
            "resize bilinear f32 half-size",
            lambda: vision.resize(floats, half),
            lambda: F.interpolate(floats, half, mode="bilinear", align_corners=False),
            4 * 3 * (pixels + pixels // 4),
            1e-3,
        ),
        (
            "resize antialiased f32 half-size",
            lambda: vision.resize(floats, half, antialias=True),
            lambda: F.interpolate(floats, half, mode="bilinear", antialias=True),
            4 * 3 * (pixels + pixels // 4),
            1e-3,
        ),
        (
            "gaussian_blur 5x5 f32",
            lambda: vision.gaussian_blur(floats, 5, 1.1),
            lambda: conv_reflect(floats, taps[:, None] * taps[None, :]),
            2 * 4 * 3 * pixels,
            1e-3,
        ),
        (
            "preprocess fused u8 NHWC -> f16",
            lambda: vision.preprocess(frames, out_size, MEAN, STD),
            lambda: peer_pipeline(frames, out_size),
            3 * pixels + 6 * small,
            1e-2,
        ),
    ]


def measure(device: torch.device, args: argparse.Namespace) -> list[dict]:
    torch.manual_seed(0)
    h, w = (9, 16) if args.tiny else (args.height, args.width)
    out_size = (4, 7) if args.tiny else (360, 640)
    frames = torch.randint(0, 256, (args.batch, h, w, 3), dtype=torch.uint8, device=device)
    time_ms = timer(device, args.tiny)
    rows = []
    for name, ours, peer, nbytes, tol in cases(frames, out_size):
        expected, got = peer(), ours()
        error = (got.float() - expected.float()).abs().max().item() if got.numel() else 0.0
        row = {"kernel": name, "matches": error <= tol, "max_error": error}
        for who, fn in (("tilecraft", ours), ("torch", peer)):
            ms = time_ms(fn)
            row[f"{who}_ms"], row[f"{who}_tb_s"] = ms, nbytes / ms / 1e9
        rows.append(row)
    if args.compile:
        compiled = torch.compile(peer_pipeline)
        compiled(frames, out_size)
        rows.append(
            {
                "kernel": "preprocess: torch.compile peer",
                "torch_ms": time_ms(lambda: compiled(frames, out_size)),
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        f"{'kernel':36} {'ok':>3} {'tilecraft ms':>12} {'TB/s':>6} {'torch ms':>9} {'TB/s':>6}"
    ]
    for r in rows:
        ours = (
            f"{r['tilecraft_ms']:12.3f} {r['tilecraft_tb_s']:6.2f}"
            if "tilecraft_ms" in r
            else " " * 19
        )
        theirs = f"{r['torch_ms']:9.3f} {r.get('torch_tb_s', 0):6.2f}"
        lines.append(
            f"{r['kernel']:36} {'yes' if r.get('matches', True) else 'NO':>3} {ours} {theirs}"
        )
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="tiny frames: a quick end-to-end run")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--height", type=int, default=1080)
    p.add_argument("--width", type=int, default=1920)
    p.add_argument("--effort", default="none", help="autotuning effort (none, quick, full)")
    p.add_argument("--compile", action="store_true", help="also time the torch.compile peer")
    p.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_vision.json"
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict:
    """Measure, print the table, write the JSON; returns what was written."""
    args = parse(argv)
    device = torch.device(args.device)
    os.environ["TILECRAFT_AUTOTUNE_EFFORT"] = args.effort
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
        print("on the CPU: Triton's interpreter, times not meaningful")
    rows = measure(device, args)
    print(table(rows))
    result = {
        "rows": rows,
        "batch": args.batch,
        "device": str(device),
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
