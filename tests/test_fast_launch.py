"""The fast launch path (runtime/fast_launch.py), against a CPU stand-in for Triton's launch.

`FakeJit` follows the protocol of Triton 3.4-3.9's `JITFunction.run`: compile or find a
kernel for the arguments' key, then call its launcher `kernel.run(grid0, grid1, grid2,
stream, function, packed_metadata, launch_metadata, enter_hook, exit_hook, *all_args)`;
the launcher adds on the CPU. The real thing runs on the GPU: benchmarks/bench_overhead.py
compares the fast path with Triton's launch there.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import triton.language as tl

import tilecraft as tc
from tilecraft.runtime import fast_launch
from tilecraft.runtime.fast_launch import FastKernel, signature, unwrap


def _kernel(out, x, y, n, BLOCK=16):  # noqa: ANN001, ANN202, N803 - a Triton kernel's shape
    pass


class FakeCompiled:
    """A compiled kernel: its launcher behind a lazy `run` property, as Triton's."""

    def __init__(self, launcher: Any) -> None:
        self._make, self._run = launcher, None
        self.function, self.packed_metadata = object(), (4, 1, 1)

    @property
    def run(self) -> Any:
        if self._run is None:
            self._run = self._make
        return self._run


class FakeJit:
    """Triton's launch protocol on the CPU; counts entries into `run` and real launches."""

    def __init__(self, env: SimpleNamespace, constexprs_passed: bool = True) -> None:
        self.env, self.constexprs_passed = env, constexprs_passed
        self.signature = inspect.signature(_kernel)
        self.arg_names = list(self.signature.parameters)
        self.pre_run_hooks: list[Any] = []
        self.used_global_vals: dict[Any, Any] = {}
        self.kernels: dict[Any, FakeCompiled] = {}
        self.runs = self.launches = 0

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> FakeCompiled:
        self.runs += 1
        params = {k: v for k, v in kwargs.items() if k in self.arg_names}
        bound = self.signature.bind(*args, **params)
        bound.apply_defaults()
        key = (str(signature(args)), str(sorted(kwargs.items())), self.env.runtime.debug)
        kernel = self.kernels.setdefault(key, FakeCompiled(self.launcher))
        if not warmup:
            values = list(bound.arguments.values())
            values = values if self.constexprs_passed else values[: len(args)]
            runtime, device = self.env.runtime, self.env.driver.get_current_device()
            kernel.run(
                *fast_launch.grid_dims(grid),
                self.env.driver.get_current_stream(device),
                kernel.function,
                kernel.packed_metadata,
                None,
                runtime.launch_enter_hook,
                runtime.launch_exit_hook,
                *values,
            )
        return kernel

    def launcher(self, *call: Any) -> None:
        self.launches += 1
        out, x, y, n = call[9:13]
        out[:n] = x[:n] + y[:n]


class FakeDriver:
    def __init__(self) -> None:
        self.device = 0

    def get_current_device(self) -> int:
        return self.device

    def get_current_stream(self, device: int) -> int:
        return 1000 + device


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Fake Triton knobs and driver, seen by fast_launch."""
    runtime = SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None, debug=False)
    env = SimpleNamespace(runtime=runtime, driver=FakeDriver())
    monkeypatch.setattr(fast_launch, "triton_knobs", lambda: SimpleNamespace(runtime=runtime))
    monkeypatch.setattr(fast_launch, "active_driver", lambda: env.driver)
    return env


def call(
    kernel: FastKernel,
    n: int = 20,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    **kwargs: Any,
) -> torch.Tensor:
    """Launch the add on fresh tensors (`x` of `dtype`) and check the result."""
    x, y = torch.randn(n + offset, dtype=dtype)[offset:], torch.randn(n)
    out = torch.zeros(n)
    kernel[(2,)](out, x, y, n, **kwargs)
    torch.testing.assert_close(out, (x + y).to(out.dtype))
    return out


def test_later_launches_skip_triton_and_add_correctly(env: SimpleNamespace) -> None:
    jit = FakeJit(env)
    kernel = FastKernel(jit)
    call(kernel)
    assert (jit.runs, jit.launches) == (2, 1)  # a compile-only run, then the recorded launch
    assert kernel.fast is not None
    for _ in range(3):
        call(kernel)
    assert (jit.runs, jit.launches) == (2, 4)


@pytest.mark.parametrize(
    "change",
    [
        "misaligned",
        "dtype",
        "n=1",
        "n=17",
        "kwargs",
        "enter hook",
        "debug",
        "device",
        "pre-run hook",
    ],
)
def test_what_triton_keys_on_takes_its_path(env: SimpleNamespace, change: str) -> None:
    jit = FakeJit(env)
    kernel = FastKernel(jit)
    call(kernel, n=32)
    runs = jit.runs
    call(kernel, n=32)
    assert jit.runs == runs  # the fast path
    options: dict[str, Any] = {"n": 32}
    if change == "misaligned":
        options["offset"] = 1  # a float32 view one element in: not 16-byte aligned
    elif change == "dtype":
        options["dtype"] = torch.float64
    elif change.startswith("n="):
        options["n"] = int(change[2:])
    elif change == "kwargs":
        options["BLOCK"] = 32
    elif change == "enter hook":
        env.runtime.launch_enter_hook = lambda *a: None
    elif change == "debug":
        env.runtime.debug = True
    elif change == "device":
        env.driver.device = 1
    else:
        jit.pre_run_hooks.append(lambda *a, **k: None)
    launches = jit.launches
    call(kernel, **options)
    assert jit.runs > runs  # Triton's own launch
    assert jit.launches == launches + 1  # exactly one launch


class HookChain:
    """Triton 3.9's launch hooks: never None, empty unless a profiler adds a call."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, *args: Any) -> None:
        for hook in self.calls:
            hook(*args)


def test_empty_hook_chains_keep_the_fast_path(env: SimpleNamespace) -> None:
    env.runtime.launch_enter_hook, env.runtime.launch_exit_hook = HookChain(), HookChain()
    jit = FakeJit(env)
    kernel = FastKernel(jit)
    call(kernel)
    runs = jit.runs
    call(kernel)
    assert kernel.fast is not None and jit.runs == runs
    env.runtime.launch_enter_hook.calls.append(lambda metadata: None)  # a profiler starts
    call(kernel)
    assert jit.runs == runs + 1 and jit.launches == 3  # Triton's launch alone, no setup


def test_triton_launches_only_switches_it_off_for_a_while(env: SimpleNamespace) -> None:
    jit = FakeJit(env)
    kernel = FastKernel(jit)
    call(kernel)
    runs = jit.runs
    with fast_launch.triton_launches_only():
        call(kernel)
    assert jit.runs == runs + 1  # Triton's launch, no setup
    call(kernel)
    assert jit.runs == runs + 1 and jit.launches == 3


def test_each_device_keeps_its_path(env: SimpleNamespace) -> None:
    jit = FakeJit(env)
    kernel = FastKernel(jit)
    call(kernel)
    env.driver.device = 1
    call(kernel)  # set up on the second device
    runs = jit.runs
    for device in (0, 1, 0):
        env.driver.device = device
        call(kernel)
    assert jit.runs == runs and len(kernel.paths) == 2


def test_setups_are_capped(env: SimpleNamespace) -> None:
    jit = FakeJit(env)
    kernel = FastKernel(jit)
    for device in range(fast_launch.MAX_SETUPS + 3):
        env.driver.device = device
        call(kernel)
    assert kernel.disabled and not kernel.paths
    assert jit.launches == fast_launch.MAX_SETUPS + 3


def test_a_launcher_that_takes_other_arguments_turns_it_off(env: SimpleNamespace) -> None:
    jit = FakeJit(env, constexprs_passed=False)  # as Triton 3.1 and older called it
    kernel = FastKernel(jit)
    for _ in range(3):
        call(kernel)
    assert kernel.fast is None and kernel.disabled
    assert jit.launches == 3


def test_a_failing_setup_launches_through_triton(
    env: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise RuntimeError("another Triton")

    monkeypatch.setattr(fast_launch, "active_driver", broken)
    jit = FakeJit(env)
    kernel = FastKernel(jit)
    for _ in range(2):
        call(kernel)
    assert kernel.disabled and jit.launches == 2


def test_odd_arguments_and_grids_launch_through_triton(env: SimpleNamespace) -> None:
    jit = FakeJit(env)
    kernel = FastKernel(jit)
    x, out = torch.randn(4), torch.zeros(4)
    kernel[(1,)](out, x, x, torch.tensor(4).item())  # an int: fine
    assert kernel.fast is not None
    kernel[[1]](out, x, x, 4)  # a list grid: Triton's path, and no fast path for it
    assert jit.launches == 2


def test_signature_follows_triton_specialization() -> None:
    x = torch.randn(8)
    assert signature((x,)) == [(torch.float32, True)]
    assert signature((x[1:],)) == [(torch.float32, False)]
    assert signature((1,)) != signature((2,)) != signature((16,))
    assert signature((2**31,)) != signature((2**31 - 1,))
    assert signature((1.5, True, None)) == [(float,), (bool,), (type(None),)]
    assert signature(("text",)) == [None]


def test_the_per_launch_check_is_signature_equality(env: SimpleNamespace) -> None:
    """`FastPath.matches` (what each fast launch checks) agrees with comparing signatures,
    on arguments that differ in each way Triton specializes on."""
    jit = FakeJit(env)
    kernel = FastKernel(jit)
    call(kernel, n=32)
    path = kernel.fast
    assert path is not None
    x = torch.randn(40)
    half = x[:32].to(torch.float16)
    variants = [
        (x, x, x, 32),
        (x[1:], x, x, 32),  # misaligned
        (x, x, x[4:], 32),  # aligned again (16 bytes in)
        (x, half, x, 32),  # another dtype
        (x, x, x, 33),
        (x, x, x, 1),
        (x, x, x, 2**40),
        (x, x, x, 32.0),
        (x, x, x, x),  # a tensor for the int
        (32, x, x, 32),  # an int for a tensor
        (x, x, x),
        (x, x, x, 32, 1),
    ]
    for args in variants:
        assert path.matches(args) == (signature(args) == path.signature), args


def test_grids_reuse_their_launch_and_change_it(env: SimpleNamespace) -> None:
    """A constant grid gets the same launch callable each time; another grid, its own dims."""
    grids: list[tuple] = []
    jit = FakeJit(env)
    launcher = jit.launcher

    def record(*call: Any) -> None:
        grids.append(call[:3])
        launcher(*call)

    jit.launcher = record  # type: ignore[method-assign]
    kernel = FastKernel(jit)
    grid = (2,)
    assert kernel[grid] is kernel[grid]
    x, out = torch.randn(8), torch.zeros(8)
    for g in (grid, grid, (3, 2), (3, 2, 5), grid):
        kernel[g](out, x, x, 8)
    assert kernel.fast is not None and jit.runs == 2  # one setup, then the fast path
    assert grids == [(2, 1, 1), (2, 1, 1), (3, 2, 1), (3, 2, 5), (2, 1, 1)]


def test_install_wraps_only_launched_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    class Jit:
        def __getitem__(self, grid: Any) -> Any:
            return lambda *args: None

    monkeypatch.setattr(fast_launch, "_jit_function_type", lambda: Jit)
    launched, helper = Jit(), Jit()

    def launcher(x: Any) -> None:
        (lambda: _k[(1,)](x))()  # type: ignore[name-defined]  # noqa: F821

    namespace = {"_k": launched, "_helper": helper}
    assert fast_launch.install(namespace, launcher) == 1
    assert isinstance(namespace["_k"], FastKernel) and unwrap(namespace["_k"]) is launched
    assert namespace["_helper"] is helper  # device code may call it: left alone


def test_the_interpreter_and_the_switch_keep_triton_launches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert fast_launch._jit_function_type() is None
    monkeypatch.setenv("TILECRAFT_FAST_LAUNCH", "0")
    assert tc.kernel(lambda x: x).settings.fast_launch is False
    monkeypatch.delenv("TILECRAFT_FAST_LAUNCH")
    assert tc.kernel(lambda x: x).settings.fast_launch is True


@pytest.mark.interpreter
def test_generated_launchers_get_it_and_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the interpreter (no driver, no compiled kernel) a wrapped launch must set up,
    fail, and keep launching through Triton with right results; compiling without running
    (guard.compile_only) must still see Triton's kernel."""
    from triton.runtime.interpreter import InterpretedFunction

    from tilecraft.runtime import guard

    monkeypatch.setattr(fast_launch, "_jit_function_type", lambda: InterpretedFunction)

    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in tc.tile(out.size()):
            out[tile] = x[tile] + y[tile]
        return out

    kernel = tc.kernel(add, config=tc.Config(block_sizes=[8]))
    x, y = torch.randn(13), torch.randn(13)
    for _ in range(3):
        torch.testing.assert_close(kernel(x, y), x + y)
    launcher = kernel.bind((x, y)).launcher
    assert launcher is not None
    wrapped = [v for v in launcher.__globals__.values() if isinstance(v, FastKernel)]
    assert len(wrapped) == 1 and wrapped[0].fast is None
    swapped = guard.compile_only(launcher).__globals__
    assert any(isinstance(v, guard._Warmup) for v in swapped.values())


def _triton_add(out, x, y, n, BLOCK: tl.constexpr):  # noqa: ANN001, ANN202, N803
    pass  # never compiled: the test's `_do_compile` hands back a CPU stand-in


class TritonTarget:
    """A driver for Triton's real `JITFunction.run` on the CPU (a GPU's target)."""

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 7


class StandIn:
    """A compiled kernel as Triton's: `run` a lazy property, `launch_metadata` as Triton's."""

    def __init__(self) -> None:
        self._run: Any = None
        self.function, self.packed_metadata, self.launches = 1234567, (4, 1, 1, 128), 0

    @property
    def run(self) -> Any:
        if self._run is None:
            self._run = self.launch
        return self._run

    def launch(self, *call: Any) -> None:
        self.launches += 1
        out, x, y, n = call[9:13]
        out[:n] = x[:n] + y[:n]

    def launch_metadata(self, grid: Any, stream: int, *args: Any) -> Any:
        hook = fast_launch.triton_knobs().runtime.launch_enter_hook
        return None if hook is None else {"name": "_triton_add", "stream": stream}


def test_against_tritons_own_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's own `JITFunction.run` (its binder, key, cache and launcher call), with
    compiling and the device faked: the fast path verifies against it and then skips it."""
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    monkeypatch.setattr(driver, "_active", TritonTarget())
    compiled = StandIn()
    jit = JITFunction(_triton_add)
    jit._do_compile = lambda *args, **kwargs: compiled  # the binary: a CPU stand-in
    kernel = FastKernel(jit)
    try:
        call(kernel, BLOCK=16, num_warps=4)
    except Exception as e:  # noqa: BLE001 - this Triton's internals differ: not testable so
        pytest.skip(f"Triton's launch cannot run on this CPU: {type(e).__name__}: {e}")
    assert kernel.status == "fast", kernel.status

    def no_triton(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("Triton's launch ran on the fast path")

    monkeypatch.setattr(jit, "run", no_triton)
    for _ in range(3):
        call(kernel, BLOCK=16, num_warps=4)
    assert compiled.launches == 4
    monkeypatch.undo()  # a misaligned view: Triton's launch, its own specialization
    monkeypatch.setattr(driver, "_active", TritonTarget())
    call(kernel, offset=1, BLOCK=16, num_warps=4)
    assert compiled.launches == 5
