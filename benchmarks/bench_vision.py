"""tilecraft.vision kernels against the same work in PyTorch and torchvision (issue 16).

For each kernel, on a batch of 1080p and of 4K frames: milliseconds and the bandwidth of
the bytes it must move (read once, written once), for tilecraft and its peers: plain
PyTorch computing the same result (`F.interpolate`, a reflect-padded depthwise `F.conv2d`,
tensor formulas), whose output tilecraft's is checked against first, and
`torchvision.transforms.v2.functional` where it has the op. A device-to-device copy of the
frames gives the ceiling. The frame rows are NHWC uint8 frames -> 640x360 (bilinear, then
antialiased as torchvision's default), uint8, and the same -> normalize -> NCHW float16
(the fused preprocessing kernel), against the same chain in PyTorch, in torchvision v2
and torchvision v2 under `torch.compile`.

    PYTHONPATH=$PWD python benchmarks/bench_vision.py --tune --out $OUT/bench_vision.json
    PYTHONPATH=$PWD python benchmarks/bench_vision.py --smoke   # CPU, tiny frames: checks
    PYTHONPATH=$PWD python benchmarks/bench_vision.py --variants --out $OUT/variants.json
    PYTHONPATH=$PWD python benchmarks/bench_vision.py --variants --only normalize,nv12 \
        --out $OUT/variants.json   # only the cases whose names contain these
    PYTHONPATH=$PWD python benchmarks/bench_vision.py --variants --only \
        "nv12,normalize,resize bilinear u8,preprocess bilinear" --out $OUT/words.json
        # the word kernels (NV12, normalize), taps of weight 0 skipped, and before
    PYTHONPATH=$PWD python benchmarks/bench_vision.py --sizes 1080p \
        --only "preprocess antialiased" --out $OUT/aa.json   # with its peers, and copy
    PYTHONPATH=$PWD python benchmarks/bench_vision.py --variants \
        --only "preprocess antialiased" --out $OUT/aa-variants.json
        # whole-factor shrinks (1080p -> 640x360) by their kernel and by those before

Kernels run with their heuristic configs, or with `--tune` each kernel is tuned first for
each shape (effort quick, `--tune-budget` seconds; the tuned configs are reported and
cached in the tuning database). `--variants` times instead, at 1080p, each config that
`variant_configs` lists for the resize, blur, color, normalize and preprocessing kernels
(tile shapes, the planes a resize program covers, one or two blur passes or a window of
rows, channels in a normalize tile or looped over), each checked
against the reference, to choose their defaults from. On the CPU the times mean nothing
(Triton's interpreter).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import vision_peers  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIZES = {"1080p": (1080, 1920), "4k": (2160, 3840)}
# the same shapes of work, tiny: 1080p shrinks by 3 (whole factors), 4K by 6
SMOKE_SIZES = {"1080p": (9, 15), "4k": (18, 30)}
OUT_SIZE, SMOKE_OUT_SIZE = (360, 640), (3, 5)
Fn = Callable[[], object]


class Case:
    """One kernel: tilecraft's call, the reference it must match, the peers timed.

    (A plain class: the tests load this script without registering it as a module, which
    dataclasses need.)"""

    def __init__(self, name: str, ours: Fn, reference: Fn, nbytes: float, tol: float) -> None:
        self.name, self.ours, self.reference = name, ours, reference
        self.nbytes = nbytes  # read once + written once
        self.tol = tol  # max error allowed, in output units
        self.peers: dict[str, Fn] = {}


def timer(device: torch.device, smoke: bool) -> Callable[[Fn], float]:
    """Milliseconds per call: Triton's do_bench (L2 flushed) on a GPU, one call on the CPU."""
    if device.type == "cuda" and not smoke:
        from triton.testing import do_bench

        return lambda fn: float(do_bench(fn, warmup=25, rep=100))

    def once(fn: Fn) -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    return once


def cpu_ms(fn: Fn, repeats: int = 3) -> float:
    """Milliseconds per call of work on the host's CPU: the best of a few calls."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return min(times)


def torchvision_functional():
    """`torchvision.transforms.v2.functional`, or None where torchvision is not installed."""
    try:
        from torchvision.transforms.v2 import functional
    except Exception as e:  # noqa: BLE001 - a torchvision built for another torch fails here
        print(f"torchvision peers skipped: {type(e).__name__}: {e}")
        return None
    return functional


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


def normalized(x: torch.Tensor) -> torch.Tensor:
    """Float NCHW pixels 0..255 normalized by ImageNet's statistics, as float16."""
    mean = torch.tensor(MEAN, device=x.device)[:, None, None]
    std = torch.tensor(STD, device=x.device)[:, None, None]
    return ((x / 255 - mean) / std).half()


def peer_pipeline(frames: torch.Tensor, size: tuple[int, int], antialias: bool) -> torch.Tensor:
    x = frames.permute(0, 3, 1, 2).float()
    return normalized(F.interpolate(x, size, mode="bilinear", antialias=antialias))


def torchvision_pipeline(tvf) -> Callable[..., torch.Tensor]:
    """torchvision v2's pipeline: resize the uint8 frames, to float, normalize, float16
    (a closure over the functional module, so that `torch.compile` traces no import)."""

    def pipeline(frames: torch.Tensor, size: tuple[int, int], antialias: bool) -> torch.Tensor:
        x = tvf.resize(frames.permute(0, 3, 1, 2), list(size), antialias=antialias)
        x = tvf.to_dtype(x, torch.float32, scale=True)
        return tvf.normalize(x, list(MEAN), list(STD)).half()

    return pipeline


def color_cases(frames: torch.Tensor, tvf) -> list[Case]:
    import tilecraft.vision as vision

    n, h, w, _ = frames.shape
    nchw = frames.permute(0, 3, 1, 2).contiguous()
    floats = nchw.float()
    y = frames[..., 0].contiguous()
    uv = frames[:, : (h + 1) // 2, : (w + 1) // 2, 1:].contiguous()
    pixels = n * h * w
    gray = Case(
        "rgb_to_gray uint8",
        lambda: vision.rgb_to_gray(nchw),
        lambda: (floats[:, :1] * 0.2989 + floats[:, 1:2] * 0.587 + floats[:, 2:] * 0.114).to(
            torch.uint8
        ),
        4 * pixels,
        1,
    )
    nv12 = Case(
        "nv12_to_rgb", lambda: vision.nv12_to_rgb(y, uv), lambda: yuv_peer(y, uv), 4.5 * pixels, 1
    )
    norm = Case(
        "normalize NHWC u8 -> NCHW f16",
        lambda: vision.normalize(frames, MEAN, STD, torch.float16, layout="NHWC"),
        lambda: normalized(frames.permute(0, 3, 1, 2).float()),
        9 * pixels,
        1e-2,
    )
    if tvf is not None:
        gray.peers["torchvision"] = lambda: tvf.rgb_to_grayscale(nchw)
        norm.peers["torchvision"] = lambda: tvf.normalize(
            tvf.to_dtype(frames.permute(0, 3, 1, 2), torch.float32, scale=True),
            list(MEAN),
            list(STD),
        ).half()
    return [gray, nv12, norm]


def before_cases(frames: torch.Tensor) -> list[Case]:
    """Kernels a faster one replaced where it applies, to time against it (`--variants`)."""
    from tilecraft.vision import color, preprocessing
    from tilecraft.vision.memory import constant

    n, h, w, _ = frames.shape
    y = frames[..., 0].contiguous()
    uv = frames[:, : (h + 1) // 2, : (w + 1) // 2, 1:].contiguous()
    out = torch.empty(n, 3, h, w, dtype=torch.uint8, device=frames.device)
    mean, std = constant(MEAN, frames.device), constant(STD, frames.device)
    floats = torch.empty(n, 3, h, w, dtype=torch.float16, device=frames.device)
    return [
        Case(
            "nv12_to_rgb per-pixel gathers (before)",
            lambda: color._yuv420_to_rgb(y, uv[..., 0], uv[..., 1], out),
            lambda: yuv_peer(y, uv),
            4.5 * n * h * w,
            1,
        ),
        Case(
            "normalize NHWC u8 -> NCHW f16 per-channel bytes (before)",
            lambda: preprocessing._normalize(frames.permute(0, 3, 1, 2), mean, std, floats, 255.0),
            lambda: normalized(frames.permute(0, 3, 1, 2).float()),
            9 * n * h * w,
            1e-2,
        ),
    ]


def geometry_cases(frames: torch.Tensor, tvf) -> list[Case]:
    import tilecraft.vision as vision
    from tilecraft.vision.filters import gaussian_kernel1d

    n, h, w, _ = frames.shape
    floats = frames.permute(0, 3, 1, 2).contiguous().float()
    half = (max(1, h // 2), max(1, w // 2))
    taps = gaussian_kernel1d(5, 1.1).to(frames.device)
    moved = 4 * 3 * (n * h * w + n * half[0] * half[1])
    cases = [
        Case(
            f"resize {'antialiased' if aa else 'bilinear'} f32 half-size",
            lambda aa=aa: vision.resize(floats, half, antialias=aa),
            lambda aa=aa: F.interpolate(floats, half, mode="bilinear", antialias=aa),
            moved,
            1e-3,
        )
        for aa in (False, True)
    ]
    cases.append(
        Case(
            "gaussian_blur 5x5 f32",
            lambda: vision.gaussian_blur(floats, 5, 1.1),
            lambda: conv_reflect(floats, taps[:, None] * taps[None, :]),
            2 * 4 * 3 * n * h * w,
            1e-3,
        )
    )
    if tvf is not None:
        for case, aa in zip(cases[:2], (False, True), strict=True):
            case.peers["torchvision"] = lambda aa=aa: tvf.resize(floats, list(half), antialias=aa)
        cases[2].peers["torchvision"] = lambda: tvf.gaussian_blur(floats, [5, 5], [1.1, 1.1])
    return cases


def frame_resize_cases(frames: torch.Tensor, out_size: tuple[int, int], tvf) -> list[Case]:
    """uint8 NHWC frames resized to `out_size`, uint8 (what a video pipeline does)."""
    import tilecraft.vision as vision

    n, h, w, c = frames.shape
    view = frames.permute(0, 3, 1, 2)
    moved = c * n * (h * w + out_size[0] * out_size[1])

    def reference(aa: bool) -> torch.Tensor:
        x = F.interpolate(view.float(), out_size, mode="bilinear", antialias=aa)
        return x.round().clamp(0, 255).to(torch.uint8)

    cases = []
    for aa in (False, True):
        case = Case(
            f"resize {'antialiased' if aa else 'bilinear'} u8 NHWC -> {out_size[1]}x{out_size[0]}",
            lambda aa=aa: vision.resize(frames, out_size, layout="NHWC", antialias=aa).permute(
                0, 3, 1, 2
            ),
            lambda aa=aa: reference(aa),
            moved,
            1,
        )
        if tvf is not None:
            case.peers["torchvision"] = lambda aa=aa: tvf.resize(view, list(out_size), antialias=aa)
        cases.append(case)
    return cases


def pipeline_cases(frames: torch.Tensor, out_size: tuple[int, int], tvf, compile_peer: bool):
    import tilecraft.vision as vision

    n, h, w, c = frames.shape
    moved = c * n * h * w + 2 * c * n * out_size[0] * out_size[1]
    cases = []
    for aa in (False, True):
        case = Case(
            f"preprocess {'antialiased' if aa else 'bilinear'} u8 NHWC -> f16 NCHW",
            lambda aa=aa: vision.preprocess(frames, out_size, MEAN, STD, antialias=aa),
            lambda aa=aa: peer_pipeline(frames, out_size, aa),
            moved,
            1e-2,
        )
        if tvf is not None:
            pipeline = torchvision_pipeline(tvf)
            case.peers["torchvision"] = lambda aa=aa, fn=pipeline: fn(frames, out_size, aa)
            if compile_peer:  # one compiled function per pipeline (no recompiles)
                compiled = torch.compile(pipeline, dynamic=False)
                case.peers["torchvision compiled"] = lambda fn=compiled, aa=aa: fn(
                    frames, out_size, aa
                )
        cases.append(case)
    return cases


def vision_kernels() -> list:
    """Every tilecraft kernel of tilecraft.vision."""
    import tilecraft as tc
    from tilecraft.vision import (
        antialias,
        antialias_batch,
        antialias_whole,
        color,
        downscale,
        filters,
        geometry,
        preprocessing,
    )

    modules = (
        antialias,
        antialias_batch,
        antialias_whole,
        color,
        downscale,
        filters,
        geometry,
        preprocessing,
    )
    return [k for m in modules for k in vars(m).values() if isinstance(k, tc.Kernel)]


@contextlib.contextmanager
def tuning(budget_s: float | None) -> Iterator[None]:
    """With a budget, every vision kernel tunes (effort quick) at its first call per shape."""
    kernels = vision_kernels()
    saved = [(k.settings.autotune_effort, k.settings.autotune_budget_s) for k in kernels]
    for k in kernels:
        k.settings.autotune_effort = "quick" if budget_s else "none"
        k.settings.autotune_budget_s = budget_s
    try:
        yield
    finally:
        for k, (effort, budget) in zip(kernels, saved, strict=True):
            k.settings.autotune_effort, k.settings.autotune_budget_s = effort, budget


def configs_of(before: dict[int, object]) -> list[str]:
    """`kernel: config` of the kernels specialized since `before` (a `bound_kernels()`)."""
    return [
        f"{name}: {running_config(bound)!r}"
        for key, (name, bound) in bound_kernels().items()
        if key not in before
    ]


def running_config(bound: Any) -> object:
    """The config of the launcher a specialization runs (the default before any call)."""
    chosen = [c for c, launch in bound._compiled.items() if launch is bound.launcher]
    return chosen[0] if chosen else bound.default_config


def bound_kernels() -> dict[int, tuple[str, object]]:
    return {id(b): (k.fn.__name__, b) for k in vision_kernels() for b in list(k._bound.values())}


def run_case(case: Case, time_ms: Callable[[Fn], float]) -> dict:
    before = bound_kernels()
    expected, got = case.reference(), case.ours()  # the first call of a kernel tunes it
    error = (got.float() - expected.float()).abs().max().item() if got.numel() else 0.0
    row: dict = {"kernel": case.name, "matches": error <= case.tol, "max_error": error}
    row["configs"] = configs_of(before)
    timed = {"tilecraft": case.ours, "torch": case.reference, **case.peers}
    for who, fn in timed.items():
        ms = cpu_ms(fn) if who.endswith(" cpu") else time_ms(fn)
        row[f"{who}_ms"], row[f"{who}_tb_s"] = ms, case.nbytes / ms / 1e9
    return row


def measure(device: torch.device, args: argparse.Namespace) -> list[dict]:
    torch.manual_seed(0)
    sizes = SMOKE_SIZES if args.smoke else SIZES
    out_size = SMOKE_OUT_SIZE if args.smoke else OUT_SIZE
    time_ms = timer(device, args.smoke)
    tvf = torchvision_functional()
    rows = []
    for resolution in args.sizes:
        h, w = sizes[resolution]
        frames = torch.randint(0, 256, (args.batch, h, w, 3), dtype=torch.uint8, device=device)
        copy = Case("copy (ceiling)", frames.clone, frames.clone, 2 * frames.numel(), 0)
        cases = [copy, *color_cases(frames, tvf), *geometry_cases(frames, tvf)]
        cases += frame_resize_cases(frames, out_size, tvf)
        cases += pipeline_cases(frames, out_size, tvf, args.compile and device.type == "cuda")
        if args.libraries:
            vision_peers.attach(cases, vision_peers.kornia_peers(frames, out_size), "kornia")
            vision_peers.attach(cases, vision_peers.opencv_peers(frames, out_size), "opencv cpu")
        for case in cases:
            if case is copy or not args.only or any(part in case.name for part in args.only):
                rows.append({"frames": resolution, **run_case(case, time_ms)})
    return rows


def variant_configs() -> dict[str, tuple]:
    """Per case: the kernel (module attribute) and the labelled configs `--variants` times,
    and optionally attributes of `tilecraft.vision` modules set meanwhile (which kernel the
    preprocess runs); a name's " [...]" suffix tells apart entries of one case.

    A gather reads coalesced only where a tile holds one output per thread (block_h *
    block_w = 32 * num_warps; Triton gives a thread 4 adjacent float32 outputs otherwise),
    so most variants pick such tiles; "heuristic" is what the kernel runs untuned.
    """
    from tilecraft import Config

    def resize(planes: str, hw: list[int], warps: int, more: dict | None = None) -> Config:
        blocks = [64, 64, 1, 64, 1, 64]  # the loops of the other `planes` do not launch
        at = {"one": 0, "channels": 2, "all": 4}[planes]
        blocks[at : at + 2] = hw
        return Config(block_sizes=blocks, num_warps=warps, planes=planes, **(more or {}))

    def blur(one_pass: bool, rows: list[int], cols: list[int], warps: int) -> Config:
        taps = 25 if one_pass else 0
        return Config(block_sizes=rows + cols + [64], num_warps=warps, one_pass_taps=taps)

    def preprocess(planes: str, hw: list[int], warps: int, more: dict | None = None) -> Config:
        blocks = hw + [1, 64] if planes == "channels" else [64, 64] + hw
        return Config(block_sizes=blocks, num_warps=warps, planes=planes, **(more or {}))

    def by_pass(rows: list[int], row_warps: int, cols: list[int], col_warps: int):
        """Configs for `_average_rows` by pass: the row pass reads along its tiles' last
        axis, the column pass (a transposed view) along the one before."""
        row_config = Config(block_sizes=rows, num_warps=row_warps)
        col_config = Config(block_sizes=cols, num_warps=col_warps)
        return lambda args: row_config if args[0].stride(3) == 1 else col_config

    def by_stride(
        rows: list[int], row_warps: int, cols: list[int], col_warps: int, channels: str = "one"
    ):
        """Configs for `_average_rows` by pass, for NHWC frames: the row pass gathers along
        the channel stride (its view's last axis has stride C; `channels="all"`: all of a
        pixel's channels per program), the column pass (a transposed float32
        intermediate) reads along the axis before the last."""
        blocks = rows if channels == "one" else [64, 64, *rows]
        row_config = Config(block_sizes=blocks, num_warps=row_warps, channels=channels)
        col_config = Config(block_sizes=cols, num_warps=col_warps)
        return lambda args: col_config if args[0].stride(2) == 1 else row_config

    def norm(channels: str, hw: list[int], warps: int) -> Config:
        blocks = [4, 64, 64, 1, 64]  # the loop of the other mode does not launch
        at = 1 if channels == "tile" else 3
        blocks[at : at + 2] = hw
        return Config(block_sizes=blocks, num_warps=warps, channels=channels)

    def words(
        hw: list[int],
        warps: int,
        stores: str = "stacked",
        arithmetic: str = "divide",
        convert: str = "float",
        group: int = 4,
    ) -> Config:
        knobs = dict(stores=stores, arithmetic=arithmetic, convert=convert, group=group)
        return Config(block_sizes=hw, num_warps=warps, **knobs)

    def plane(hw: list[int], warps: int, more: dict | None = None) -> Config:
        return Config(block_sizes=hw, num_warps=warps, **(more or {}))

    def window(rows: int, strip: int, warps: int) -> Config:
        return Config(block_sizes=[64, 64, 64, 64, strip], num_warps=warps, window_rows=rows)

    def frames(
        hw: list[int],
        step: int,
        group: int,
        warps: int,
        convert: str = "bits",
        stages: int = 0,
        regs: int = 0,
        **packed: str,
    ) -> Config:
        """A config of the antialiased kernels walking `group` frames (antialias_batch.py):
        output tiles of `hw` (for every channel), `step` input columns (planes) or samples
        (packed) per step, uint8 -> float16 by `convert`; with `stages`, the loop over
        frames software-pipelined (the next frames' loads in flight); with `regs`, at most
        that many registers a thread (more programs an SM: 920 programs of 16 x 16 fit one
        wave of 7 an SM at 72); `packed`: the packed kernel's `stage` and `order`."""
        rows, cols = hw
        tunables = dict(rows=rows, cols=cols, step=step, frames=group, convert=convert, **packed)
        pipelined = dict(range_num_stages=[stages]) if stages else {}
        capped = dict(maxnreg=regs) if regs else {}
        return Config(num_warps=warps, **tunables, **pipelined, **capped)

    def whole(hw: list[int], warps: int, group: int = 1, order: str = "pixels") -> Config:
        """A config of the whole-factor antialiased kernel (antialias_whole.py): `hw` output
        rows and columns (every channel) a program, a strip of rows, `group`
        frames a program, lanes in `order`."""
        rows, cols = hw
        knobs = dict(rows=rows, cols=cols, frames=group, order=order)
        return Config(num_warps=warps, **knobs)

    read = {"zero_taps": "read"}
    batch = {"antialias_whole.ENABLED": False}  # the kernels whole factors took before
    both = dict(stage="halves", order="lanes")  # the packed antialiased kernel's new paths
    wgmma = dict(stage="halves", order="samples")
    bits = {"levels": "bits"}
    fast = ("multiply", "bits")  # normalize by one multiply-add, bytes to floats by bits
    resizes = [
        ("64x64 w4 (old default)", resize("one", [64, 64], 4)),
        ("1x128 w4", resize("one", [1, 128], 4)),
        ("2x128 w8", resize("one", [2, 128], 8)),
        ("channels 1x128 w4", resize("channels", [1, 128], 4)),
        ("channels 2x128 w8", resize("channels", [2, 128], 8)),
        ("all 1x128 w4", resize("all", [1, 128], 4)),
        ("all 2x128 w8", resize("all", [2, 128], 8)),
        ("all 2x128 w8 unroll 2", resize("all", [2, 128], 8, {"range_unroll_factors": [2]})),
    ]
    return {
        "resize bilinear f32 half-size": ("geometry._resize_bilinear", resizes),
        # zero_taps "skip" (the default now): taps of weight 0 are not read, at 1080p ->
        # 360p three in four (a third of the rows); "read" as before
        "resize bilinear u8 NHWC -> {w}x{h}": (
            "geometry._resize_bilinear",
            [
                ("channels 2x128 w8 read (old default)", resize("channels", [2, 128], 8, read)),
                ("channels 2x64 w4", resize("channels", [2, 64], 4)),
                ("channels 4x64 w8", resize("channels", [4, 64], 8)),
                ("all 1x128 w4", resize("all", [1, 128], 4)),
                ("all 2x128 w8", resize("all", [2, 128], 8)),
                ("all 2x64 w4", resize("all", [2, 64], 4)),
                ("all 4x64 w8", resize("all", [4, 64], 8)),
                ("all 4x128 w16", resize("all", [4, 128], 16)),
                ("all 1x256 w8", resize("all", [1, 256], 8)),
                (
                    "all 2x128 w8 unroll 2",
                    resize("all", [2, 128], 8, {"range_unroll_factors": [2]}),
                ),
            ],
        ),
        "gaussian_blur 5x5 f32": (
            "filters._separable",
            [
                ("two-pass 64x64 w4 (old default)", blur(False, [64, 64], [64, 64], 4)),
                ("two-pass 1x128 + 8x128 w4", blur(False, [1, 128], [8, 128], 4)),
                ("two-pass 2x128 + 8x128 w8", blur(False, [2, 128], [8, 128], 8)),
                ("one-pass 1x128 w4", blur(True, [1, 128], [1, 64], 4)),
                ("one-pass 2x128 w8", blur(True, [2, 128], [1, 64], 8)),
                ("one-pass 8x32 w8", blur(True, [8, 32], [1, 64], 8)),
                ("row window 8 x 128 w4", window(8, 128, 4)),
                ("row window 16 x 128 w4", window(16, 128, 4)),
                ("row window 8 x 256 w8", window(8, 256, 8)),
                ("row window 16 x 256 w8", window(16, 256, 8)),
                ("row window 4 x 128 w4", window(4, 128, 4)),
            ],
        ),
        "resize antialiased f32 half-size": (
            "downscale._average_rows",
            [
                ("8x16 w4", Config(block_sizes=[8, 16], num_warps=4)),
                ("16x16 w8", Config(block_sizes=[16, 16], num_warps=8)),
                ("rows 1x128 w4, columns 64x64 w4", by_pass([1, 128], 4, [64, 64], 4)),
                ("rows 2x128 w8, columns 64x64 w4", by_pass([2, 128], 8, [64, 64], 4)),
                ("rows 2x128 w8, columns 128x16 w8", by_pass([2, 128], 8, [128, 16], 8)),
            ],
        ),
        "resize antialiased u8 NHWC -> {w}x{h}": (
            "downscale._average_rows",
            [
                ("rows 1x128 w4, columns 64x64 w4", by_stride([1, 128], 4, [64, 64], 4)),
                (
                    "rows all channels 1x128 w4, columns 64x64 w4",
                    by_stride([1, 128], 4, [64, 64], 4, "all"),
                ),
                (
                    "rows all channels 2x128 w8, columns 64x64 w4",
                    by_stride([2, 128], 8, [64, 64], 4, "all"),
                ),
                (
                    "rows all channels 1x128 w4, columns 128x2 w8",
                    by_stride([1, 128], 4, [128, 2], 8, "all"),
                ),
                ("rows 2x64 w4, columns 64x64 w4", by_stride([2, 64], 4, [64, 64], 4)),
                ("rows 2x128 w8, columns 64x64 w4", by_stride([2, 128], 8, [64, 64], 4)),
                ("rows 1x128 w4, columns 128x1 w4", by_stride([1, 128], 4, [128, 1], 4)),
                ("rows 1x128 w4, columns 128x2 w8", by_stride([1, 128], 4, [128, 2], 8)),
                ("rows 2x64 w4, columns 128x16 w8", by_stride([2, 64], 4, [128, 16], 8)),
            ],
        ),
        # 32-bit words of NHWC rows (four pixels of three channels: three words), each
        # channel's four values stored together ("stacked") or apart; the formula's two
        # divisions or one multiply-add per value ("multiply")
        "normalize NHWC u8 -> NCHW f16": (
            "preprocessing._normalize_words",
            [
                ("words 1x128 w4", words([1, 128], 4)),
                ("words 1x128 w4 strided", words([1, 128], 4, "strided")),
                ("words 1x128 w4 multiply", words([1, 128], 4, arithmetic="multiply")),
                ("words 2x128 w8 multiply", words([2, 128], 8, arithmetic="multiply")),
                ("words 1x64 w2 multiply", words([1, 64], 2, arithmetic="multiply")),
                ("words 1x128 w4 bits", words([1, 128], 4, convert="bits")),
                ("words 1x128 w4 multiply bits", words([1, 128], 4, "stacked", *fast)),
                ("words 1x256 w8 multiply bits", words([1, 256], 8, "stacked", *fast)),
                ("words 1x128 w4 strided multiply bits", words([1, 128], 4, "strided", *fast)),
                ("words g8 1x128 w4", words([1, 128], 4, group=8)),
                ("words g8 1x128 w4 multiply bits", words([1, 128], 4, "stacked", *fast, 8)),
                ("words g8 1x64 w2 multiply bits", words([1, 64], 2, "stacked", *fast, 8)),
                ("words g8 1x256 w8 multiply bits", words([1, 256], 8, "stacked", *fast, 8)),
                ("words g8 2x128 w8 multiply bits", words([2, 128], 8, "stacked", *fast, 8)),
            ],
        ),
        # the kernel before: each channel's bytes loaded apart (now for other layouts)
        "normalize NHWC u8 -> NCHW f16 per-channel bytes (before)": (
            "preprocessing._normalize",
            [
                ("loop 1x128 w4", norm("loop", [1, 128], 4)),
                ("tile 64x64 w4", norm("tile", [64, 64], 4)),
                ("loop 1x1024 w4", norm("loop", [1, 1024], 4)),
                ("loop 1x512 w8", norm("loop", [1, 512], 8)),
            ],
        ),
        # 16-bit words: tiles of chroma rows x words (two pixels each); a thread holds
        # block_w * block_h / (32 * num_warps) words, 8 per 16-byte access
        "nv12_to_rgb": (
            "color._yuv420_words",
            [
                ("words 1x512 w4", plane([1, 512], 4)),
                ("words 1x1024 w4", plane([1, 1024], 4)),
                ("words 2x512 w4", plane([2, 512], 4)),
                ("words 2x1024 w8", plane([2, 1024], 8)),
                ("words 1x512 w4 bits", plane([1, 512], 4, bits)),
                ("words 1x1024 w4 bits", plane([1, 1024], 4, bits)),
                ("words 1x1024 w8 bits", plane([1, 1024], 8, bits)),
                ("words 2x512 w4 bits", plane([2, 512], 4, bits)),
                ("words 2x512 w8 bits", plane([2, 512], 8, bits)),
                ("words 2x1024 w8 bits", plane([2, 1024], 8, bits)),
                ("words 4x256 w4 bits", plane([4, 256], 4, bits)),
            ],
        ),
        # the kernel before: each output gathers its chroma bytes (now for odd widths)
        "nv12_to_rgb per-pixel gathers (before)": (
            "color._yuv420_to_rgb",
            [("4x128 w4 (old default)", plane([4, 128], 4)), ("1x256 w4", plane([1, 256], 4))],
        ),
        "rgb_to_gray uint8": (
            "color._gray",
            [
                ("1x2048 w4", plane([1, 2048], 4)),
                ("2x1024 w4", plane([2, 1024], 4)),
                ("1x4096 w8", plane([1, 4096], 8)),
                ("4x1024 w8", plane([4, 1024], 8)),
                ("8x512 w8", plane([8, 512], 8)),
                ("16x256 w8", plane([16, 256], 8)),
                ("32x128 w4", plane([32, 128], 4)),
                ("1x512 w4", plane([1, 512], 4)),
            ],
        ),
        "preprocess antialiased u8 NHWC -> f16 NCHW [whole]": (
            "antialias_whole._whole_frames",
            [
                ("strip 8x32 w2 channels", whole([8, 32], 2, order="channels")),
                ("strip 8x32 w4", whole([8, 32], 4)),
                ("strip 8x64 w4", whole([8, 64], 4)),
                ("strip 8x16 w2", whole([8, 16], 2)),
                ("strip 16x32 w2", whole([16, 32], 2)),
                ("strip 4x32 w2", whole([4, 32], 2)),
                ("strip 4x64 w2", whole([4, 64], 2)),
                ("strip 8x32 w2 f2", whole([8, 32], 2, group=2)),
                ("strip 8x64 w2 loop", whole([8, 64], 2, order="loop")),
                ("strip 8x128 w4 loop", whole([8, 128], 4, order="loop")),
                ("strip 4x128 w4 loop", whole([4, 128], 4, order="loop")),
            ],
            {"antialias_whole.ENABLED": True},
        ),
        "preprocess antialiased u8 NHWC -> f16 NCHW": (
            "antialias_batch._packed_frames",
            [
                ("packed 16x16 s64 f8 w4 stages 2", frames([16, 16], 64, 8, 4, stages=2)),
                ("packed 16x16 w4 lanes", frames([16, 16], 64, 16, 4, order="lanes")),
                ("packed 16x16 w4 halves", frames([16, 16], 64, 16, 4, stage="halves")),
                ("packed 16x16 w4 lanes halves", frames([16, 16], 64, 16, 4, **both)),
                (
                    "packed 16x16 w4 lanes halves maxnreg 72",
                    frames([16, 16], 64, 16, 4, regs=72, **both),
                ),
                ("packed 16x16 f8 w4 lanes halves", frames([16, 16], 64, 8, 4, **both)),
                (
                    "packed 16x16 w4 lanes halves stages 2",
                    frames([16, 16], 64, 16, 4, stages=2, **both),
                ),
                ("packed 16x16 w4 samples halves", frames([16, 16], 64, 16, 4, **wgmma)),
                ("packed 16x16 w4 samples bytes", frames([16, 16], 64, 16, 4, order="samples")),
                (
                    "packed 16x16 w4 samples halves stages 2",
                    frames([16, 16], 64, 16, 4, stages=2, **wgmma),
                ),
                ("packed 16x16 f8 w4 samples halves", frames([16, 16], 64, 8, 4, **wgmma)),
            ],
            {**batch, "antialias_batch.KERNEL": "packed"},
        ),
        "preprocess antialiased u8 NHWC -> f16 NCHW [planes]": (
            "antialias_batch._planes_frames",
            [
                ("planes 16x32 s32 f16 w4", frames([16, 32], 32, 16, 4)),
                ("planes 16x32 s32 f16 w4 stages 2", frames([16, 32], 32, 16, 4, stages=2)),
            ],
            {**batch, "antialias_batch.KERNEL": "planes"},
        ),
        "preprocess antialiased u8 NHWC -> f16 NCHW [tile]": (
            "antialias._antialias_normalize",
            [
                ("16x32 s32 (before)", Config(rows=16, cols=32, step=32)),
                ("32x32 s32", Config(rows=32, cols=32, step=32)),
            ],
            {**batch, "antialias_batch.KERNEL": "tile"},
        ),
        "preprocess bilinear u8 NHWC -> f16 NCHW": (
            "preprocessing._resize_normalize",
            [
                ("1x128 w4 read (old default)", preprocess("channels", [1, 128], 4, read)),
                ("64x64 w4", preprocess("channels", [64, 64], 4)),
                ("1x128 w4", preprocess("channels", [1, 128], 4)),
                ("2x128 w8", preprocess("channels", [2, 128], 8)),
                ("4x64 w8", preprocess("channels", [4, 64], 8)),
                ("all 1x128 w4", preprocess("all", [1, 128], 4)),
                ("all 2x128 w8", preprocess("all", [2, 128], 8)),
                ("all 4x128 w16", preprocess("all", [4, 128], 16)),
            ],
        ),
    }


@contextlib.contextmanager
def forced(kernel, config) -> Iterator[None]:
    """Within it, `kernel` runs `config` (None: its own choice; a function: the config it
    returns for a call's arguments), compiled afresh."""
    saved = kernel.config, kernel._bound
    kernel._bound = {}
    if callable(config):
        kernel.config_for = lambda bound, args: config(args)
    else:
        kernel.config = config
    try:
        yield
    finally:
        kernel.config, kernel._bound = saved
        vars(kernel).pop("config_for", None)


@contextlib.contextmanager
def routed(settings: dict | None = None) -> Iterator[None]:
    """Within it, the `tilecraft.vision` modules have the attributes `settings` gives (keyed
    "module.NAME": which kernel the antialiased preprocess runs)."""
    import importlib

    places = {}
    for key in settings or {}:
        module, name = key.split(".")
        places[key] = (importlib.import_module(f"tilecraft.vision.{module}"), name)
    saved = {key: getattr(module, name) for key, (module, name) in places.items()}
    for key, value in (settings or {}).items():
        setattr(*places[key], value)
    try:
        yield
    finally:
        for key, value in saved.items():
            setattr(*places[key], value)


def kernel_at(path: str):
    import importlib

    module, name = path.split(".")
    return getattr(importlib.import_module(f"tilecraft.vision.{module}"), name)


def measure_variants(device: torch.device, args: argparse.Namespace) -> list[dict]:
    """The `variant_configs` of each case at 1080p (heuristic first), against torch."""
    torch.manual_seed(0)
    h, w = (SMOKE_SIZES if args.smoke else SIZES)["1080p"]
    out_size = SMOKE_OUT_SIZE if args.smoke else OUT_SIZE
    time_ms = timer(device, args.smoke)
    frames = torch.randint(0, 256, (args.batch, h, w, 3), dtype=torch.uint8, device=device)
    cases = {c.name: c for c in color_cases(frames, None)}
    cases.update({c.name: c for c in geometry_cases(frames, None)})
    cases.update({c.name: c for c in frame_resize_cases(frames, out_size, None)})
    cases.update({c.name: c for c in pipeline_cases(frames, out_size, None, False)})
    cases.update({c.name: c for c in before_cases(frames)})
    rows = []
    for name, (path, variants, *route) in variant_configs().items():
        name = name.format(w=out_size[1], h=out_size[0])
        if args.only and not any(part in name for part in args.only):
            continue
        case, kernel = cases[name.split(" [")[0]], kernel_at(path)
        case.peers = {}
        for label, config in [("heuristic", None), *variants]:
            try:
                with (
                    forced(kernel, config),
                    routed(*route),
                    warnings.catch_warnings(record=True) as caught,
                ):
                    warnings.simplefilter("always")
                    row = run_case(case, time_ms)
            except Exception as e:  # noqa: BLE001 - one failing variant must not end the run
                row = {"kernel": name, "matches": False, "error": f"{type(e).__name__}: {e}"}
            else:  # a compile too slow for its deadline runs a safe config instead: say so
                fallbacks = [str(w.message) for w in caught if "instead" in str(w.message)]
                row.update({"error": fallbacks[0]} if fallbacks else {})
            row["kernel"] = name  # with its " [...]" suffix, if any
            row["config"] = "by pass" if callable(config) else repr(config)
            rows.append({"frames": "1080p", **row, "variant": label})
            print(f"{name} | {label}: {row.get('tilecraft_ms', row.get('error'))}")
    return rows


def variants_table(rows: list[dict]) -> str:
    lines = ["| kernel | variant | ok | tilecraft ms | TB/s | torch ms | TB/s |", "|" + "---|" * 7]
    for r in rows:
        ok = "yes" if r["matches"] else "NO"
        if "error" in r:
            lines.append(f"| {r['kernel']} | {r['variant']} | {r['error'][:120]} | | | | |")
            continue
        lines.append(
            f"| {r['kernel']} | {r['variant']} | {ok} | {r['tilecraft_ms']:.3f} | "
            f"{r['tilecraft_tb_s']:.2f} | {r['torch_ms']:.3f} | {r['torch_tb_s']:.2f} |"
        )
    return "\n".join(lines)


PEERS = ("tilecraft", "torch", "torchvision", "torchvision compiled", "kornia", "opencv cpu")


def table(rows: list[dict]) -> str:
    """A markdown table: ms and TB/s of each implementation, per kernel and frame size."""
    head = "| frames | kernel | ok | " + " | ".join(f"{p} ms | TB/s" for p in PEERS) + " |"
    lines = [head, "|" + "---|" * (3 + 2 * len(PEERS))]
    for r in rows:
        cells = [
            f"{r[p + '_ms']:.3f} | {r[p + '_tb_s']:.2f}" if p + "_ms" in r else "- | -"
            for p in PEERS
        ]
        ok = "yes" if r["matches"] else "NO"
        lines.append(f"| {r['frames']} | {r['kernel']} | {ok} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tuned_configs(rows: list[dict]) -> str:
    return "\n".join(f"{r['frames']} {r['kernel']}: {c}" for r in rows for c in r["configs"])


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--smoke", "--tiny", action="store_true", help="tiny frames on any device")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--tune", action="store_true", help="tune each kernel before timing it")
    p.add_argument(
        "--variants", action="store_true", help="time the kernels' config variants (1080p)"
    )
    p.add_argument(
        "--only",
        type=lambda text: [part for part in text.split(",") if part],
        default=[],
        help="time only the cases whose names contain one of these comma-separated parts "
        "(e.g. normalize,nv12,gray,'resize antialiased u8'; without --variants the copy "
        "ceiling too)",
    )
    p.add_argument("--tune-budget", type=float, default=2.0, help="seconds per kernel tuned")
    p.add_argument(
        "--no-compile", dest="compile", action="store_false", help="skip the torch.compile peer"
    )
    p.add_argument(
        "--libraries",
        action="store_true",
        help="also time kornia (GPU) and OpenCV (CPU) where installed (benchmarks/vision_peers.py)",
    )
    p.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_vision.json"
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict:
    """Measure, print the table, write the JSON; returns what was written."""
    args = parse(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
        print("on the CPU: Triton's interpreter, times not meaningful (and nothing is tuned)")
    start = time.perf_counter()
    with tuning(args.tune_budget if args.tune else None):
        rows = measure_variants(device, args) if args.variants else measure(device, args)
    print(variants_table(rows) if args.variants else table(rows))
    if args.tune:
        print(tuned_configs(rows))
    result = {
        "rows": rows,
        "batch": args.batch,
        "tuned": args.tune,
        "variants": args.variants,
        "device": str(device),
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "seconds": time.perf_counter() - start,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out} in {result['seconds']:.0f} s")
    return result


if __name__ == "__main__":
    main()
