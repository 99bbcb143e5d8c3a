"""A shorter path for the Triton launches of generated launchers (TILECRAFT_FAST_LAUNCH).

`jit_fn[grid](*args, **constexprs)` costs about 12 us of host time a call on an H200 host,
most of it before the launch: binding the arguments, computing Triton's specialization
key, looking up the compiled kernel. A generated launcher launches the same kernel with
the same constexprs every call, so after the first launch its compiled kernel is known;
`FastKernel` keeps it and calls its launcher (`CompiledKernel.run`) directly with the
grid, the stream and the arguments.

It is verified, not assumed: the first launch of each argument signature goes through
Triton with the compiled kernel's launcher wrapped, recording exactly what Triton passed
it, and the fast path is kept only if the call it would make is that very call (same
grid, stream, function, metadata and arguments, constexprs included; launch hooks that
call nothing, None or an empty chain, passed as None). Each later
call checks what Triton's key depends on (each tensor's dtype and 16-byte alignment, each
int's Triton specialization, scalar types, the constexprs, the current device, launch hooks,
pre-run hooks, the debug knob and the globals the kernel read) and takes Triton's own
path whenever any differs. Whatever fails while setting up (another Triton's internals,
a hook, an odd argument) leaves that kernel on Triton's path, logged at debug level.
Triton's interpreter (TRITON_INTERPRET=1) never gets it.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType
from typing import Any

import torch

log = logging.getLogger(__name__)

_MISSING = object()
MAX_SETUPS = 16  # verified setups per kernel before it stays on Triton's path
HOOKS = slice(6, 9)  # launch_metadata, enter hook, exit hook, in the launcher's call


class _Switch:
    on = True  # off inside `triton_launches_only()`


@contextmanager
def triton_launches_only() -> Iterator[None]:
    """Within this block, wrapped kernels launch through Triton's own launch (to compare)."""
    before, _Switch.on = _Switch.on, False
    try:
        yield
    finally:
        _Switch.on = before


def install(namespace: dict[str, Any], launcher: Callable[..., Any]) -> int:
    """Put a `FastKernel` in `namespace` in place of each Triton kernel that `launcher` (a
    generated host launcher whose globals are `namespace`) launches; how many."""
    jit_type = _jit_function_type()
    if jit_type is None:
        return 0
    installed = 0
    for name in launched_names(launcher.__code__):
        value = namespace.get(name)
        if type(value) is jit_type:  # not Triton's interpreter, not a subclass
            namespace[name] = FastKernel(value)
            installed += 1
    return installed


def _jit_function_type() -> type | None:
    """Triton's JITFunction, or None where launches are interpreted or Triton is absent."""
    if os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on"):
        return None
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return None
    return JITFunction


def launched_names(code: CodeType) -> set[str]:
    """The global names that `code` and the code nested in it (lambdas) read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= launched_names(const)
    return names


def unwrap(kernel: Any) -> Any:
    """The Triton kernel behind a `FastKernel` (anything else as it is)."""
    return kernel.jit_fn if isinstance(kernel, FastKernel) else kernel


class FastKernel:
    """Stands in for a `@triton.jit` kernel in a generated module: `kernel[grid](...)`
    launches it, directly through its compiled kernel's launcher once that is verified
    (one verified path per device)."""

    def __init__(self, jit_fn: Any) -> None:
        self.jit_fn = jit_fn
        self.paths: dict[Any, FastPath] = {}  # by device
        self.get_device: Callable[[], Any] | None = None  # Triton's, once a path is set up
        self.setups = 0
        self.disabled = False  # a setup failed in a way that would fail again
        self.why_not = "not launched yet"  # why the last launch took Triton's path
        # the last grid launched on and its launch, one tuple (set at once: threads may race):
        # a generated launcher's grid is a constant, so each call of it reuses the launch
        self.last: tuple[Any, Callable[..., Any]] | None = None

    @property
    def fast(self) -> FastPath | None:
        """A verified path (the current device's where there is one), or None."""
        if self.get_device is not None and self.get_device() in self.paths:
            return self.paths[self.get_device()]
        return next(iter(self.paths.values()), None)

    @property
    def status(self) -> str:
        """ "fast" when a verified path is set up, else why not (for reports)."""
        return "fast" if self.paths else self.why_not

    def __getattr__(self, name: str) -> Any:  # `.fn`, `.run`, ...: the Triton kernel's
        if name == "jit_fn":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.jit_fn, name)

    def __repr__(self) -> str:
        return f"FastKernel({self.jit_fn!r})"

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        last = self.last
        if last is not None and last[0] is grid:
            return last[1]
        call = functools.partial(self.launch, grid)
        self.last = (grid, call)
        return call

    def launch(self, grid: Any, *args: Any, **kwargs: Any) -> Any:
        """Launch on `grid`: directly where the verified path holds, else through Triton."""
        get_device = self.get_device
        if not _Switch.on:
            return self.jit_fn[grid](*args, **kwargs)
        if get_device is not None and type(grid) is tuple:
            fast = self.paths.get(get_device())
            if fast is not None and kwargs == fast.kwargs and fast.holds(args):
                fast.launch(grid, args)
                return fast.kernel
        if self.disabled:
            return self.jit_fn[grid](*args, **kwargs)
        return self.launch_and_verify(grid, args, kwargs)

    def launch_and_verify(self, grid: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Launch through Triton once, recording the launcher's call; keep the fast path
        if it would have made that same call. Exactly one launch happens, whatever fails."""
        if not self._plain():  # a profiler's hooks: Triton's launch calls them
            return self.jit_fn[grid](*args, **kwargs)
        self.setups += 1
        if self.setups > MAX_SETUPS:  # signatures or devices keep changing: not worth it
            self._give_up(f"over {MAX_SETUPS} setups")
            return self.jit_fn[grid](*args, **kwargs)
        try:
            setup = Setup(self.jit_fn, grid, args, kwargs)
        except Exception as e:  # noqa: BLE001 - Triton's own launch reports real errors
            self._give_up(f"cannot set up ({type(e).__name__}: {e})")
            return self.jit_fn[grid](*args, **kwargs)
        result = setup.launch()
        try:
            self._keep(setup, setup.mismatch(result))
        except Exception as e:  # noqa: BLE001 - the launch is done: just no fast path
            self._give_up(f"cannot check the launch ({type(e).__name__}: {e})")
        return result

    def _plain(self) -> bool:
        try:
            if runs_plainly(self.jit_fn, triton_knobs()):
                return True
        except Exception:  # noqa: BLE001 - no knobs here: the setup reports it
            return True
        self.why_not = "launch hooks or pre-run hooks are set"
        return False

    def _keep(self, setup: Setup, reason: str | None) -> None:
        """Keep the verified path of `setup`, or note why there is none."""
        if reason is None:
            path = setup.fast_path()
            self.paths[path.device] = path
            self.get_device = path.get_device
        elif setup.permanent:
            self._give_up(reason)
        else:
            self.why_not = reason
            log.debug("tilecraft: %s launches through Triton this time: %s", self.jit_fn, reason)

    def _give_up(self, reason: str) -> None:
        self.disabled, self.get_device, self.why_not = True, None, f"off: {reason}"
        self.paths = {}
        log.debug("tilecraft: fast launch off for %s: %s", self.jit_fn, reason)


class Setup:
    """One launch through Triton with the compiled kernel's launcher call recorded."""

    def __init__(self, jit_fn: Any, grid: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        self.jit_fn, self.grid, self.args, self.kwargs = jit_fn, grid, args, kwargs
        self.permanent = True  # until a failure that a later call may not meet
        self.knobs, self.driver = triton_knobs(), active_driver()
        self.signature = signature(args)
        if None in self.signature:
            raise TypeError("an argument is neither a tensor nor an int, float, bool or None")
        self.tail = constexpr_tail(jit_fn, len(args), kwargs)
        # compile (or find) without launching, to wrap the launcher before the launch
        self.kernel = jit_fn.run(*args, grid=grid, warmup=True, **kwargs)
        self.launcher = self.kernel.run  # a property: loads the binary on first use
        self.calls: list[tuple] = []

    def launch(self) -> Any:
        """The normal launch, its launcher call recorded (when it is this kernel's)."""
        kernel, launcher, calls = self.kernel, self.launcher, self.calls

        def record(*call: Any) -> Any:
            calls.append(call)
            return launcher(*call)

        swapped = getattr(kernel, "_run", _MISSING) is launcher
        if swapped:
            kernel._run = record
        try:
            return self.jit_fn[self.grid](*self.args, **self.kwargs)
        finally:
            if swapped:
                kernel._run = launcher

    def mismatch(self, result: Any) -> str | None:
        """Why the fast path would not make the recorded call; None when it would."""
        if type(self.grid) is not tuple:
            return f"the grid {self.grid!r} is not a tuple"
        if result is not self.kernel:
            self.permanent = False  # e.g. a concurrent recompile
            return "the launch used another compiled kernel"
        if len(self.calls) != 1:
            return f"recorded {len(self.calls)} launcher calls (expected 1)"
        if not runs_plainly(self.jit_fn, self.knobs):
            self.permanent = False
            return "launch hooks or pre-run hooks are set"
        device = self.driver.get_current_device()
        expected = (
            *grid_dims(self.grid),
            self.driver.get_current_stream(device),
            self.kernel.function,
            self.kernel.packed_metadata,
            None,
            None,
            None,
            *self.args,
            *self.tail,
        )
        return _difference(quiet(self.calls[0]), expected)

    def fast_path(self) -> FastPath:
        return FastPath(self)


class FastPath:
    """The verified direct launch of one compiled kernel, for one argument signature."""

    def __init__(self, setup: Setup) -> None:
        self.jit_fn, self.kernel, self.knobs = setup.jit_fn, setup.kernel, setup.knobs
        self.kwargs, self.signature, self.tail = setup.kwargs, setup.signature, setup.tail
        self.launcher, self.function = setup.launcher, setup.kernel.function
        self.metadata = setup.kernel.packed_metadata
        self.grid, self.dims = setup.grid, grid_dims(setup.grid)  # as `launch` will see them
        self.get_device = setup.driver.get_current_device
        self.get_stream = setup.driver.get_current_stream
        self.device = self.get_device()
        runtime = setup.knobs.runtime
        self.debug = runtime.debug
        # the hooks seen silent at setup, and their chains' call lists (empty) if any
        self.enter, self.exit = runtime.launch_enter_hook, runtime.launch_exit_hook
        self.enter_calls = getattr(self.enter, "calls", ())
        self.exit_calls = getattr(self.exit, "calls", ())
        # the signature as `matches` checks it: each tensor's position, dtype and alignment,
        # each other argument's position and signature
        self.count = len(setup.args)
        self.tensors: list[tuple[int, Any, bool]] = []
        self.scalars: list[tuple[int, tuple | None]] = []
        for i, (arg, kind) in enumerate(zip(setup.args, self.signature, strict=True)):
            if isinstance(arg, torch.Tensor) and kind is not None:
                self.tensors.append((i, kind[0], kind[1]))
            else:
                self.scalars.append((i, kind))

    def holds(self, args: tuple) -> bool:
        """Whether Triton would pick this compiled kernel for `args` now (on its device),
        and its launch hooks still call nothing."""
        runtime, jit_fn = self.knobs.runtime, self.jit_fn
        return (
            runtime.launch_enter_hook is self.enter
            and runtime.launch_exit_hook is self.exit
            and not self.enter_calls
            and not self.exit_calls
            and runtime.debug == self.debug
            and not jit_fn.pre_run_hooks
            and (not jit_fn.used_global_vals or _globals_unchanged(jit_fn))
            and self.matches(args)
        )

    def matches(self, args: tuple) -> bool:
        """`signature(args) == self.signature`, without building the signature (this runs on
        every fast launch): the same reads of each argument, compared as they are made."""
        if len(args) != self.count:
            return False
        tensor = torch.Tensor
        for i, dtype, aligned in self.tensors:
            a = args[i]
            if not isinstance(a, tensor) or a.dtype is not dtype:
                return False
            if (a.data_ptr() % 16 == 0) is not aligned:
                return False
        for i, expected in self.scalars:  # noqa: SIM110 - a loop: cheaper than all()
            if _scalar_signature(args[i]) != expected:
                return False
        return True

    def launch(self, grid: Any, args: tuple) -> None:
        """What Triton's launch does once it has found the kernel, without the hooks (which
        call nothing: `holds` checked)."""
        g0, g1, g2 = self.dims if grid is self.grid else grid_dims(grid)
        stream = self.get_stream(self.device)
        self.launcher(
            g0, g1, g2, stream, self.function, self.metadata, None, None, None, *args, *self.tail
        )


def triton_knobs() -> Any:
    """Triton's knobs (launch hooks, debug): Triton 3.4 and later."""
    from triton import knobs

    return knobs


def active_driver() -> Any:
    """Triton's active driver (the current device and stream, as Triton's launch reads them)."""
    from triton.runtime.driver import driver

    return driver.active


def signature(args: tuple) -> list[tuple | None]:
    """What Triton specializes a compiled kernel on, for each positional argument: a
    tensor's dtype and 16-byte alignment; an int's equality to 1, divisibility by 16 and
    range (Triton's i32/i64/u64); the type of a float, bool or None. At least as fine as
    Triton's key. None for any other argument (no fast path for it)."""
    tensor = torch.Tensor  # tensors inline: this runs on every fast launch
    return [
        (a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, tensor) else _scalar_signature(a)
        for a in args
    ]


def _scalar_signature(a: Any) -> tuple | None:
    kind = type(a)
    if kind is int:
        return (int, a == 1, a % 16 == 0, -(2**31) <= a < 2**31, a < 2**63)
    if kind is float or kind is bool or a is None:
        return (kind,)
    return None


def constexpr_tail(jit_fn: Any, positional: int, kwargs: dict[str, Any]) -> tuple:
    """The values of the kernel's parameters after the positional ones, in order (given
    by keyword, else their defaults): what Triton passes its launcher after the arguments."""
    parameters = jit_fn.signature.parameters
    tail = []
    for name in jit_fn.arg_names[positional:]:
        value = kwargs.get(name, parameters[name].default)
        if value is parameters[name].empty:
            raise TypeError(f"no value for the kernel's parameter {name!r}")
        tail.append(value)
    return tuple(tail)


def grid_dims(grid: tuple) -> tuple[Any, Any, Any]:
    """A grid as Triton's three launch dimensions, as Triton's launch reads it."""
    size = len(grid)
    return (grid[0], grid[1] if size > 1 else 1, grid[2] if size > 2 else 1)


def runs_plainly(jit_fn: Any, knobs: Any) -> bool:
    """No launch hooks to call (profilers), no pre-run hooks."""
    runtime = knobs.runtime
    enter, exit_ = runtime.launch_enter_hook, runtime.launch_exit_hook
    return silent(enter) and silent(exit_) and not jit_fn.pre_run_hooks


def silent(hook: Any) -> bool:
    """Whether a launch hook calls nothing: None (Triton 3.4-3.5), or an empty `HookChain`
    (later Tritons, where the hooks are never None)."""
    return hook is None or (type(hook).__name__ == "HookChain" and not hook.calls)


def quiet(call: tuple) -> tuple:
    """A launcher call whose launch hooks call nothing, with hooks and launch metadata as
    None: the same launch (the launcher calls a hook only if it is not None, and reads the
    metadata only to pass it to the hooks)."""
    if len(call) < HOOKS.stop or not (silent(call[7]) and silent(call[8])):
        return call
    return (*call[: HOOKS.start], None, None, None, *call[HOOKS.stop :])


def _globals_unchanged(jit_fn: Any) -> bool:
    """Triton's check that the globals a kernel read when compiled still hold."""
    for (name, _), (value, namespace) in jit_fn.used_global_vals.items():
        if namespace.get(name, _MISSING) != value:
            return False  # Triton's own launch raises its error
    return True


def _difference(got: tuple, expected: tuple) -> str | None:
    """The first position where the recorded launcher call differs from the expected one."""
    if len(got) != len(expected):
        return f"the launcher took {len(got)} arguments, the fast path passes {len(expected)}"
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        if not _same(a, b):
            return f"launcher argument {i} was {a!r}, the fast path passes {b!r}"
    return None


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False  # the very tensor, nothing equal to it
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - incomparable: not the same
        return False
