"""`BoundKernel`: a kernel specialized to its arguments' dtypes, shapes and device."""

from __future__ import annotations

import ast
import sys
import traceback
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tilecraft.codegen.fold import fold_host
from tilecraft.codegen.grid import plan_grid
from tilecraft.codegen.kernel import KernelWriter
from tilecraft.codegen.module import Launch, module_source
from tilecraft.exc import HostCodeError, InvalidConfig, LoweringError, TilecraftError
from tilecraft.frontend.blocks import BlockTable
from tilecraft.frontend.device import DeviceCompiler
from tilecraft.frontend.host import (
    Element,
    HostValueReads,
    capture_stmt,
    compile_function,
    device_loops,
    read_element,
    rewrite_host,
)
from tilecraft.frontend.source import KernelSource
from tilecraft.frontend.trips import (
    MAX_VARIANTS,
    Trip,
    check_same,
    condition,
    explain,
    first_env,
    variants,
    varying_ints,
)
from tilecraft.ir.nodes import DeviceKernel
from tilecraft.ir.verify import verify
from tilecraft.language.state import Sites
from tilecraft.language.tunables import Fragment, fragment_default
from tilecraft.runtime import fast_launch, guard
from tilecraft.runtime.budget import device_limits, fits, pow2_ceil
from tilecraft.runtime.cache import digest, remember_source, write_module
from tilecraft.runtime.config import Config
from tilecraft.runtime.cpu import container_items, tensors_in
from tilecraft.runtime.errors import cpu_tensor_error, user_location
from tilecraft.runtime.heuristics import default_config, safe_config
from tilecraft.runtime.settings import Settings
from tilecraft.runtime.spec import closure_tensors, kernel_spec


@dataclass
class Analysis:
    """The device kernels of one config, and the block table they were built with."""

    kernels: list[DeviceKernel]  # of the device loops host code reached
    table: BlockTable
    tunables: dict[str, Fragment]
    config: Config
    # each device loop's kernels in `kernels`, with the test of the host values each is for
    # ("": any); None where host code did not reach the loop
    reached: list[list[tuple[int, str]] | None]


def meta_like(value: Any) -> Any:
    """A meta tensor with the same metadata (no data, no device work)."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


class BoundKernel:
    """One specialization of a Kernel: analyses, generated code and compiled configs."""

    def __init__(
        self, src: KernelSource, args: tuple, settings: Settings, preferred: Any = None
    ) -> None:
        self.src, self.settings = src, settings
        self.spec_key = spec_key(args)
        self.loops = device_loops(src)
        self.meta_args = tuple(meta_like(a) for a in args)
        # each tensor's device, as the key fixes it (meta tensors have none to fold)
        self.devices = tuple(a.device if isinstance(a, torch.Tensor) else None for a in args)
        self.num_sms = _sm_count(args)
        self.cpu_mode: str | None = None  # on CPU tensors: "triton" (interpreter) or "eager"
        tensors = tensors_in(args) + closure_tensors(args)
        self.aligned = all(t.data_ptr() % 16 == 0 for t in tensors)
        self._compiled: dict[Config, Callable[..., Any]] = {}
        self._eager_blocks: dict[Config, tuple[Sites, list[int]]] = {}
        self.launcher: Callable[..., Any] | None = None  # the selected config's launcher
        self.predicted: Config | None = None  # the cost model's pick for an untuned call
        self.tuning: dict[str, Any] = {}  # what the last tuning run did
        self.values: dict[Element, Any] = {}  # argument elements the host code reads
        self._args: tuple | None = args  # real arguments, during the first analysis only
        first = self.analyze(Config())
        self._args = None
        self.spec = kernel_spec(first.kernels, first.table, first.tunables)
        self.spec.limits = device_limits(args)
        self.default_config = default_config(self.spec)
        if preferred is not None:
            chosen = preferred(args) if callable(preferred) else preferred
            self.default_config = self._preferred(chosen)

    # -- analysis ----------------------------------------------------------------------
    def analyze(self, config: Config) -> Analysis:
        """Run the host code on meta tensors, then compile each device loop to IR."""
        table = BlockTable(config.to_dict())
        tunables: dict[str, Fragment] = {}
        captured: dict[int, list[Trip]] = {}

        def tunable(name: str, fragment: Fragment) -> Any:
            tunables[name] = fragment
            return config.tunables.get(name, fragment_default(fragment))

        extra = {
            "_tc_capture": lambda i, env: captured.setdefault(i, []).append(dict(env)),
            "_tc_block_size": table.register,
            "_tc_tunable": tunable,
        }
        fn = compile_function(rewrite_host(self.src, capture_stmt), self.src, extra)
        self._run_host(fn)
        kernels: list[DeviceKernel] = []
        reached: list[list[tuple[int, str]] | None] = []
        for i, loop in enumerate(self.loops):
            trips = captured.get(i)
            compiled = self._compile_loop(i, loop, trips, table) if trips else []
            first = len(kernels)
            reached.append([(first + j, test) for j, (_, test) in enumerate(compiled)] or None)
            kernels += [verify(kernel) for kernel, _ in compiled]
        return Analysis(kernels, table, tunables, config, reached)

    def _compile_loop(
        self, i: int, loop: ast.For, trips: list[Trip], table: BlockTable
    ) -> list[tuple[DeviceKernel, str]]:
        """The kernels of device loop `i`, from the host locals of each time host code
        reached it (`frontend/trips.py`): one taking the ints that change as launch
        arguments, else one for each version of the host values that change, with the test
        that picks it."""
        # one leading underscore: inductor calls a kernel it launches from a class body,
        # where Python would mangle a name that starts with two
        name = f"_{self.src.tree.name.lstrip('_')}_kernel{'' if i == 0 else i}"
        ints, saved = varying_ints(trips), table.snapshot() if len(trips) > 1 else None
        try:
            return [(self._compile_trips(loop, trips, table, name, ints), "")]
        except TilecraftError as e:
            groups = variants(trips, {n.id for n in ast.walk(loop) if isinstance(n, ast.Name)})
            tests = [condition(key) for key, _ in groups]
            if saved is None or not 2 <= len(groups) <= MAX_VARIANTS or None in tests:
                raise explain(e, ints, len(groups)) from None
        table.restore(saved)
        return [
            (self._compile_trips(loop, group, table, f"{name}_v{j}", frozenset()), str(test))
            for j, ((_, group), test) in enumerate(zip(groups, tests, strict=True))
        ]

    def _compile_trips(
        self, loop: ast.For, trips: list[Trip], table: BlockTable, name: str, ints: frozenset
    ) -> DeviceKernel:
        compiler = DeviceCompiler(self.src, first_env(trips), table, name, ints)
        kernel = compiler.compile(loop)
        check_same(trips, set(compiler.host_values), self.src.loc(loop))
        return kernel

    def _value(self, element: Element) -> Any:
        if element not in self.values:
            if self._args is None:
                raise HostCodeError(
                    "host code reads other tensor elements for this config than for the "
                    "first; read the same elements whatever the config",
                    self.src.loc(self.src.tree),
                )
            self.values[element] = read_element(self._args, element)
        return self.values[element]

    def _run_host(self, fn: Callable[..., Any]) -> None:
        try:
            with HostValueReads(self.src, self.meta_args, self._value):
                fn(*self.meta_args)
        except TilecraftError:
            raise
        except Exception as e:
            raise HostCodeError(
                f"host code failed for these arguments: {type(e).__name__}: {e}",
                self._user_frame(e),
            ) from None

    def _user_frame(self, e: Exception) -> Any:
        frames = [
            f for f in traceback.extract_tb(e.__traceback__) if f.filename == self.src.filename
        ]
        if not frames:
            return None
        return self.src.loc(ast.Pass(lineno=frames[-1].lineno or 0))

    def eager_blocks(self, config: Config | None) -> tuple[Sites, list[int]]:
        """For eager mode: the block sizes of each tile loop's line and of each
        `register_block_size` call, as `config` compiles them."""
        config = self.resolve(config)
        if config not in self._eager_blocks:
            table = self.analyze(config).table
            self._eager_blocks[config] = (table.sites, [int(r) for r in table.registered])
        return self._eager_blocks[config]

    # -- code generation ---------------------------------------------------------------
    def resolve(self, config: Config | None) -> Config:
        """`config` with every missing entry taken from the default config."""
        config = config or Config()
        self._check_fits(config)
        return config.merged(self.default_config)

    def _preferred(self, config: Config | None) -> Config:
        """The kernel's own default config completed by the heuristic one where it fits the
        device's budgets, else the heuristic one; InvalidConfig where it names knobs or
        blocks the kernel does not have (the author's mistake, not the device's)."""
        if config is None:
            return self.default_config
        self._check_fits(config)
        merged = config.merged(self.default_config).to_dict()
        # a tile wider than its dimension only adds masked lanes (a dimension of 0 here may
        # be a loop the default tunables switch off, which the chosen ones may not)
        sizes, heuristic = merged["block_sizes"], _sizes_of(self.default_config)
        for i, block in enumerate(self.spec.blocks):
            if i not in self.spec.dot_blocks and sizes[i] > heuristic[i] and block.extent > 0:
                sizes[i] = min(sizes[i], max(heuristic[i], pow2_ceil(block.extent)))
        return Config(**merged) if fits(self.spec, merged) else self.default_config

    def _check_fits(self, config: Config) -> None:
        config.check_tunables(set(self.spec.tunables), self.src.tree.name)
        sizes = {"block_sizes": len(self.spec.blocks), "reduction_loops": len(self.spec.reductions)}
        for key, allowed in sizes.items():
            given = len(config.get(key) or [])
            if given > allowed:
                raise InvalidConfig(
                    f"Config.{key} has {given} entries but `{self.src.tree.name}` has {allowed}",
                    self.src.loc(self.src.tree),
                )

    def to_triton_code(self, config: Config | None = None) -> str:
        """The generated module (Triton kernels and host launcher) for `config`."""
        config = self.resolve(config)
        analysis = self.analyze(config)
        launches = [self._launch(k, config) for k in analysis.kernels]
        sources = [launch.writer.write() for launch in launches]
        host = rewrite_host(self.src, lambda i, loop: self._statement(analysis, launches, i))
        host = _FixHostValues(analysis, config).visit(host)
        kernels = {k.name for k in analysis.kernels}
        host, constants = fold_host(host, self.src, self.meta_args, self.devices, kernels)
        where = f"{self.src.filename}:{self.src.tree.lineno}"
        host = ast.fix_missing_locations(host)
        return module_source(self.src.tree.name, where, sources, host, constants)

    def _statement(self, analysis: Analysis, launches: list[Launch], i: int) -> ast.stmt:
        """Device loop `i` in the launcher: its launch, or an error where host code reaches
        a loop it did not reach when the kernel was specialized."""
        loc, versions = self.src.loc(self.loops[i]), bool(analysis.reached[i])
        chain = ast.parse(f"_tc_unreached({loc.filename!r}, {loc.lineno}, {versions})").body[0]
        for kernel, test in reversed(analysis.reached[i] or []):
            if not test:
                return launches[kernel].statement()
            launch = launches[kernel].statement()
            chain = ast.If(ast.parse(test, mode="eval").body, [launch], [chain])
        return chain

    def _launch(self, kernel: DeviceKernel, config: Config) -> Launch:
        blocks = [kernel.blocks[b] for b in kernel.grid_blocks]
        plan = plan_grid(blocks, config.to_dict(), kernel.grid_index, self.num_sms)
        writer = KernelWriter(
            kernel, plan, config.to_dict(), self.settings.allow_tf32, self.aligned
        )
        writer.check = self.settings.check
        maxnreg = config.get("maxnreg")
        warps, stages = config.num_warps or 4, config.num_stages or 1
        return Launch(kernel, writer, warps, stages, maxnreg, self.settings.fp_fusion)

    def compile(self, config: Config | None = None) -> Callable[..., Any]:
        """The launcher for `config`, compiled once and cached."""
        config = self.resolve(config)
        cached = self._compiled.get(config)
        if cached is None:
            code = self.to_triton_code(config)
            if self.settings.print_code:
                print(code, file=sys.stderr)
            cached = self._compiled[config] = self._load(code, self._write(code))
        return cached

    def code_path(self, config: Config | None = None) -> Path:
        """The generated module of `config`, written to the cache dir."""
        return self.code_file(config)[0]

    def code_file(self, config: Config | None = None) -> tuple[Path, str]:
        """The generated module of `config` written to the cache dir, and its code (which
        is what runs: the file is for people and tracebacks, never read back)."""
        code = self.to_triton_code(config)
        return self._write(code), code

    def first_call(self, config: Config | None, args: tuple) -> Any:
        """Compile `config`, run it once (Triton compiles here), and keep it for later calls.
        On a GPU a Triton compile past `compile_timeout_s` gives way to a small config."""
        config, launcher = self.compile_in_time(config, args)
        result = self.run_config(config, args, launcher)
        self.launcher = launcher
        return result

    def run_config(
        self, config: Config | None, args: tuple, launcher: Callable[..., Any] | None = None
    ) -> Any:
        """`config`'s launcher run once on `args`, as it is (no fallback to another config),
        Triton's failures raised as a first call raises them: tilecraft errors at the
        user's line (a config needing more shared memory than the GPU has, too)."""
        try:
            return (launcher or self.compile(config))(*args)
        except Exception as e:
            error = self._launch_error(e, config)
            if error is e:
                raise
            raise error from (None if isinstance(error, HostCodeError) else e)

    def _launch_error(self, e: Exception, config: Config | None) -> Exception:
        """What a failed first launch raises: Triton's failures and a CPU tensor given to a
        GPU launch as tilecraft errors at the user's line, anything else as it is."""
        if not (type(e).__module__.startswith("triton") or isinstance(e, ValueError)):
            return e
        code, path = self.to_triton_code(config), str(self.code_path(config))
        cpu = cpu_tensor_error(e, code, path, self.analyze(self.resolve(config)).kernels)
        if cpu is not None or isinstance(e, ValueError):
            return cpu or e
        where = user_location(e, code, path) or self.src.loc(self.src.tree)
        return LoweringError(
            f"Triton failed on the generated code for `{self.src.tree.name}`"
            f" ({type(e).__name__}: {str(e)[-600:]})",
            where,
        )

    def compile_in_time(
        self, config: Config | None, args: tuple
    ) -> tuple[Config | None, Callable[..., Any]]:
        """`config` and its launcher, its Triton compile done within the deadline (see
        guard.py); else, with a warning, the safe config's."""
        launcher = self.compile(config)
        if not guard.needed(args):
            return config, launcher
        timeout = self.settings.compile_timeout_s
        try:
            if guard.finishes_within(lambda: guard.precompile(launcher, args), timeout):
                return config, launcher
            why = f"took over {timeout:g} s (TILECRAFT_COMPILE_TIMEOUT)"
        except Exception as e:  # noqa: BLE001 - the launch raises it again, naming the user's line
            if type(e).__name__ != "OutOfResources":  # the budgets' estimate fell short
                return config, launcher
            fewer = self._fewer_stages(config, args)
            if fewer is not None:
                return fewer
            why = f"needs more than this GPU has ({str(e)[:100]})"
        safe = safe_config(self.spec, self.resolve(config))
        warnings.warn(
            f"tilecraft: compiling `{self.src.tree.name}` with {self.resolve(config)!r} {why};"
            f" running {safe!r} instead",
            guard.SlowCompileWarning,
            stacklevel=4,
        )
        return safe, self.compile(safe)

    def _fewer_stages(
        self, config: Config | None, args: tuple
    ) -> tuple[Config, Callable[..., Any]] | None:
        """`config` with fewer pipeline stages, the most that fits this GPU's shared memory
        (with a warning), or None where even one stage does not."""
        resolved = self.resolve(config)
        values = resolved.to_dict()
        loops = len(values.get("range_num_stages") or [])
        for stages in range(int(resolved.num_stages or 1) - 1, 0, -1):
            smaller = Config(**{**values, "num_stages": stages, "range_num_stages": [None] * loops})
            launcher = self.compile(smaller)
            try:
                guard.precompile(launcher, args)
            except Exception as e:  # noqa: BLE001 - another failure: the safe config runs
                if type(e).__name__ == "OutOfResources":
                    continue
                return None
            warnings.warn(
                f"tilecraft: `{self.src.tree.name}` with {resolved!r} needs more shared memory"
                f" than this GPU has; running it with num_stages={stages}",
                guard.SlowCompileWarning,
                stacklevel=5,
            )
            return smaller, launcher
        return None

    def _write(self, code: str) -> Path:
        """The module's file under the cache dir, checked to hold exactly `code`."""
        name = f"{self.src.tree.name}_{digest(code)[:16]}.py"
        return write_module(self.settings.cache_dir, name, code)

    def _load(self, code: str, path: Path) -> Callable[..., Any]:
        # Triton reads kernel source through `inspect`: pin it to the code generated here,
        # so a file changed on disk after the check is never what runs.
        remember_source(path, code)
        namespace = dict(self.src.namespace)
        exec(compile(code, str(path), "exec"), namespace)
        launcher = namespace[self.src.tree.name]
        if self.settings.fast_launch:
            fast_launch.install(namespace, launcher)
        return launcher


class _FixHostValues(ast.NodeTransformer):
    """Replaces `register_block_size`/`register_tunable` calls by the config's values."""

    def __init__(self, analysis: Analysis, config: Config) -> None:
        self.blocks = iter(int(b) for b in analysis.table.registered)
        self.config = config

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name == "_tc_block_size":
            return ast.copy_location(ast.Constant(next(self.blocks)), node)
        if name == "_tc_tunable" and isinstance(node.args[0], ast.Constant):
            key = str(node.args[0].value)
            return ast.copy_location(ast.Constant(self.config.tunables.get(key)), node)
        return node


def _sm_count(args: tuple) -> int:
    """Multiprocessors of the arguments' GPU (persistent kernels launch one program each)."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.device.type == "cuda":
            return torch.cuda.get_device_properties(a.device).multi_processor_count
    return 4  # CPU (Triton's interpreter): a few programs exercise the persistent loop


def spec_key(args: tuple) -> str:
    """The specialization as text: dtypes and shapes of tensors (and the strides of those
    not contiguous: a transposed input is another tuning problem), values of ints, and
    those of the lists, tuples, dicts and dataclasses given."""
    parts = []
    for a in args:
        items = container_items(a)
        if items is not None:
            inner = spec_key(tuple(v for _, v in items))
            parts.append(f"{type(a).__name__}({inner})")
        elif isinstance(a, torch.Tensor):
            parts.append(f"{str(a.dtype).removeprefix('torch.')}{list(a.shape)}{_layout(a)}")
        elif isinstance(a, (int, bool, str)) or a is None:
            parts.append(repr(a))
        elif callable(a) and hasattr(a, "__code__"):  # an inlined function: which one
            parts.append(f"{a.__code__.co_name}@{a.__code__.co_firstlineno}")
        elif isinstance(a, types.BuiltinFunctionType):  # an op (`torch.amax`): which one
            parts.append(f"{a.__module__ or ''}.{a.__qualname__}")
        else:
            parts.append(type(a).__name__)
    return ",".join(parts)


def _layout(t: torch.Tensor) -> str:
    """Nothing for a contiguous tensor, else its strides."""
    return "" if t.is_contiguous() else f"/strides{list(t.stride())}"


def _sizes_of(config: Config) -> list[int]:
    """A complete config's block sizes (no None left)."""
    return [int(b or 1) for b in config.block_sizes or []]
