"""How device code sees a host name: a local of the loop, a host variable (a tensor or a
float becomes a launch argument, a number or flag a constant the launcher guards, an
object remembered so that what device code reads from it is guarded too), a global of the
kernel's module, or a builtin."""

from __future__ import annotations

import ast
import builtins
import math
import re
import types
from dataclasses import is_dataclass
from typing import Any

import torch

from tilecraft.exc import UnsupportedOperation, UnsupportedSyntax
from tilecraft.frontend.blocks import BlockSizeInt
from tilecraft.frontend.builder import Builder
from tilecraft.frontend.inline import HostCallable
from tilecraft.frontend.loops import NumberBeforeLoop
from tilecraft.frontend.ops import lookup
from tilecraft.frontend.refs import HostTensor
from tilecraft.frontend.source import KernelSource
from tilecraft.ir.nodes import Param, Value
from tilecraft.ir.types import TileType
from tilecraft.runtime.cpu import container_items

GUARDED = (bool, int, float, str)  # constants whose value the launcher can check cheaply
UNGUARDED = (type(None), torch.dtype, torch.device, types.ModuleType, type)
KEYED = (torch.Tensor, bool, int, str, type(None), torch.dtype)  # specialized on by value


class HostNames:
    """The device compiler's handlers of names (a mixin of `DeviceCompiler`)."""

    b: Builder
    src: KernelSource
    env: dict[str, Any]
    host_locals: dict[str, Any]
    host_values: dict[str, Any]
    host_exprs: dict[str, str | None]
    lifted: dict[str, Any]
    guards: dict[str, Any]
    opaque: dict[int, str]
    keyed: set[str]
    guarding: bool
    runtime_ints: frozenset[str]
    params: list[Param]

    def operand(self, x: Any) -> Any:
        raise NotImplementedError

    def expr_Name(self, node: ast.Name) -> Any:
        if node.id in self.env:
            value = self.env[node.id]
            if isinstance(value, NumberBeforeLoop):
                raise value.refuse()
            return value
        if node.id in self.host_locals:
            if node.id not in self.host_values:
                self.host_values[node.id] = self._from_host(node.id, self.host_locals[node.id])
            return self.host_values[node.id]
        if node.id in self.src.namespace:
            return self.src.namespace[node.id]
        if hasattr(builtins, node.id):
            return getattr(builtins, node.id)
        raise UnsupportedSyntax(f"name `{node.id}` is not defined")

    def _from_host(self, name: str, value: Any) -> Any:
        where = self.host_exprs.get(name, name)
        if where is not None and where in self.lifted:
            return self.lifted[where]
        if isinstance(value, types.FunctionType) and lookup(value) is None:  # F.silu: an op
            return HostCallable(value, where)
        if isinstance(value, (torch.Tensor, float)) and where is None:
            raise UnsupportedOperation(
                f"`{name}` is a {type(value).__name__} that an inlined function reads from "
                "its module: pass it to the kernel as an argument"
            )
        if where is None:
            return value
        self.lifted[where] = lifted = self._lift(name, where, value)
        return lifted

    def _lift(self, name: str, where: str, value: Any) -> Any:
        """A host value as the device sees it; tensors and floats become arguments."""
        if isinstance(value, torch.Tensor):
            offset = int(value.storage_offset()) * value.element_size()
            param = Param(
                self._param_name(name),
                where,
                value.dtype,
                tuple(value.shape),
                tuple(value.stride()),
                offset,
            )
            self.params.append(param)
            return HostTensor(param, value)
        number = torch.float64 if isinstance(value, float) else None
        if type(value) is int and where in self.runtime_ints:
            number = torch.int64
        if number is not None:
            # a float is passed as a double (codegen/module.py), read as PyTorch reads a
            # Python float; an int that changes between launches as an int64
            param = Param(self._param_name(name), where, number)
            self.params.append(param)
            return Value(TileType(number, ()), param.name, weak=True)
        return self._constant(where, value, by_value=where in self.keyed)

    def _constant(self, where: str, value: Any, by_value: bool = False) -> Any:
        """A host value the device code reads as a constant. Numbers, strings and flags
        not pinned down by the specialization (`by_value`: an int argument is) get a guard
        in the launcher; objects and containers are remembered so that what device code
        reads from them (`opts.k`, `sizes[0]`) gets one."""
        if isinstance(value, GUARDED) and not isinstance(value, BlockSizeInt):
            finite = not isinstance(value, float) or math.isfinite(value)
            if self.guarding and not by_value and finite:
                self.guards[where] = value
        elif not isinstance(value, UNGUARDED) and not callable(value):
            self.opaque[id(value)] = where
        return value

    def _member(self, where: str, value: Any) -> Any:
        """What device code reads from a host container or object (`opts.eps`, `p[0]`): a
        float that the specialization does not pin down is an argument of each launch, as
        a float variable is (a constant would need a new compile for each value); anything
        else a constant (`_constant`)."""
        lifted = isinstance(value, torch.Tensor) or (isinstance(value, float) and self.guarding)
        if not lifted:
            return self._constant(where, value)
        if where not in self.lifted:
            self.lifted[where] = self._lift(where, where, value)
        return self.lifted[where]

    def _held(self, x: torch.Tensor) -> str | None:
        """Where host code holds tensor `x` in a list, tuple or dict (`parts[1]`: device code
        reached it through `for p in parts`, `zip`, `enumerate`), if it does."""
        for name, value in self.host_locals.items():
            where = self.host_exprs.get(name, name)
            for key, item in container_items(value) or []:
                if item is x and where is not None and not is_dataclass(value):
                    return f"{where}[{key!r}]"
        return None

    def _reached(self, x: torch.Tensor) -> Any:
        """`x` as a tensor argument of the launch where host code holds it in a container;
        else refused, naming it (a tensor device code cannot reach)."""
        held = self._held(x)
        return self.operand(x) if held is None else self._member(held, x)  # (operand raises)

    def _named(self, x: Any) -> str:
        """How an error names `x`: by the variable that holds it, where one does."""
        for scope in (self.env, self.host_values, self.src.namespace):
            for name, value in scope.items():
                if value is x:
                    return f"`{name}`"
        return "this value"

    def _device_list(self, x: Any) -> bool:
        """Whether `x` is a list or dict built in device code (changed while compiling, as
        Python changes it); one from host code is not the device code's to change."""
        return type(x) in (list, dict) and id(x) not in self.opaque

    def _param_name(self, name: str) -> str:
        return self.b.fresh(re.sub(r"\W", "_", name))
