"""Limits of a first call and of tuning: a slow compile gives way to a small config, the
time budget holds, and a tuned config is kept per memory layout."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import add
import pytest
import softmax_two_pass
import sum as sums
import torch

import tilecraft as tc
from tilecraft import demo
from tilecraft.autotune import bench
from tilecraft.autotune.tune import cached_config, tune_key
from tilecraft.autotune.workers import WorkerPool
from tilecraft.runtime import guard
from tilecraft.runtime.heuristics import SAFE_ELEMENTS
from tilecraft.testing import assert_close


def test_a_compile_past_the_deadline_gives_way_to_a_small_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A compile that does not finish (simulated: it waits on an event) must not hang the
    first call: after compile_timeout_s the safe config runs, with a warning."""
    release = threading.Event()
    compiled: list[object] = []

    def slow_first(launcher: object, args: tuple) -> None:
        compiled.append(launcher)
        if len(compiled) == 1:
            release.wait(30)

    monkeypatch.setattr(guard, "needed", lambda args: True)  # as on a GPU
    monkeypatch.setattr(guard, "precompile", slow_first)
    kernel = tc.kernel(
        softmax_two_pass.softmax_two_pass.fn, compile_timeout_s=0.3, cache_dir=tmp_path
    )
    x = torch.randn(37, 500)
    start = time.monotonic()
    try:
        with pytest.warns(guard.SlowCompileWarning, match="TILECRAFT_COMPILE_TIMEOUT"):
            out = kernel(x)
    finally:
        release.set()
    assert time.monotonic() - start < 20  # the interpreter's run included
    assert_close(out, softmax_two_pass.reference(x))
    assert len(compiled) == 1  # the safe config is not waited on again
    bound = kernel.bind((x,))
    assert bound.launcher is not None and bound.launcher is not compiled[0]
    assert_close(kernel(x), softmax_two_pass.reference(x))  # later calls: the safe one


class OutOfResources(Exception):
    """Stands in for Triton's (matched by name, as Triton's module differs by version)."""


def test_a_config_too_big_for_the_gpu_gives_way_to_a_small_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The budgets' estimate can fall short (a causal attention asked 288 KB of shared
    memory on the H200): the first call must not fail, but run the safe config."""
    tried: list[object] = []
    failing = [0]  # how many compiles in a row run out of shared memory

    def too_big(launcher: object, args: tuple) -> None:
        tried.append(launcher)
        if len(tried) <= failing[0]:
            raise OutOfResources("out of resource: shared memory, Required: 294912")

    monkeypatch.setattr(guard, "needed", lambda args: True)
    monkeypatch.setattr(guard, "precompile", too_big)
    x = torch.randn(37, 500)
    three_stages = tc.Config(num_stages=3)
    # first fewer stages, then (when even one stage is too many) the safe config
    for too_many, warning in [(1, "num_stages=2"), (10, "needs more than this GPU has")]:
        tried.clear()
        failing[0] = too_many
        kernel = tc.kernel(
            softmax_two_pass.softmax_two_pass.fn, config=three_stages, cache_dir=tmp_path
        )
        with pytest.warns(guard.SlowCompileWarning, match=warning):
            out = kernel(x)
        assert_close(out, softmax_two_pass.reference(x))
        assert kernel.bind((x,)).launcher is not tried[0]


def test_a_compile_in_time_keeps_its_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[object] = []
    monkeypatch.setattr(guard, "needed", lambda args: True)
    monkeypatch.setattr(guard, "precompile", lambda launcher, args: calls.append(launcher))
    kernel = tc.kernel(add.add.fn, compile_timeout_s=5, cache_dir=tmp_path)
    x, y = torch.randn(10, 7), torch.randn(10, 7)
    assert_close(kernel(x, y), x + y)
    assert calls == [kernel.bind((x, y)).launcher]


def test_safe_config_holds_few_elements() -> None:
    from tilecraft.runtime.heuristics import safe_config

    x = torch.empty(8192, 8192, device="meta")
    bound = softmax_two_pass.softmax_two_pass.bind((x,))
    safe = safe_config(bound.spec, bound.default_config)
    sizes = safe.block_sizes
    assert sizes[0] * max(sizes[1:]) <= SAFE_ELEMENTS and safe.num_stages == 1


def test_compile_only_launches_nothing() -> None:
    """`guard.compile_only` runs a launcher's host code with each Triton kernel compiling
    (`warmup=True`) instead of running."""
    from triton.runtime.jit import KernelInterface

    ran: list[tuple] = []

    class FakeKernel(KernelInterface):
        def run(self, *args: object, grid: object, warmup: bool, **kwargs: object) -> None:
            ran.append((args, grid, warmup))

    namespace: dict = {"_k": FakeKernel()}
    exec("def launch(x):\n    _k[(4,)](x)\n    return x + 1", namespace)
    assert guard.compile_only(namespace["launch"])(1) == 2
    assert ran == [((1,), (4,), True)]


def test_a_transposed_input_is_tuned_apart(tmp_path: Path) -> None:
    """A contiguous input and a transposed one of the same shape are different tuning
    problems: they must not share a winner in the tuning database."""
    kernel = tc.kernel(add.add.fn, cache_dir=tmp_path, autotune_workers=0, autotune_quiet=True)
    x, y = torch.randn(24, 40), torch.randn(24, 40)
    xt = torch.randn(40, 24).t()
    plain, transposed = kernel.bind((x, y)), kernel.bind((xt, y))
    assert tune_key(plain, (x, y)) != tune_key(transposed, (xt, y))
    assert "strides[1, 24]" in transposed.spec_key and "strides" not in plain.spec_key
    kernel.autotune((x, y), max_configs=2)
    assert cached_config(plain, (x, y), kernel.settings) is not None
    assert cached_config(transposed, (xt, y), kernel.settings) is None


def test_tuning_stops_at_its_budget(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every measurement is slow (0.3 s): a 1.5 s budget measures a few configs, not the
    20 allowed, and the whole call ends near the budget (its set-up counted)."""

    def slow(job: dict, args: tuple, expected: list) -> dict:
        time.sleep(0.3)
        return {"status": "ok", "time_ms": 1.0 + len(job["code"]) % 7, "compile_s": 0.0}

    monkeypatch.setattr(bench, "run_job", slow)
    kernel = tc.kernel(
        sums.sum_rows.fn, cache_dir=tmp_path, autotune_workers=0, autotune_quiet=True
    )
    args = sums.inputs(shape=(20, 100), device="cpu")
    start = time.monotonic()
    kernel.autotune(args, budget_s=1.5, max_configs=20, search="random")
    took = time.monotonic() - start
    tuning = kernel.bind(args).tuning
    assert took < 1.5 + 1.0, took
    assert tuning.get("skipped", 0) > 0 and tuning.get("ok", 0) < 20


def test_worker_pool_starts_nothing_past_the_deadline() -> None:
    pool = WorkerPool(1, 30, interpret=True)
    try:
        start = time.monotonic()
        results = pool.run([{"code_path": "x"}, {"code_path": "y"}], deadline=start - 1)
    finally:
        pool.close()
    assert [r["status"] for r in results] == ["skipped", "skipped"]
    assert time.monotonic() - start < 2


def test_the_demo_runs_realistic_sizes_on_a_gpu_only() -> None:
    for name, shape in demo.GPU_SHAPES.items():
        module = demo.load_example(demo.find_examples() / f"{name}.py")
        cpu_shape = demo.CPU_SHAPES.get(name, demo.default_shape(module))
        assert demo.demo_shape(module, gpu=False) == cpu_shape
        assert demo.demo_shape(module, gpu=True) == shape
        args = module.inputs(shape=shape, dtype=torch.bfloat16, device="meta")
        for _, kernel in demo.example_kernels(module):
            kernel.bind(args)  # the shape suits the example's inputs and its kernels
    assert demo.demo_shape(add, gpu=True) == (4096, 4096)  # 16M elements


def test_the_demo_runs_fewer_rows_on_a_cpu() -> None:
    """CPU_SHAPES cut the rows (the interpreter's programs), not the length of a row: the
    ragged blocks and reduction loops of the default shape still run."""
    for name, shape in demo.CPU_SHAPES.items():
        module = demo.load_example(demo.find_examples() / f"{name}.py")
        default = demo.default_shape(module)
        assert demo.demo_shape(module, gpu=False) == shape and len(shape) == len(default)
        assert shape[-1] == default[-1] and math.prod(shape) < math.prod(default), name
        args = module.inputs(shape=shape, device="meta")
        for _, kernel in demo.example_kernels(module):
            kernel.bind(args)


def test_the_first_measurement_completes_past_the_deadline(tmp_path: Path) -> None:
    """A slow start (workers, a loaded machine) that spends the whole budget still leaves
    the run one measured config; the others are skipped."""
    kernel = tc.kernel(add.add.fn, cache_dir=tmp_path)
    args = (torch.randn(8, 16), torch.randn(8, 16))
    bound = kernel.bind(args)
    configs = [tc.Config(block_sizes=[s, 16]) for s in (1, 2, 4)]
    with bench.Benchmarker(bound, args, workers=0) as benchmarker:
        benchmarker.deadline = time.monotonic() - 1.0
        statuses = [t.status for t in benchmarker(configs)]
        assert statuses == ["ok", "skipped", "skipped"]
        assert [t.status for t in benchmarker(configs[1:])] == ["skipped", "skipped"]


def test_configs_failing_past_the_deadline_do_not_leave_the_run_with_nothing(
    tmp_path: Path,
) -> None:
    """The first answers past the deadline are failures: the run goes on to one timed
    config (on a GPU a heavy kernel's first configs can all run out of resources)."""
    kernel = tc.kernel(add.add.fn, cache_dir=tmp_path)
    args = (torch.randn(8, 16), torch.randn(8, 16))
    bound = kernel.bind(args)
    good = [tc.Config(block_sizes=[s, 16]) for s in (2, 4)]
    with bench.Benchmarker(bound, args, workers=0) as benchmarker:
        real = benchmarker._job
        broken = {"code_path": str(tmp_path / "missing.py")}
        benchmarker._job = lambda c, **kw: broken if c.block_sizes[0] == 1 else real(c, **kw)
        benchmarker.deadline = time.monotonic() - 1.0
        configs = [tc.Config(block_sizes=[1, 16]), *good]
        statuses = [t.status for t in benchmarker(configs)]
    assert statuses[0] not in ("ok", "skipped") and statuses[1:] == ["ok", "skipped"]
