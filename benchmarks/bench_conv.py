"""2-D convolution in bfloat16: tilecraft.nn.conv2d against cuDNN (F.conv2d on channels-last
and NCHW inputs) and torch.compile, in TFLOP/s, on ResNet-50's 3x3, 1x1 and strided layers
and on depthwise 3x3 layers (MobileNetV2's), at batch 32.

For each layer, tilecraft's kernel (`tilecraft.nn.conv2d.plan` picks it: an implicit GEMM, a
plain GEMM for 1x1 filters, a direct stencil for depthwise ones) runs a small hand-picked
sweep of configs on the channels-last input (block sizes, warps, stages; each checked
against cuDNN's output before it is timed) and keeps the fastest; the NCHW input runs the
same kernel, specialized to NCHW strides (no transposed copy), with that winner and the
sweep's first two configs (depthwise filters: a stencil over planes, swept on its own; NCHW
1x1 filters: a GEMM over planes, swept on its own). The channels-last depthwise stencil
also tries tiles of output rows by columns (`tile_rows`) after its tiles of positions, then
(stride 1) programs that stream down runs of output rows (`stream_rows`). Deep
layers (fewer output tiles than the GPU has multiprocessors) also try split-K configs. The
sweeps stop early when `--budget-s` is spent: later layers then try only the first config
of each list. `--search fast` tunes with tilecraft's own search instead (`budget` seconds
per layer). Times are kernel launches (tilecraft's generated launcher, `F.conv2d`,
the compiled function); FLOPs are 2 * batch * out_ch * out_h * out_w * in_ch / groups * kh
* kw; ratios are tilecraft's speed over the peer's (above 1: tilecraft is faster).
`--backward` also sweeps the input- and weight-gradient kernels (channels-last) against
PyTorch's `convolution_backward` (cuDNN), at twice the forward's FLOPs. `--nchw` measures
only the NCHW input (its kernel's own sweep, the backward on NCHW tensors too; cuDNN on
both layouts as peers, no torch.compile); `--layers` keeps the layers whose names contain
one of its comma-separated words.

    PYTHONPATH=$PWD python benchmarks/bench_conv.py [--out PATH] [--budget-s 90]
    PYTHONPATH=$PWD python benchmarks/bench_conv.py --kinds 3x3,depthwise --backward
    PYTHONPATH=$PWD python benchmarks/bench_conv.py --kinds 1x1 --nchw --backward
    TRITON_INTERPRET=1 PYTHONPATH=$PWD python benchmarks/bench_conv.py --smoke

`--smoke` runs tiny layers on the CPU (Triton's interpreter, float32, no torch.compile): it
checks the script end to end, its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

os.environ.setdefault("TILECRAFT_AUTOTUNE_EFFORT", "none")  # configs come from the sweep

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

import tilecraft as tc  # noqa: E402
from tilecraft.autotune.space import space_of  # noqa: E402
from tilecraft.nn import conv2d_backward as bwd  # noqa: E402
from tilecraft.nn import conv2d_planes as planes  # noqa: E402
from tilecraft.nn.conv2d import plan  # noqa: E402


class Layer(NamedTuple):
    """One convolution: `in_ch` -> `out_ch` channels on `size` x `size` images (a tuple, as
    the tests load this script without registering it as a module, which dataclasses need)."""

    name: str
    kind: str  # 3x3, 1x1, strided or depthwise
    in_ch: int
    out_ch: int
    size: int
    kernel: int
    stride: int = 1
    groups: int = 1

    @property
    def padding(self) -> int:
        return self.kernel // 2

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.padding - self.kernel) // self.stride + 1

    def flops(self, batch: int) -> float:
        taps = self.kernel * self.kernel * self.in_ch // self.groups
        return 2.0 * batch * self.out_ch * self.out_size**2 * taps


def _depthwise(name: str, channels: int, size: int, stride: int = 1) -> Layer:
    return Layer(name, "depthwise", channels, channels, size, 3, stride, channels)


LAYERS = [
    Layer("res2 3x3", "3x3", 64, 64, 56, 3),
    Layer("res3 3x3", "3x3", 128, 128, 28, 3),
    Layer("res4 3x3", "3x3", 256, 256, 14, 3),
    Layer("res5 3x3", "3x3", 512, 512, 7, 3),
    Layer("res2 1x1 expand", "1x1", 64, 256, 56, 1),
    Layer("res2 1x1 reduce", "1x1", 256, 64, 56, 1),
    Layer("res3 1x1 expand", "1x1", 128, 512, 28, 1),
    Layer("res3 1x1 reduce", "1x1", 512, 128, 28, 1),
    Layer("res4 1x1 expand", "1x1", 256, 1024, 14, 1),
    Layer("res5 1x1 reduce", "1x1", 2048, 512, 7, 1),
    Layer("stem 7x7/2", "strided", 3, 64, 224, 7, 2),
    Layer("res3 3x3/2", "strided", 128, 128, 56, 3, 2),
    Layer("res4 3x3/2", "strided", 256, 256, 28, 3, 2),
    Layer("res5 3x3/2", "strided", 512, 512, 14, 3, 2),
    Layer("res3 1x1/2 shortcut", "strided", 256, 512, 56, 1, 2),
    Layer("res5 1x1/2 shortcut", "strided", 1024, 2048, 14, 1, 2),
    _depthwise("dw 32 @112", 32, 112),
    _depthwise("dw 144 @56", 144, 56),
    _depthwise("dw 144 @56 /2", 144, 56, 2),
    _depthwise("dw 192 @28", 192, 28),
    _depthwise("dw 384 @14", 384, 14),
    _depthwise("dw 960 @7", 960, 7),
]
SMOKE_LAYERS = [
    Layer("3x3", "3x3", 4, 6, 7, 3),
    Layer("1x1", "1x1", 5, 3, 6, 1),
    Layer("3x3/2", "strided", 4, 4, 9, 3, 2),
    _depthwise("dw", 6, 7),
]
# GEMM kernels: (block_m, block_n, block_k, warps, stages); the first is kept when time runs out
GEMM_SWEEP = [(128, 128, 64, 8, 3), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (256, 128, 64, 8, 3)]
GEMM_SWEEP += [(128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (128, 128, 32, 4, 5), (64, 64, 64, 4, 4)]
# split-K (the reduction in `splits` chunks, a second pass adding them), tried second on the
# forward GEMMs of layers with fewer 128 x 128 output tiles than the GPU has multiprocessors
SPLIT_SWEEP = [(128, 128, 64, 8, 3, 2), (64, 128, 64, 4, 4, 2), (128, 128, 64, 8, 3, 4)]
# NCHW 1x1 filters (W @ x[n] over planes: m output channels, n pixels): the GEMM sweep,
# then its first config with other knobs (the out-channel tiles outermost in the launch
# order, so that neighbouring programs share an image's tile; TMA tensor descriptors for
# the filters, then for the image's planes too, read as [1, block, block] tiles)
# (where an access cannot take one, such as the image's planes at a scalar image, it
# keeps pointers)
TMA = {f"indexing[{i}]": "tensor_descriptor" for i in range(8)}
PLANES_EXTRAS = [{"loop_orders[0]": (1, 0, 2)}, TMA, {**TMA, "image_tiles": True}]
# the depthwise stencil: (block of positions, block of channels, warps)
DEPTHWISE_SWEEP = [(64, 64, 4), (32, 128, 4), (128, 32, 4), (16, 128, 2)]
DEPTHWISE_SWEEP += [(128, 16, 4), (256, 16, 8), (64, 32, 2), (128, 64, 8), (256, 32, 8)]
# its tiles of output rows by columns (channels-last; `tile_rows` > 1), tried after those:
# (rows, block of columns, block of channels, warps)
DEPTHWISE_ROWS_SWEEP = [(4, 16, 64, 4), (2, 32, 64, 4), (8, 8, 64, 4), (4, 16, 32, 4)]
DEPTHWISE_ROWS_SWEEP += [(4, 32, 16, 4), (8, 16, 16, 4), (4, 32, 32, 8), (2, 64, 16, 4)]


def _stream(rows: int, cols: int, channels: int, warps: int, ahead: int = 1) -> dict[str, int]:
    """A streaming depthwise config (`stream_rows`) with its blocks of columns and channels."""
    knobs = {"stream_rows": rows, "stream_cols": cols, "stream_channels": channels}
    return {**knobs, "num_warps": warps, "stream_ahead": ahead}


# its programs walking down runs of output rows (stride 1 only), tried last: (rows, block
# of columns, block of channels, warps[, input rows loaded ahead]); channel blocks of 64, 32
# and 16 give each thread 8, 4 or 2 bfloat16 channels at 16 columns and 4 warps (128-, 64-
# and 32-bit loads; 168, 87 and 48 registers on sm_90 with one row ahead, none spilled)
DEPTHWISE_STREAM_SWEEP = [_stream(8, 16, 32, 4), _stream(8, 16, 64, 4), _stream(8, 32, 16, 4)]
DEPTHWISE_STREAM_SWEEP += [_stream(8, 16, 16, 4), _stream(8, 32, 32, 8), _stream(4, 16, 32, 4)]
DEPTHWISE_STREAM_SWEEP += [_stream(16, 16, 32, 4), _stream(16, 8, 64, 2)]
DEPTHWISE_STREAM_SWEEP += [_stream(8, 16, 32, 4, 0), _stream(8, 16, 32, 4, 2)]
MAX_REL_ERR = {torch.bfloat16: 2e-2, torch.float32: 1e-4}


# the sweep sizes each kernel's `block_sizes` lists, in order: m positions, n output
# channels, k reduction (the weight gradient: its in_ch block, out_ch block, positions),
# c channels of a depthwise kernel
BLOCK_ORDERS = {
    "conv2d_gemm": "kmn",
    "conv2d_input_grad": "kmn",
    "conv2d_pointwise": "kmn",
    "conv2d_pointwise_planes": "kmn",  # m output channels, n pixels, k input channels
    "pointwise_planes_input_grad": "mnk",  # m input channels, n pixels, k output channels
    "pointwise_planes_weight_grad": "mnk",  # m output channels, n input channels, k pixels
    "conv2d_weight_grad": "mnk",
    "conv2d_depthwise": "mc",
    "conv2d_depthwise_planes": "mc",  # rows of a plane, then columns
    "depthwise_input_grad": "mc",
    "depthwise_weight_grad": "cm",
}


def _block_knobs(kernel_name: str, entry: tuple | dict) -> dict[str, Any]:
    """Knob values of a sweep entry for one of conv2d's kernels (a dict: those knobs)."""
    if isinstance(entry, dict):
        return entry
    # (the channels-last stencil streams rows at stride 1 by default: these tilings do not)
    unstreamed = {"stream_rows": 0} if kernel_name == "conv2d_depthwise" else {}
    if len(entry) == 3:  # a depthwise entry
        sizes, extra = {"m": entry[0], "c": entry[1]}, {"num_warps": entry[2], **unstreamed}
    elif len(entry) == 4:  # a depthwise entry in tiles of rows: its own blocks, after m, c
        knobs = {"block_sizes[2]": entry[1], "block_sizes[3]": entry[2], **unstreamed}
        return {**knobs, "tile_rows": entry[0], "num_warps": entry[3]}
    else:
        sizes = dict(zip("mnk", entry[:3], strict=True))
        extra = {"num_warps": entry[3], "num_stages": entry[4]}
        if len(entry) > 5:
            extra["splits"] = entry[5]
    order = BLOCK_ORDERS[kernel_name]
    return {**{f"block_sizes[{i}]": sizes[d] for i, d in enumerate(order)}, **extra}


def sweep_configs(kernel: tc.Kernel, args: tuple, sweep: list[Any]) -> list[tc.Config]:
    """The sweep's configs for this kernel and shape, snapped to its space (a block larger
    than its dimension shrinks to fit), without repeats."""
    bound = kernel.bind(args)
    space = space_of(bound, on_gpu=True)
    configs: list[tc.Config] = []
    for entry in sweep:
        config = space.snap(_block_knobs(kernel.__name__, entry))
        if config not in configs:
            configs.append(config)
    return configs


def time_ms(fn: Callable[[], Any], device: torch.device) -> float:
    """Median milliseconds of `fn` (CUDA events after warm-up; wall clock on the CPU)."""
    if device.type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median"))
    times = []
    for _ in range(2):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want|| in float64."""
    den = float(want.double().norm())
    return float((got.double() - want.double()).norm()) / (den or 1.0)


class Case:
    """One layer's inputs in both layouts, cuDNN's result, and tilecraft's kernel and args."""

    def __init__(self, layer: Layer, batch: int, dtype: torch.dtype, device: torch.device):
        self.layer, self.device, self.dtype = layer, device, dtype
        gen = torch.Generator(device=device).manual_seed(0)
        shape = (batch, layer.in_ch, layer.size, layer.size)
        x = torch.randn(shape, dtype=dtype, device=device, generator=gen)
        fan_in = layer.in_ch // layer.groups * layer.kernel**2
        w_shape = (layer.out_ch, layer.in_ch // layer.groups, layer.kernel, layer.kernel)
        w = torch.randn(w_shape, dtype=dtype, device=device, generator=gen) / math.sqrt(fan_in)
        self.x_nchw, self.w_nchw = x, w
        self.x = x.to(memory_format=torch.channels_last)
        self.w = w.to(memory_format=torch.channels_last)
        self.options = {"stride": layer.stride, "padding": layer.padding, "groups": layer.groups}
        self.expected = F.conv2d(self.x, self.w, **self.options)
        op, self.args = plan(self.x, self.w, **self.options)
        op_nchw, self.args_nchw = plan(self.x_nchw, self.w, **self.options)
        self.kernel: tc.Kernel = op.kernel
        self.kernel_nchw: tc.Kernel = op_nchw.kernel  # depthwise: the planes stencil


def run_sweep(
    case: Case, kernel: tc.Kernel, configs: list[tc.Config], args: tuple, check: Any = None
) -> tuple[dict, Any]:
    """Each config checked (`check(output)`: a relative error; by default the forward's
    against cuDNN's) and timed: the trials, and the fastest correct one's launcher."""
    bound = kernel.bind(args)
    check = check or (lambda result: rel_error(result[0], case.expected))
    trials, best = [], None
    for config in configs:
        trial: dict[str, Any] = {"config": config.to_dict()}
        try:
            launcher = bound.compile(config)
            trial["rel_err"] = check(launcher(*args))
            if trial["rel_err"] <= MAX_REL_ERR[case.dtype]:
                trial["ms"] = time_ms(lambda launcher=launcher: launcher(*args), case.device)
                if best is None or trial["ms"] < best[0]["ms"]:
                    best = (trial, launcher)
        except Exception as e:  # a config that fails to compile or run is recorded, not fatal
            trial["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        trials.append(trial)
    summary = {"trials": trials, "best": best[0] if best else None}
    return summary, best[1] if best else None


def wants_split(kernel: tc.Kernel, args: tuple) -> bool:
    """A forward GEMM with fewer output tiles (at 128 x 128) than an H200 has SMs: a deep
    layer, which split-K may fill."""
    if kernel.__name__ not in ("conv2d_gemm", "conv2d_pointwise", "conv2d_pointwise_planes"):
        return False
    x, weight, out_h, out_w = args[0], args[1], args[11], args[12]
    rows, cols = x.size(0) * out_h * out_w, weight.size(0)
    return -(-rows // 128) * -(-cols // 128) < 132  # output tiles against the H200's SMs


def _sweep(
    kernel: tc.Kernel, args: tuple, deadline: float, stream_only: bool = False
) -> list[tc.Config]:
    """The sweep for a kernel, cut to its first config once the budget is spent. At stride
    1 the channels-last depthwise stencil streams rows by default, and its tiles of
    positions are not tuned (their loop has no extent in the default): it tries its
    default, tiles of rows (not with `stream_only`) and streaming configs."""
    entries = DEPTHWISE_SWEEP if "depthwise" in kernel.__name__ else GEMM_SWEEP
    if kernel.__name__ == "conv2d_depthwise":
        entries = entries + DEPTHWISE_ROWS_SWEEP
        if tuple(args[4:6]) == (1, 1):  # streaming rows: stride 1 only
            rows = [] if stream_only else DEPTHWISE_ROWS_SWEEP
            entries = [{}, *rows, *DEPTHWISE_STREAM_SWEEP]  # {}: the default
    if wants_split(kernel, args):  # (the others unsplit: the default may split)
        entries = [(*entries[0], 1), *SPLIT_SWEEP, *[(*e, 1) for e in entries[1:]]]
    configs = sweep_configs(kernel, args, entries)
    if kernel is planes.conv2d_pointwise_planes:
        configs += with_extras(kernel, args, configs[0], PLANES_EXTRAS)
    return configs if time.monotonic() < deadline else configs[:1]


def with_extras(
    kernel: tc.Kernel, args: tuple, base: tc.Config, extras: list[dict[str, Any]]
) -> list[tc.Config]:
    """`base` with each of `extras`' knob values (snapped to the kernel's space), new ones."""
    bound = kernel.bind(args)
    space = space_of(bound, on_gpu=True)
    configs: list[tc.Config] = []
    for extra in extras:
        config = space.snap({**space.values(base), **extra})
        if config != base and config not in configs:
            configs.append(config)
    return configs


def tilecraft_times(case: Case, args: argparse.Namespace, deadline: float) -> dict:
    """tilecraft on the channels-last input (swept or tuned) and on the NCHW input."""
    result: dict[str, Any] = {"kernel": case.kernel.__name__}
    result["kernel_nchw"] = case.kernel_nchw.__name__
    if args.nchw:  # the NCHW input only, its kernel swept (or tuned)
        result["nhwc"] = {"trials": [], "best": None}
        result["nchw"], _ = run_sweep(case, case.kernel_nchw, _configs(case, args, deadline, True),
                                      case.args_nchw)  # fmt: skip
        return result
    configs = _configs(case, args, deadline, False)
    result["nhwc"], _ = run_sweep(case, case.kernel, configs, case.args)
    best = result["nhwc"]["best"]
    if case.kernel_nchw is not case.kernel:  # a kernel of its own: its own sweep
        nchw_deadline = 0.0 if args.stream_only else deadline  # stream-only: its first config
        nchw_configs = _sweep(case.kernel_nchw, case.args_nchw, nchw_deadline)
    else:  # the NHWC winner, and while the budget lasts the sweep's first two
        nchw_configs = [tc.Config(**best["config"])] if best else []
        more = configs[:2] if time.monotonic() < deadline else configs[:1]
        nchw_configs += [c for c in more if c not in nchw_configs][: 3 - len(nchw_configs)]
    result["nchw"], _ = run_sweep(case, case.kernel_nchw, nchw_configs, case.args_nchw)
    return result


def _configs(case: Case, args: argparse.Namespace, deadline: float, nchw: bool) -> list:
    """The configs to time for one layout's kernel: the sweep's, or the tuner's pick."""
    kernel, kernel_args = (case.kernel_nchw, case.args_nchw) if nchw else (case.kernel, case.args)
    if args.search == "fast":
        return [kernel.autotune(kernel_args, budget_s=args.tune_s)]
    return _sweep(kernel, kernel_args, deadline, args.stream_only)


def gradient_runs(case: Case, grad: torch.Tensor, want: tuple, nchw: bool) -> list[tuple]:
    """(kernel, args, expected) of the input and weight gradients, as autograd calls them."""
    x, w = (case.x_nchw, case.args_nchw[1]) if nchw else (case.x, case.args[1])
    geometry, groups = case.args[4:10], case.args[10]
    name = (case.kernel_nchw if nchw else case.kernel).__name__
    if name == "conv2d_pointwise_planes":
        return [(planes.pointwise_planes_input_grad, (grad, w, x), want[0]),
                (planes.pointwise_planes_weight_grad, (grad, x, w), want[1])]  # fmt: skip
    if "depthwise" in name:
        return [(bwd.depthwise_input_grad, (grad, w, x, *geometry, not nchw), want[0]),
                (bwd.depthwise_weight_grad, (grad, x, w, *geometry), want[1])]  # fmt: skip
    return [(bwd.conv2d_input_grad, (grad, w, x, *geometry, groups, not nchw), want[0]),
            (bwd.conv2d_weight_grad, (grad, x, w, *geometry, groups), want[1])]  # fmt: skip


def backward_times(case: Case, deadline: float, nchw: bool = False) -> dict:
    """The input and weight gradients (channels-last, or NCHW): tilecraft's kernels swept, each
    checked against PyTorch's `convolution_backward` (cuDNN on a GPU), which is timed as the
    peer on the same layout."""
    grad = torch.randn_like(case.expected)
    if nchw:
        grad = grad.contiguous()
    x, groups = (case.x_nchw if nchw else case.x), case.args[10]
    layer = case.layer
    stride, padding = [layer.stride] * 2, [layer.padding] * 2
    mask = [True, True, False]

    def peer() -> Any:
        return torch.ops.aten.convolution_backward(
            grad, x, case.w, None, stride, padding, [1, 1], False, [0, 0], groups, mask
        )

    want_x, want_w, _ = peer()
    result: dict[str, Any] = {}
    for kernel, kernel_args, want in gradient_runs(case, grad, (want_x, want_w), nchw):
        check = lambda got, want=want: rel_error(got, want)  # noqa: E731
        configs = _sweep(kernel, kernel_args, deadline)
        result[kernel.__name__], _ = run_sweep(case, kernel, configs, kernel_args, check)
    result["cudnn_ms"] = time_ms(peer, case.device)
    return result


def peer_times(case: Case, compiled: bool) -> dict[str, Any]:
    """cuDNN on both layouts and torch.compile on channels-last: ms, or the error."""
    peers: dict[str, Any] = {}
    runs: dict[str, Callable[[], Any]] = {
        "cudnn_nhwc": lambda: F.conv2d(case.x, case.w, **case.options),
        "cudnn_nchw": lambda: F.conv2d(case.x_nchw, case.w_nchw, **case.options),
    }
    if compiled:
        fn = torch.compile(lambda x, w: F.conv2d(x, w, **case.options), dynamic=False)
        runs["compile"] = lambda: fn(case.x, case.w)
    for name, run in runs.items():
        try:
            peers[name] = time_ms(run, case.device)
        except Exception as e:  # e.g. no cuDNN on the CPU path of a smoke run
            peers[name] = f"{type(e).__name__}: {str(e)[:200]}"
    return peers


def measure(layer: Layer, args: argparse.Namespace, device: torch.device, deadline: float) -> dict:
    """One layer's row: tilecraft's sweeps, the peers, TFLOP/s and ratios."""
    row: dict[str, Any] = {**layer._asdict(), "batch": args.batch}
    try:
        case = Case(layer, args.batch, args.dtype, device)
        row["tilecraft"] = tilecraft_times(case, args, deadline)
        row["peers_ms"] = peer_times(case, args.compile)
        if args.backward:
            row["backward"] = backward_times(case, deadline, args.nchw)
            row["backward_layout"] = "nchw" if args.nchw else "nhwc"
        row.update(speeds(row, layer.flops(args.batch)))
    except Exception:
        row["error"] = traceback.format_exc()[-1500:]
    return row


def speeds(row: dict, flops: float) -> dict[str, Any]:
    """TFLOP/s of every contender and tilecraft's speed over each peer's."""
    times = {k: v for k, v in row["peers_ms"].items() if isinstance(v, float)}
    for layout in ("nhwc", "nchw"):
        best = row["tilecraft"][layout]["best"]
        if best:
            times[f"tilecraft_{layout}"] = best["ms"]
    tflops = {k: flops / (ms * 1e-3) / 1e12 for k, ms in times.items()}
    backward = row.get("backward")
    if backward:  # twice the forward's FLOPs: the input and the weight gradient
        parts = [b["best"]["ms"] for k, b in backward.items() if k != "cudnn_ms" and b["best"]]
        if len(parts) == 2:
            times["tilecraft_backward"] = sum(parts)
            tflops["tilecraft_backward"] = 2 * flops / (sum(parts) * 1e-3) / 1e12
        times["cudnn_backward"] = backward["cudnn_ms"]
        tflops["cudnn_backward"] = 2 * flops / (backward["cudnn_ms"] * 1e-3) / 1e12
    ratios = {}
    pairs = [("nhwc", "cudnn_nhwc"), ("nchw", "cudnn_nchw"), ("nhwc", "compile")]
    for ours, peer in [*pairs, ("backward", "cudnn_backward")]:
        if f"tilecraft_{ours}" in times and peer in times:
            ratios[f"{ours}_vs_{peer}"] = times[peer] / times[f"tilecraft_{ours}"]
    return {"ms": times, "tflops": tflops, "ratios": ratios}


def geomeans(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Geometric means of each ratio per kind of layer, and over the non-depthwise layers."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        if "ratios" in row:
            groups.setdefault(row["kind"], []).append(row)
    groups["all but depthwise"] = [r for r in rows if "ratios" in r and r["kind"] != "depthwise"]
    out = {}
    for kind, members in groups.items():
        if not members:
            continue
        names = {name for r in members for name in r["ratios"]}
        out[kind] = {
            name: math.exp(statistics.mean(math.log(r["ratios"][name]) for r in members))
            for name in sorted(names)
            if all(name in r["ratios"] for r in members)
        }
    return out


COLUMNS = ["tilecraft_nhwc", "cudnn_nhwc", "compile", "tilecraft_nchw", "cudnn_nchw"]
COLUMNS += ["tilecraft_backward", "cudnn_backward"]
RATIOS = ["nhwc_vs_cudnn_nhwc", "nhwc_vs_compile", "nchw_vs_cudnn_nchw"]
RATIOS += ["backward_vs_cudnn_backward"]


def table(rows: list[dict], means: dict) -> str:
    """The markdown tables: TFLOP/s and ratios per layer, then the geometric means."""
    head = "| layer | kind | kernel | " + " | ".join(COLUMNS) + " | " + " | ".join(RATIOS) + " |"
    lines = [head, "|" + "---|" * (3 + len(COLUMNS) + len(RATIOS))]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['name']} | {row['kind']} | error: {row['error'][-80:]!r} |")
            continue
        cells = [_cell(row["tflops"].get(c), ".1f") for c in COLUMNS]
        cells += [_cell(row["ratios"].get(r), ".2f") for r in RATIOS]
        kernel = row["tilecraft"]["kernel" if row["tilecraft"]["nhwc"]["trials"] else "kernel_nchw"]
        kernel = kernel.removeprefix("conv2d_")
        lines.append(f"| {row['name']} | {row['kind']} | {kernel} | " + " | ".join(cells) + " |")
    lines += ["", "| geometric mean | " + " | ".join(RATIOS) + " |", "|---|" + "---|" * len(RATIOS)]
    for kind, ratios in means.items():
        cells = [_cell(ratios.get(r), ".2f") for r in RATIOS]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny layers on the CPU (float32)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--kinds", default="3x3,1x1,strided,depthwise", help="comma-separated")
    p.add_argument("--layers", default="", help="comma-separated words of layer names")
    p.add_argument("--nchw", action="store_true", help="only the NCHW input (no torch.compile)")
    p.add_argument("--budget-s", type=float, default=90.0, help="seconds for all sweeps")
    p.add_argument("--search", choices=["sweep", "fast"], default="sweep")
    p.add_argument("--tune-s", type=float, default=8.0, help="per layer, with --search fast")
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument(
        "--stream-only",
        action="store_true",
        help="stride-1 depthwise layers try their default and the streaming configs",
    )
    p.add_argument("--backward", action="store_true", help="also the input and weight gradients")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_conv.json")
    args = p.parse_args(argv)
    args.dtype = torch.float32 if args.smoke else torch.bfloat16
    args.compile = args.compile and not args.nchw
    if args.smoke:
        args.batch, args.compile = min(args.batch, 2), False
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    """Measure every layer, print the tables, write the JSON; returns what was written."""
    args = parse(argv)
    device = torch.device("cpu" if args.smoke else "cuda")
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    kinds = set(args.kinds.split(","))
    words = [w for w in args.layers.split(",") if w]
    layers = [la for la in (SMOKE_LAYERS if args.smoke else LAYERS) if la.kind in kinds]
    layers = [la for la in layers if not words or any(w in la.name for w in words)]
    start = time.monotonic()
    deadline = start + args.budget_s
    rows = []
    for layer in layers:
        rows.append(measure(layer, args, device, deadline))
        seconds = time.monotonic() - start
        result = rows[-1].get("ratios", rows[-1].get("error", ""))
        print(f"[{seconds:5.0f} s] {layer.name}: {result}", flush=True)
    means = geomeans(rows)
    print(table(rows, means))
    result = {
        "rows": rows,
        "geomeans": means,
        "dtype": str(args.dtype).removeprefix("torch."),
        "seconds": round(time.monotonic() - start, 1),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"wrote {args.out} ({result['seconds']} s)")
    return result


if __name__ == "__main__":
    main()
