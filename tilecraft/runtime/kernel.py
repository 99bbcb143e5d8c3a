"""`Kernel`: the decorated function; `tc.kernel` builds one."""

from __future__ import annotations

import functools
import inspect
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any, overload

import torch

from tilecraft.exc import BadArgument, GraphCaptureError, TilecraftError
from tilecraft.frontend.host import Element, read_element
from tilecraft.frontend.source import (
    KernelSource,
    frozen,
    global_reads,
    module_value,
    read_source,
    refreshed,
)
from tilecraft.language.state import Sites
from tilecraft.language.tunables import constexpr
from tilecraft.runtime.bound import BoundKernel
from tilecraft.runtime.config import Config
from tilecraft.runtime.cpu import container_items, cpu_mode, runs_on_cpu, tensors_in, warn_slow
from tilecraft.runtime.interpret import run_eagerly
from tilecraft.runtime.options import settings_from_options
from tilecraft.runtime.settings import Settings
from tilecraft.runtime.spec import callable_key


class Kernel:
    """A tilecraft kernel: call it like the function; it compiles per specialization."""

    def __init__(
        self,
        fn: Callable[..., Any],
        config: Config | None = None,
        configs: Sequence[Config] | None = None,
        static_shapes: bool = True,
        default_config: Config | Callable[[tuple], Config | None] | None = None,
        **settings: Any,
    ) -> None:
        self.fn = fn
        self.config = _as_config(config)  # a dict of fields as Helion takes one too
        self.configs = [_as_config(c) for c in configs or []]
        # the author's measured default (partial; the heuristics fill the rest), or a
        # function of the arguments giving it: untuned calls run it, tuning starts from it
        self.default_config = default_config
        self.settings = Settings(static_shapes=static_shapes, **settings_from_options(settings))
        self.signature = inspect.signature(fn)
        self._defaults = positional_defaults(self.signature)
        # calls with this many positional arguments need no normalizing (-1: every call does)
        self._arity = len(self.signature.parameters) if self._defaults else -1
        self._bound: dict[tuple, BoundKernel] = {}
        self.value_reads: list[Element] = []  # argument elements the host code reads
        self._source: KernelSource | None = None
        self._constants: list[tuple[dict[str, Any], str]] | None = None  # `global_reads`
        self._eager: Callable[..., Any] | None = None
        self._eager_constants: tuple = ()  # the module constants `_eager` was built with
        self._warned_grad = False
        functools.update_wrapper(self, fn)

    @property
    def source(self) -> KernelSource:
        if self._source is None:
            self._source = read_source(self.fn)
        return self._source

    def normalize(self, args: tuple, kwargs: dict[str, Any]) -> tuple:
        """Positional arguments with defaults filled in."""
        missing = None if kwargs else self._defaults.get(len(args))
        if missing is not None:  # the common case, without the cost of signature.bind
            return args + missing if missing else args
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def key(self, args: tuple) -> tuple:
        """What a compiled kernel is specialized on (computed on every call, so kept cheap),
        with the values of the tensor elements its host code reads (`n = int(sizes[0])`)."""
        key = tuple(
            [
                # `_tensor_key` inline: most arguments are tensors, and a call costs
                (a.dtype, a.shape, a.stride(), a.device, a.data_ptr() % 16 == 0)
                if isinstance(a, torch.Tensor)
                else _arg_key(a)
                for a in args
            ]
        )
        if self.value_reads:
            key += _element_values(args, self.value_reads)
        return key + self._constant_values() if self._constants != [] else key

    def _constant_values(self) -> tuple:
        """The values of the module-level constants the kernel reads (`global_reads`)."""
        if self._constants is None:
            self._constants = global_reads(self.fn)
        return tuple([frozen(module_value(d, n)) for d, n in self._constants])

    def bind(self, args: tuple, kwargs: dict[str, Any] | None = None) -> BoundKernel:
        """The BoundKernel for these arguments (created on first use)."""
        args = self.normalize(tuple(args), kwargs or {})
        key = self.key(args)
        bound = self._bound.get(key)
        if bound is None:
            if self._source is not None and self._constants:
                self._refresh()
            _check_devices(args, self.source)
            mode = cpu_mode() if runs_on_cpu(args) else None  # before Triton is imported
            bound = self._bound[key] = BoundKernel(
                self.source, args, self.settings, self.default_config
            )
            bound.cpu_mode = mode
            if bound.values:  # specialized on values read by the host code: key them too
                self.value_reads += [e for e in bound.values if e not in self.value_reads]
                del self._bound[key]
                self._bound[self.key(args)] = bound
        return bound

    def _refresh(self) -> None:
        """Read the module-level constants again (`global_reads`) if one changed: compiled
        code and eager mode then take the new values."""
        source = refreshed(self.source, self._constants or [])
        if source is not self._source:
            self._source, self._eager = source, None

    def chosen_config(self) -> Config | None:
        return self.config or (self.configs[0] if self.configs else None)

    def config_for(self, bound: BoundKernel, args: tuple, tune: bool = True) -> Config | None:
        """The config a first call runs: fixed, cached from an earlier tuning (or imported),
        or tuned now.

        Tuning on a first call happens only on a GPU (on a CPU times mean nothing), unless
        the effort is "none" (then a stored tuned config runs if there is one, else the cost
        model's pick where it is confident, see autotune/predict.py); `configs=[...]` are
        compared against each other. With `tune` False, a call that would tune raises
        `TuningNeeded` instead.
        """
        if self.config is not None:
            return self.config
        if len(self.configs) == 1:
            return self.chosen_config()
        from tilecraft.autotune.tune import autotune, cached_config

        cached = cached_config(bound, args, self.settings)
        if cached is not None:
            return cached
        on_gpu = any(t.is_cuda for t in tensors_in(args))
        if self.settings.autotune_effort == "none":
            if on_gpu and not self.configs:  # the cost model's pick, when it is confident
                from tilecraft.autotune.predict import untuned_config

                bound.predicted = untuned_config(bound, args, self.settings)
                return bound.predicted
            return self.chosen_config()
        if not on_gpu:
            return self.chosen_config()
        if not tune:
            raise TuningNeeded
        return autotune(bound, args, self.settings, configs=self.configs or None)

    def settled_launcher(self, args: tuple, tune: bool = False) -> Callable[..., Any] | None:
        """The generated launcher that calls with `args` run, its Triton compile done (within
        the deadline, as a first call's), without launching it; None where such calls run
        eagerly, read tensor values in host code, or would tune first and `tune` is False
        (for tracing ahead of any call, see tilecraft/torch/inline.py: `args` are stand-ins
        with the right metadata, which tuning runs on)."""
        if self.settings.interpret or self.value_reads:
            return None
        key = self.key(args)
        bound = self._bound.get(key) or self.bind(args)
        if bound.values:  # read from `args`, which hold no values: forget that binding
            self._bound.pop(self.key(args), None)
            return None
        if bound.cpu_mode is not None:
            return None
        if bound.launcher is not None:
            return bound.launcher
        try:
            config = self.config_for(bound, args, tune=tune)
        except TuningNeeded:
            return None
        return bound.compile_in_time(config, args)[1]

    def autotune(self, args: Sequence[Any], **options: Any) -> Config:
        """Tune for these arguments now; later calls with the same specialization use it.

        Options: effort ("predict", "quick", "full"), search (a strategy name), budget_s,
        max_configs, seed (the same seed and tuning database try the same configs),
        objective ("time", "energy" or "edp": energy x delay; energy is measured through
        NVML on an NVIDIA GPU) and meter (an `autotune.energy.EnergyMeter` to read instead).
        `self.bind(args).tuning` then says what the run did, with its time/energy Pareto
        front (`"pareto"`) and the energy the run used (`"tuning_energy_j"`).
        Returns the winning Config (also printed as a pasteable decorator line and cached).
        """
        args = self.normalize(tuple(args), {})
        if runs_on_cpu(args):
            cpu_mode()  # Triton's interpreter, set before Triton is imported where it can be
        from tilecraft.autotune.tune import autotune

        bound = self.bind(args)
        if bound.cpu_mode == "eager":  # CPU tensors in a process whose Triton targets a GPU
            warnings.warn(
                f"tilecraft: `{self.fn.__name__}` got CPU tensors in a process with a GPU, so"
                " it runs eagerly in PyTorch and there is nothing to tune; pass GPU tensors",
                stacklevel=2,
            )
            bound.launcher = lambda *a: self.run_eagerly(a)
            objective = options.get("objective") or self.settings.autotune_objective
            bound.tuning = {"configs": 0, "failed": 0, "search": None, "objective": objective}
            return self.chosen_config() or bound.default_config
        config = autotune(bound, args, self.settings, configs=self.configs or None, **options)
        bound.launcher = bound.compile(config)
        return config

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != self._arity:
            args = self.normalize(args, kwargs)
        if not self._warned_grad and _grad_enabled() and _wants_grad(args):
            self._warn_grad()
        return self.run(args)

    def run(self, args: tuple) -> Any:
        """Call with `args` complete and positional (as `normalize` makes them), without the
        warning about inputs that require grad: for callers that take care of autograd
        (`TorchOp`), so their calls skip that work."""
        if self.settings.interpret:  # what compiled code refuses, eager mode refuses too
            self._bound.get(self.key(args)) or self.bind(args)
            return self.run_eagerly(args)
        bound = self._bound.get(self.key(args)) or self.bind(args)
        launcher = bound.launcher
        if launcher is None:
            return self._first_call(bound, args)
        return launcher(*args)

    def _first_call(self, bound: BoundKernel, args: tuple) -> Any:
        """Pick a config (maybe tuning), compile and run; never inside CUDA graph capture."""
        if _capturing(args):
            src = self.source
            raise GraphCaptureError(
                f"`{src.tree.name}` runs for the first time with these argument shapes inside"
                " CUDA graph capture, where it cannot compile or tune; call it once with the"
                " same shapes before capturing",
                src.loc(src.tree),
            )
        if bound.cpu_mode is not None:
            warn_slow(self.fn.__name__, bound.cpu_mode)
        if bound.cpu_mode == "eager":  # Triton's interpreter cannot run it in this process
            bound.resolve(self.chosen_config())  # a config that does not fit fails as compiled
            bound.launcher = lambda *a: self.run_eagerly(a)
            return bound.launcher(*args)
        config = self.config_for(bound, args)
        try:
            return bound.first_call(config, args)
        except TilecraftError:
            if config is None or config is not bound.predicted:
                raise
            # a predicted config that fails here (e.g. too much shared memory) falls back
            warnings.warn("tilecraft: the predicted config failed; the default runs", stacklevel=3)
            return bound.first_call(self.chosen_config(), args)

    def _warn_grad(self) -> None:
        """Outputs of a plain kernel have no autograd history: say so once."""
        self._warned_grad = True
        name = self.source.tree.name
        warnings.warn(
            f"tilecraft: `{name}` is called with inputs that require grad, but a plain kernel's"
            " outputs are detached from autograd; register it with"
            f" `{name}.as_torch_op('namespace::{name}', backward=...)` to differentiate it",
            UserWarning,
            stacklevel=3,
        )

    def as_torch_op(self, name: str, mutates_args: Sequence[str] = (), **autograd: Any) -> Any:
        """Register as the PyTorch operator `name` ("namespace::op"); returns a `TorchOp`.

        `backward=` (a kernel or function) and `setup_context=` make it differentiable;
        see `tilecraft.torch.as_torch_op`.
        """
        from tilecraft.torch.ops import as_torch_op

        return as_torch_op(name, mutates_args, **autograd)(self)

    def run_eagerly(self, args: tuple, config: Config | None = None) -> Any:
        """Run the body in PyTorch (interpret mode), tiled as `config` (by default the
        chosen one) tiles compiled code."""
        _check_devices(args, self.source)  # as compiled runs do, naming the kernel
        config = config or self.chosen_config()
        tunables = config.tunables if config else {}
        blocks = self._eager_blocks(args, config)
        constants = self._constant_values()
        if self._eager is None or constants != self._eager_constants:
            from tilecraft.runtime.interpret import eager_function

            self._refresh()
            self._eager, self._eager_constants = eager_function(self.source), constants
        return run_eagerly(self._eager, args, tunables, self.settings.check, blocks)

    def _eager_blocks(self, args: tuple, config: Config | None) -> tuple[Sites, list[int]]:
        """The block sizes compiled code would use for `args` (none where it would refuse
        them: eager mode then tiles by 32)."""
        try:
            bound = self._bound.get(self.key(args)) or self.bind(args)
            return bound.eager_blocks(config)
        except TilecraftError:
            return {}, []


class TuningNeeded(Exception):
    """`config_for` would tune, and was asked not to."""


def positional_defaults(sig: inspect.Signature) -> dict[int, tuple]:
    """For each count of positional arguments that defaults can complete, those defaults.

    Empty when a parameter is keyword-only or variadic: such calls go through `bind`.
    """
    params = list(sig.parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind not in positional for p in params):
        return {}
    completions: dict[int, tuple] = {len(params): ()}
    for count in range(len(params) - 1, -1, -1):
        if params[count].default is inspect.Parameter.empty:
            break
        completions[count] = (params[count].default, *completions[count + 1])
    return completions


def _tensor_key(arg: torch.Tensor) -> tuple:  # Kernel.key has it inline: change both
    # generated code has sizes baked in, so shapes are always part of the key for now (and
    # launchers fold dtypes, shapes, strides and devices into constants: codegen/fold.py)
    return (arg.dtype, arg.shape, arg.stride(), arg.device, arg.data_ptr() % 16 == 0)


def _arg_key(arg: Any) -> Any:
    if isinstance(arg, torch.Tensor):
        return _tensor_key(arg)
    if isinstance(arg, float):
        return float
    if isinstance(arg, (int, bool, str, type(None), torch.dtype)):
        return arg
    if isinstance(arg, types.FunctionType):  # inlined: each function compiles on its own
        return callable_key(arg, _arg_key)
    if isinstance(arg, types.BuiltinFunctionType):  # `torch.amax`: an op, one per builtin
        return arg
    if isinstance(arg, constexpr):
        raise BadArgument(
            f"an argument wrapped as tc.constexpr({arg.value!r}): pass {arg.value!r} itself "
            "(ints, bools and strs are specialized on already; `n: tc.constexpr` as an "
            "annotation is fine)"
        )
    items = container_items(arg)
    if items is not None:  # a list, tuple, dict or dataclass: the key of what it holds
        return (type(arg), tuple((k, _arg_key(v)) for k, v in items))
    return type(arg)


def _as_config(config: Any) -> Any:
    return Config(**config) if isinstance(config, dict) else config


def _element_values(args: tuple, elements: list[Element]) -> tuple:
    values = []
    for element in elements:
        try:
            values.append(read_element(args, element))
        except (IndexError, RuntimeError, AttributeError):  # not in these arguments
            values.append(None)
    return tuple(values)


_grad_enabled = torch.is_grad_enabled


def _wants_grad(args: tuple) -> bool:
    return any([isinstance(a, torch.Tensor) and a.requires_grad for a in args])


def _capturing(args: tuple) -> bool:
    """Whether a CUDA graph is being captured on the current stream (for GPU arguments)."""
    on_gpu = any(t.is_cuda for t in tensors_in(args))
    return on_gpu and torch.cuda.is_current_stream_capturing()


def _check_devices(args: tuple, src: KernelSource) -> None:
    devices = {a.device for a in args if isinstance(a, torch.Tensor)}
    if len(devices) > 1:
        names = ", ".join(sorted(map(str, devices)))
        raise BadArgument(f"tensor arguments are on different devices: {names}", src.loc(src.tree))


@overload
def kernel(fn: Callable[..., Any]) -> Kernel: ...
@overload
def kernel(fn: None = None, **options: Any) -> Callable[[Callable[..., Any]], Kernel]: ...
def kernel(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Make a tilecraft kernel from a function: `@tc.kernel` or `@tc.kernel(config=...)`.

    Keywords: `config=` (fixed), `configs=[...]` (compared), `default_config=` (the config
    untuned calls run and tuning starts from, instead of the heuristic one; partial configs
    are completed by the heuristics, and one that does not fit is ignored; or a function of
    the arguments returning one), and any setting (`autotune_effort="full"`,
    `print_code=True`, ...). Helion's settings are accepted where they mean something
    here (`print_output_code`, `dot_precision`, `static_shapes`, ...) and rejected by
    name otherwise (see `tilecraft.runtime.options`).

    Example::

        @tc.kernel
        def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            for tile in tc.tile(x.size()):
                out[tile] = x[tile] + y[tile]
            return out
    """
    if fn is None:
        return lambda f: Kernel(f, **options)
    return Kernel(fn, **options)
