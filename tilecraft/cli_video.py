"""`tilecraft video IN -o OUT --ops resize=640x360,blur=5,gray`: a video through the vision
kernels, with a progress bar in frames per second (see tilecraft.vision.video)."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Iterator
from typing import Any

DEFAULT_OPS = "resize=640x360,blur=5,gray"


def add_command(sub: Any) -> None:
    """The `video` subcommand's arguments."""
    p = sub.add_parser(
        "video", help="process a video with the vision kernels (decode, ops, encode)"
    )
    p.add_argument("input", help="a video file (anything FFmpeg reads)")
    p.add_argument("-o", "--output", help="the video to write (.mp4, .mkv, .avi); none: discard")
    p.add_argument("--ops", default=DEFAULT_OPS, help=f"the pipeline (default {DEFAULT_OPS})")
    p.add_argument("--batch", type=int, default=8, help="frames per batch (default 8)")
    p.add_argument("--device", help="cuda or cpu (default: the GPU if there is one)")
    p.add_argument("--codec", help="the encoder (default libx264, else mpeg4)")
    p.add_argument(
        "--decoder", default="auto", choices=("auto", "pyav", "torchcodec"), help="the decoder"
    )


def _progress(console: Any) -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        TextColumn("[bold]video"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[fps]:.1f} frames/s"),
        TimeElapsedColumn(),
        console=console,
    )


def run(args: argparse.Namespace) -> int:
    """Run `tilecraft video`; a VideoError propagates (the CLI prints it in one line)."""
    from rich.console import Console

    from tilecraft.runtime.cpu import SlowOnCPU
    from tilecraft.vision import video

    warnings.filterwarnings("ignore", category=SlowOnCPU)  # the notice below says it once
    console = Console(highlight=False)
    try:
        job = video.process(
            args.input,
            args.ops,
            args.output,
            batch=args.batch,
            device=args.device,
            codec=args.codec,
            decoder=args.decoder,
        )
    except ValueError as e:  # a bad --ops spec, batch or device
        print(f"tilecraft: {e}", file=sys.stderr)
        return 2
    console.print(f"decoder: {job.decoder}; kernels on {job.device}")
    if job.notice:
        console.print(job.notice)
    with _progress(console) as progress:
        task = progress.add_task("video", total=job.source.expected, fps=0.0)
        for done in _frames_done(job):
            progress.update(task, completed=done, fps=job.frames / max(job.elapsed(), 1e-9))
    stats = job.stats()
    where = f" into {args.output}" if args.output else ""
    line = f"{stats.frames} frames{where} at {stats.fps:.1f} frames/s"
    if stats.peak_bytes is not None:  # on a GPU
        line += (
            f"; GPU memory: peak {stats.peak_bytes / 2**20:.0f} MiB, buffer pool "
            f"{stats.pool_bytes / 2**20:.0f} MiB ({stats.pool_allocations} buffers)"
        )
    console.print(line)
    return 0


def _frames_done(job: Any) -> Iterator[int]:
    for _ in job:
        yield job.frames
