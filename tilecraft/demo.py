"""`tilecraft demo`: run every example kernel, check it against PyTorch, time it, show a table;
`tilecraft demo --video [CLIP]`: a video through the vision kernels (a clip it makes itself
when none is given)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from tilecraft.runtime.cpu import SlowOnCPU
from tilecraft.runtime.kernel import Kernel
from tilecraft.shipped import examples_folder
from tilecraft.testing import assert_close

CPU_TUNED = ("softmax", "matmul")
GPU_TUNED = ("softmax", "rms_norm", "matmul")  # a few, so that the demo takes about a minute
GPU_TUNE_S = 8.0  # the tuning budget of each, in seconds
# Sizes on a GPU, where times mean something: 16M elements for elementwise kernels, 4096
# rows of 4096 for row kernels, 2048^3 for matrix products. Examples not named keep the
# (small) default shape of their `inputs()`.
ROWS = (4096, 4096)
GPU_SHAPES: dict[str, tuple[int, ...]] = {
    **dict.fromkeys(["add", "bias_gelu", "exp", "dropout"], ROWS),
    **dict.fromkeys(
        [
            "softmax",
            "softmax_backward",
            "softmax_two_pass",
            "rms_norm",
            "rms_norm_backward",
            "layer_norm",
            "layer_norm_backward",
            "cross_entropy",
            "cross_entropy_backward",
            "sum",
            "cumsum",
        ],
        ROWS,
    ),
    **dict.fromkeys(
        ["matmul", "matmul_epilogue", "matmul_mixed", "matmul_bias_gelu", "linear_residual"],
        (2048, 2048, 2048),
    ),
    "matmul_split_k": (256, 16384, 256),
    "bmm": (16, 512, 512, 512),
    "attention": (4, 16, 1024, 64),
}
# Sizes on a CPU, where Triton's interpreter runs one program at a time in Python: fewer
# rows (programs) than the examples' defaults, each row as long as there, so that ragged
# blocks and reduction loops still run. Examples not named keep their default shape.
CPU_ROWS = 9
CPU_SHAPES: dict[str, tuple[int, ...]] = {
    "add": (CPU_ROWS, 333),
    "attention": (1, 2, 70, 64),
    "batch_norm": (300, 64),
    "batch_norm_backward": (300, 64),
    "bias_gelu": (CPU_ROWS, 257),
    "cross_entropy": (CPU_ROWS, 1000),
    "cross_entropy_backward": (CPU_ROWS, 1000),
    "cumsum": (CPU_ROWS, 1000),
    "dropout": (64, 1000),  # enough elements for its main()'s keep-rate check
    "gaussian_blur": (23, 93),
    "layer_norm": (CPU_ROWS, 768),
    "layer_norm_backward": (CPU_ROWS, 768),
    "rms_norm": (CPU_ROWS, 1000),
    "rms_norm_backward": (CPU_ROWS, 1000),
    "softmax": (CPU_ROWS, 1000),
    "softmax_backward": (CPU_ROWS, 1000),
    "softmax_two_pass": (CPU_ROWS, 1500),
    "topk": (CPU_ROWS, 200),
}
CPU_TUNE_CONFIGS = 4  # the tuning budget of each kernel in CPU_TUNED, in configs
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Row:
    """One kernel's line in the demo table; times in milliseconds."""

    example: str
    kernel: str
    shape: str = ""
    dtype: str = ""
    check: str = ""
    ok: bool = False
    compile_s: float | None = None
    tune_s: float | None = None
    configs: int | None = None
    time_ms: float | None = None
    eager_ms: float | None = None
    error: str = ""


def find_examples(given: str | Path | None = None) -> Path:
    """The examples folder: `given`, else the examples shipped with tilecraft."""
    path = Path(given) if given else examples_folder()
    if not path.is_dir():
        raise FileNotFoundError(f"no examples folder {path}")
    return path


def example_files(folder: Path) -> list[Path]:
    """The example files of a folder, by name (`_private.py` helpers are not examples)."""
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))


def load_example(path: Path) -> ModuleType:
    """Import one example file by its plain name, with its folder on sys.path, the way the
    examples import each other (a second copy of a module under another name would, for
    one, register its PyTorch operators twice)."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    module = importlib.import_module(path.stem)
    if Path(module.__file__ or "").resolve() != path.resolve():
        raise ImportError(f"{path.stem!r} names another module ({module.__file__}), not {path}")
    return module


def example_kernels(module: ModuleType) -> list[tuple[str, Kernel]]:
    """The module-level `tc.Kernel` objects of an example, in definition order."""
    return [(name, obj) for name, obj in vars(module).items() if isinstance(obj, Kernel)]


def on_gpu() -> bool:
    """Whether kernels run on a GPU (else on CPU under Triton's interpreter)."""
    return torch.cuda.is_available()


def device_name() -> str:
    """The device the demo runs on, in words."""
    return torch.cuda.get_device_name() if on_gpu() else "CPU (Triton interpreter)"


def default_shape(module: ModuleType) -> tuple[int, ...]:
    """The default `shape` of an example's `inputs()`."""
    return tuple(inspect.signature(module.inputs).parameters["shape"].default)


def demo_shape(module: ModuleType, gpu: bool) -> tuple[int, ...]:
    """The shape the demo runs an example at: a realistic one on a GPU (GPU_SHAPES), a
    smaller one on a CPU (CPU_SHAPES, for Triton's interpreter); else the example's default."""
    name = module.__name__.rsplit(".", 1)[-1]
    return (GPU_SHAPES if gpu else CPU_SHAPES).get(name, default_shape(module))


def max_error(actual: Any, expected: Any) -> float:
    """The largest absolute difference over a tensor or a tuple of tensors."""
    if isinstance(expected, (tuple, list)):
        return max((max_error(a, e) for a, e in zip(actual, expected, strict=True)), default=0.0)
    return (actual.double() - expected.double()).abs().max().item() if expected.numel() else 0.0


def time_ms(fn: Callable[[], Any], cpu_runs: int = 3) -> float:
    """Median time of `fn` in ms: CUDA events on a GPU, wall clock of `cpu_runs` runs on the
    CPU."""
    if on_gpu():
        import triton.testing

        return float(triton.testing.do_bench(fn, return_mode="median"))
    samples = []
    for _ in range(cpu_runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def wall_s(fn: Callable[[], Any]) -> tuple[Any, float]:
    """`fn()` and the seconds it took, the device work included."""
    start = time.perf_counter()
    result = fn()
    if on_gpu():
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


def run_kernel(row: Row, kernel: Kernel, module: ModuleType, dtype: torch.dtype) -> Row:
    """Fill `row`: compile, check and time one kernel (failures are recorded, not raised)."""
    row.dtype = str(dtype).removeprefix("torch.")
    try:
        args = module.inputs(shape=demo_shape(module, on_gpu()), dtype=dtype)
        row.shape = "x".join(map(str, args[0].shape))
        kernel.settings.autotune_effort = "none"  # first the default config: compile, check
        out, row.compile_s = wall_s(lambda: kernel(*args))
        expected = module.reference(*args)
        row.check = f"{max_error(out, expected):.1e}"
        assert_close(out, expected, dtype)
        tune(row, kernel, args)
        assert_close(kernel(*args), expected, dtype)
        row.ok, row.check = True, f"ok {row.check}"
        # one run each on a CPU: the interpreter's times mean nothing, the table shows them
        row.time_ms = time_ms(lambda: kernel(*args), cpu_runs=1)
        row.eager_ms = time_ms(lambda: module.reference(*args), cpu_runs=1)
    except Exception as e:
        row.check = f"FAIL {row.check}".strip()
        row.error = "".join(traceback.format_exception_only(type(e), e)).strip()
    return row


def tune(row: Row, kernel: Kernel, args: tuple) -> None:
    """A short tuning run: GPU_TUNE_S seconds of it for the kernels in GPU_TUNED on a GPU;
    on a CPU (Triton's interpreter, where times mean nothing) a few configs of the kernels
    in CPU_TUNED, to show the tuner."""
    kernel.settings.autotune_quiet = True
    if on_gpu() and row.kernel in GPU_TUNED:
        options: dict[str, Any] = {"budget_s": GPU_TUNE_S}
    elif on_gpu():
        return
    elif row.kernel in CPU_TUNED and kernel.bind(args).cpu_mode == "triton":
        kernel.settings.autotune_workers = 1
        options = {"max_configs": CPU_TUNE_CONFIGS}
    else:
        return
    _, row.tune_s = wall_s(lambda: kernel.autotune(args, **options))
    row.configs = kernel.bind(args).tuning.get("configs")


def demo_rows(examples: Path, dtype: torch.dtype) -> Iterator[Row]:
    """One row per kernel of every example (one FAIL row for an example that won't import)."""
    for path in example_files(examples):
        try:
            module = load_example(path)
        except Exception as e:
            yield Row(path.stem, "-", check="FAIL import", error=f"{type(e).__name__}: {e}")
            continue
        for name, kernel in example_kernels(module):
            yield run_kernel(Row(path.stem, name), kernel, module, dtype)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def config_cell(row: Row) -> str:
    """Which config a row ran: its tuning run's winner, or the heuristic default."""
    if row.tune_s is None:
        return "default"
    return f"tuned: {_fmt(row.configs, 'd')} in {row.tune_s:.1f} s"


def render(rows: list[Row]) -> Any:
    """The rich table of the demo's rows."""
    from rich.table import Table

    title = "tilecraft examples vs torch eager"
    if not on_gpu():
        title += " (CPU times come from an interpreter and mean nothing for speed)"
    table = Table(title=title)
    for column in ("example", "kernel", "shape", "dtype", "check", "compile s", "config"):
        table.add_column(column)
    for column in ("time ms", "torch eager ms", "speedup"):
        table.add_column(column, justify="right")
    for r in rows:
        ratio = r.eager_ms / r.time_ms if r.eager_ms and r.time_ms else None
        check = r.check if r.ok else f"[red]{r.check}[/red]"
        times = (_fmt(r.time_ms, ".3f"), _fmt(r.eager_ms, ".3f"), _fmt(ratio, ".2f"))
        cells = (r.example, r.kernel, r.shape, r.dtype, check, _fmt(r.compile_s, ".2f"))
        table.add_row(*cells, config_cell(r), *times)
    return table


def summary(rows: list[Row], seconds: float) -> str:
    """One line: kernels run, checks passed, which were tuned, and the time it all took."""
    passed = sum(r.ok for r in rows)
    tuned = [f"{r.example}.{r.kernel}" for r in rows if r.tune_s is not None]
    line = f"{len(rows)} kernels, {passed} passed their check, {len(rows) - passed} failed"
    if tuned:
        line += f"; tuned: {', '.join(tuned)} (the others ran their default config)"
    return f"{line}; {seconds:.0f} s"


def run_demo(examples: str | Path | None = None, dtype: str | None = None) -> int:
    """Run, check and time every example kernel; print the table; 1 if any check failed."""
    from rich.console import Console
    from rich.markup import escape

    start = time.perf_counter()
    warnings.filterwarnings("ignore", category=SlowOnCPU)  # the title says so
    console = Console() if sys.stdout.isatty() else Console(width=140)
    chosen = DTYPES[dtype] if dtype else (torch.bfloat16 if on_gpu() else torch.float32)
    folder = find_examples(examples)
    console.print(f"tilecraft demo on {device_name()}, examples from {folder}")
    rows = []
    with console.status("running examples...") as status:
        for row in demo_rows(folder, chosen):
            status.update(f"ran {row.example}.{row.kernel}")
            rows.append(row)
    console.print(render(rows))
    for r in (r for r in rows if r.error):
        label = r.example if r.kernel == "-" else f"{r.example}.{r.kernel}"
        console.print(f"[red]{escape(label)}[/red]: {escape(r.error)}", highlight=False)
    console.print(summary(rows, time.perf_counter() - start), highlight=False)
    video_ok = video_section(console)
    return 0 if rows and all(r.ok for r in rows) and video_ok else 1


def video_section(console: Any) -> bool:
    """The demo's last part: a generated clip through the vision kernels (see
    `run_video_demo`), when PyAV is installed; whether it went well."""
    if importlib.util.find_spec("av") is None:
        console.print(
            'video: skipped, PyAV is not installed (pip install "tilecraft[vision]")', markup=False
        )
        return True
    from tilecraft.exc import TilecraftError

    console.print("\nvideo through the vision kernels (tilecraft demo --video CLIP for yours):")
    try:
        return run_video_demo() == 0
    except TilecraftError as e:
        console.print(f"[red]video[/red]: {e}", highlight=False)
        return False


def run_video_demo(clip: str | Path | None = None, folder: str | Path | None = None) -> int:
    """Decode `clip` (else a short clip generated here, small enough for the CPU), run the
    vision kernels on its frames, encode the result; prints the decoder, a progress bar in
    frames per second and where the output went. Files go to `folder` (a new temp dir)."""
    import argparse
    import tempfile

    from tilecraft import cli_video
    from tilecraft.vision.video import make_clip

    where = Path(folder or tempfile.mkdtemp(prefix="tilecraft-video-"))
    ops = cli_video.DEFAULT_OPS if on_gpu() else "resize=32x24,blur=3,gray"
    if clip is None:
        frames = 8 if on_gpu() else 4  # about 2 s a frame in the interpreter
        clip = make_clip(where / "clip.mp4", frames=frames, size=(48, 64))
        print(f"tilecraft video demo: generated {clip} ({frames} frames, 64x48)")
    out = where / f"{Path(clip).stem}.tilecraft.mp4"
    args = argparse.Namespace(
        input=str(clip),
        output=str(out),
        ops=ops,
        batch=4,
        device=None,
        codec=None,
        decoder="auto",
    )
    print(f"ops: {ops}")
    return cli_video.run(args)
