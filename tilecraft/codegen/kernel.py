"""Tile IR -> the source of one `@triton.jit` kernel."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tilecraft.codegen import access, atomics, products, scans, views
from tilecraft.codegen.common import expand, is_rolled, needs_mask, reduce_compute
from tilecraft.codegen.flat import FlatPlan, plan_flat, unflatten
from tilecraft.codegen.grid import GridPlan, pid_lines, program_lines
from tilecraft.codegen.rolled import RolledBody
from tilecraft.codegen.rules import (
    TL_REDUCE,
    convert,
    identity,
    literal,
    tl_dtype,
    typed_literal,
    wrapped,
)
from tilecraft.exc import LoweringError, SourceLoc, TilecraftError
from tilecraft.ir.nodes import Branch, DeviceKernel, Loop, Node, Op, Value
from tilecraft.ir.ops import lookup
from tilecraft.ir.types import Block, Dim

RANGE_KNOBS = (
    ("range_num_stages", "num_stages"),
    ("range_unroll_factors", "loop_unroll_factor"),
    ("range_flattens", "flatten"),
    ("range_multi_buffers", "disallow_acc_multi_buffer"),
    ("range_warp_specializes", "warp_specialize"),
)


@dataclass
class KernelWriter:
    """Writes a DeviceKernel as Triton source; `launch_args` lists what the host passes."""

    kernel: DeviceKernel
    plan: GridPlan
    choices: dict[str, Any] = field(default_factory=dict)
    allow_tf32: bool = False
    aligned_inputs: bool = True  # every tensor argument starts 16-byte aligned
    descriptors: dict[str, str] = field(default_factory=dict)  # tensor descriptors, by name
    lines: list[str] = field(default_factory=list)
    depth: int = 1
    strides: dict[str, str] = field(default_factory=dict)
    constexprs: dict[str, int] = field(default_factory=dict)
    live: set[int] = field(default_factory=set)  # blocks whose indices/masks are in scope
    helpers: dict[str, tuple[str, str]] = field(default_factory=dict)  # jit helpers: name, text
    scan_carries: dict[int, str] = field(default_factory=dict)  # running totals across chunks
    located: tuple[str, int] | None = None  # the user's line the last comment named
    check: bool = False  # the bounds-check mode: report computed indices out of range
    checks: list[str] = field(default_factory=list)  # what each reported check number means
    flat: FlatPlan = field(default_factory=FlatPlan)  # values written as 2-D tiles
    copies: int = 0  # full-rank copies of flat values made so far
    opaque_zero: bool = False  # the kernel takes `_tc_zero` (see `loop_begin`)
    _producers: dict[str, Op] | None = None

    def producers(self) -> dict[str, Op]:
        """The op that makes each value of the kernel, by name."""
        if self._producers is None:
            self._producers = {op.out.name: op for op in self.kernel.walk() if op.out}
        return self._producers

    # -- helpers ------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def size(self, block_id: int) -> str:
        block = self.kernel.blocks[block_id]
        name = f"_RBLOCK_{block_id}" if block.kind == "reduction" else f"_BLOCK_SIZE_{block_id}"
        self.constexprs[name] = block.fixed_size or 1
        return name

    def shape(self, dims: tuple[Dim, ...]) -> str:
        return "[" + ", ".join("1" if d is None else self.size(d) for d in dims) + "]"

    def operand(self, x: Any, dims: tuple[Dim, ...], dtype: torch.dtype | None) -> str:
        if not isinstance(x, Value):
            if not isinstance(x, (bool, int, float)):  # never paste a repr into the source
                raise TypeError(f"a {type(x).__name__} cannot be used in device code")
            if dtype is not None and dtype.is_floating_point:
                # an int constant too (where(c, 3, 5) cast to float32 gave Triton's int32
                # where, stored as its bits)
                return typed_literal(float(x), dtype)
            return literal(wrapped(x, dtype))
        rank = len(self.text_dims(x))
        text = expand(x.name, len(dims), len(dims) - rank, rank)
        if dtype is not None and x.type.dtype != dtype:
            text = convert(text, x.type.dtype, dtype)
        return text

    def cast_out(self, expr: str, compute: torch.dtype, out: torch.dtype) -> str:
        return expr if compute == out else convert(f"({expr})", compute, out)

    def doubles(self) -> set[str]:
        """Host floats: passed as the bits of a double (Triton reads a Python float
        argument as a float32), to keep their full precision as PyTorch does, in two int32
        halves (inductor cannot launch a kernel on an int beyond int32 in torch 2.11)."""
        return {p.name for p in self.kernel.params if not p.is_tensor and p.dtype == torch.float64}

    # -- flat values (codegen/flat.py) -----------------------------------------------------
    def text_dims(self, value: Value) -> tuple[Dim, ...]:
        """The dims of a value's Triton tile: a flat value's without its leading one."""
        return value.type.dims[1:] if value in self.flat else value.type.dims

    def as_flat(self, value: Value) -> str:
        """A 3-D value whose leading dim holds one element, as a 2-D tile."""
        if value in self.flat:
            return value.name
        return f"tl.reshape({value.name}, {self.shape(value.type.dims[1:])})"

    def as_full(self, value: Value) -> str:
        """A value as a tile of its full rank."""
        if value not in self.flat:
            return value.name
        return f"{value.name}[{', '.join(['None'] + [':'] * (value.type.rank - 1))}]"

    # -- the kernel ------------------------------------------------------------------------
    def write(self) -> str:
        self.flat = plan_flat(self)
        for name in sorted(self.doubles()):
            hi, lo = (f"tl.full((), {name}_{half}, tl.int64)" for half in ("hi", "lo"))
            self.line(f"{name} = (({hi} << 32) | ({lo} & 0xFFFFFFFF)).to(tl.float64, bitcast=True)")
        for p in self.kernel.params:  # host ints (Triton may pass a small one as an int32)
            if not p.is_tensor and p.dtype == torch.int64:
                self.line(f"{p.name} = tl.full((), {p.name}, tl.int64)")
        self.grid_prologue()
        for block in self.kernel.blocks.values():
            if block.kind == "reduction" and not is_rolled(block):
                self.define_indices(block, "0")
        self.body(self.kernel.body)
        head = ["    " + line for line in self.descriptors.values()]
        helpers = "".join(text + "\n\n" for _, text in self.helpers.values())
        return helpers + self.signature() + "\n".join(head + self.lines) + "\n"

    def signature(self) -> str:
        params = ["_tc_check"] * self.check + [p.name for p in self.kernel.params if p.is_tensor]
        params += list(self.strides)
        doubles = self.doubles()
        for p in self.kernel.params:
            if not p.is_tensor:
                params += [f"{p.name}_hi", f"{p.name}_lo"] if p.name in doubles else [p.name]
        params += ["_tc_zero"] * self.opaque_zero
        params += [f"{c}: tl.constexpr" for c in self.constexprs]
        return f"@triton.jit\ndef {self.kernel.name}({', '.join(params)}):\n"

    def grid_prologue(self) -> None:
        """Program ids -> grid offsets (inside a loop over tiles for persistent kernels)."""
        plan = self.plan
        lines, persistent = program_lines(plan)
        for line in lines:
            self.line(line)
        if persistent:
            self.depth += 1
            for line in pid_lines(plan, "virtual_pid"):
                self.line(line)
        for block in plan.blocks:
            size = "1" if block.kind == "grid" else self.size(block.id)
            start = f"{block.begin} + " if block.begin else ""
            self.line(f"offset_{block.id} = {start}pid_{block.id} * {size}")
            if block.kind != "grid":
                self.define_indices(block, f"offset_{block.id}")

    def define_indices(self, block: Block, start: str) -> None:
        self.live.add(block.id)
        offset = "" if start == "0" else f"{start} + "
        self.line(f"indices_{block.id} = {offset}tl.arange(0, {self.size(block.id)})")
        if needs_mask(block):  # chunks of a looped row too: none where they tile it exactly
            self.line(f"mask_{block.id} = indices_{block.id} < {block.end_code()}")

    def is_rolled_id(self, block_id: int) -> bool:
        return is_rolled(self.kernel.blocks[block_id])

    def has_mask(self, block_id: int) -> bool:
        block = self.kernel.blocks[block_id]
        return block_id in self.live and needs_mask(block)

    # -- bodies ------------------------------------------------------------------------
    def body(self, nodes: list[Node]) -> None:
        RolledBody(self, nodes).write()

    def locate(self, loc: SourceLoc) -> None:
        """A `# file:line` comment before the code of a new user line (errors in generated
        code are mapped back to the user's line through these)."""
        if (loc.filename, loc.lineno) != self.located:
            self.located = (loc.filename, loc.lineno)
            self.line(f"# {loc.filename}:{loc.lineno}")

    def loop(self, loop: Loop) -> None:
        self.locate(loop.loc)
        for c in loop.carried:
            if c.init.name != c.param.name:
                self.line(f"{c.param.name} = {self.carried_text(c.param, c.init)}")
        outer, live = self.depth, set(self.live)
        if loop.cond is not None:
            self.line(f"while {loop.cond.name}:")
            self.depth += 1
        for i, block_id in enumerate(loop.blocks):
            block = self.kernel.blocks[block_id]
            bs = "1" if block.kind == "grid" else self.size(block_id)
            extra = self.range_options(loop.index) if i == len(loop.blocks) - 1 else ""
            head = f"tl.range({self.loop_begin(block)}, {block.end_code()}, {bs}{extra})"
            self.line(f"for offset_{block_id} in {head}:")
            self.depth += 1
            if block.kind != "grid":
                self.define_indices(block, f"offset_{block_id}")
        self.body(loop.body)
        for c in loop.carried:
            assert c.final is not None
            if c.final.name != c.param.name:
                text = self.live_lanes(loop, c.param, self.carried_text(c.param, c.final))
                self.line(f"{c.param.name} = {text}")
        self.depth, self.live = outer, live

    def live_lanes(self, loop: Loop, param: Value, text: str) -> str:
        """A carried value over the loop's own tile keeps its lanes past the loop's end (a
        `register_block_size` accumulator: `acc += exp(x[tm, tn])` had added exp(0) there,
        lanes PyTorch does not have)."""
        dims = self.text_dims(param)
        for block in loop.blocks:
            if block in dims and self.has_mask(block):
                mask = expand(f"mask_{block}", len(dims), dims.index(block))
                text = f"tl.where({mask}, {text}, {param.name})"
        return text

    def loop_begin(self, block: Block) -> str:
        """A device loop's start, plus a zero the host passes where the loop may run once.
        Triton (3.6, H200) folds a loop of one iteration into straight-line code whose
        indices are constants, and then miscompiled some products at 4 warps (a 3x3
        convolution of one small image: every output wrong); with the start known only at
        run time, the loop and its indices stay as they are in loops of more iterations."""
        once = block.extent <= (1 if block.kind == "grid" else block.fixed_size or 1)
        if not (block.dynamic or once):
            return block.begin_code()
        self.opaque_zero, begin = True, block.begin_code()
        return "_tc_zero" if begin == "0" else f"{begin} + _tc_zero"

    def carried_text(self, param: Value, value: Value) -> str:
        return self.as_flat(value) if param in self.flat else self.as_full(value)

    def branch(self, node: Branch) -> None:
        """A scalar `if`: each arm ends by assigning the variables merged after it."""
        self.line(f"if {node.cond.name}:")
        self.arm(node.then, [(m.out, m.then) for m in node.merged])
        self.line("else:")
        self.arm(node.orelse, [(m.out, m.orelse) for m in node.merged])

    def arm(self, body: list[Node], results: list[tuple[Value, Value]]) -> None:
        live, start = set(self.live), len(self.lines)
        self.depth += 1
        self.body(body)
        for out, value in results:
            self.line(f"{out.name} = {self.as_full(value)}")
        if len(self.lines) == start:
            self.line("pass")
        self.depth -= 1
        self.live = live

    def range_options(self, index: int) -> str:
        """`tl.range` keywords from the config's range_* knobs for device loop `index`."""
        options = []
        for knob, keyword in RANGE_KNOBS:
            values = self.choices.get(knob) or []
            value = values[index] if index < len(values) else None
            if value is not None:
                if knob == "range_multi_buffers":
                    value = not value
                options.append(f", {keyword}={value!r}")
        return "".join(options)

    def op(self, op: Op) -> None:
        self.locate(op.loc)
        op = unflatten(self, op)
        views.check_numel(self, op)
        try:
            rule = getattr(self, f"op_{op.name}", None)
            if rule is not None:
                rule(op)
            else:
                self.elementwise(op)
        except TilecraftError:  # already a clear error at the line (an InvalidConfig, say)
            raise
        except Exception as e:
            raise LoweringError(f"cannot generate Triton for {op.name}: {e}", op.loc) from e

    def assign(self, op: Op, expr: str) -> None:
        assert op.out is not None
        self.line(f"{op.out.name} = {expr}")

    def elementwise(self, op: Op) -> None:
        assert op.out is not None
        compute = op.attrs["compute"]
        dims = self.text_dims(op.out)
        args = [self.operand(a, dims, compute) for a in op.args]
        expr = self.emit(op.name, compute, *args)
        result = torch.bool if op.out.type.dtype == torch.bool else compute
        narrow = compute != torch.bool and compute.itemsize < 4
        if result == compute and narrow and not all(isinstance(a, Value) for a in op.args):
            # Triton 3.6 made `tl.maximum(int16, 8)` an int32 (its constants are weak in
            # arithmetic, not there): a loop-carried int16 then failed to compile
            expr = f"({expr}).to({tl_dtype(compute)})"
        self.assign(op, self.cast_out(expr, result, op.out.type.dtype))

    def emit(self, name: str, compute: torch.dtype, *args: str) -> str:
        opdef = lookup(name)
        source = opdef.helper(compute) if opdef.helper else None
        if source is not None:
            return f"{self.helper(f'_{name}_{tl_dtype(compute)[3:]}', source)}({', '.join(args)})"
        if opdef.emit is None:
            raise LoweringError(f"no Triton emission for op `{name}`")
        return opdef.emit(compute, *args)

    def helper(self, name: str, source: str) -> str:
        """`name`, a `@triton.jit` function written once before the kernel."""
        if name not in self.helpers:
            self.helpers[name] = (name, "@triton.jit\n" + source.format(name=name).rstrip())
        return self.helpers[name][0]

    def op_cast(self, op: Op) -> None:
        assert op.out is not None
        (x,) = op.args
        target = op.out.type.dtype
        if target == torch.bool:  # bfloat16 widened first: the interpreter compares its bits
            text = x.name
            if x.type.dtype == torch.bfloat16:
                text = convert(text, torch.bfloat16, torch.float32)
            self.assign(op, f"{text} != 0")
        else:
            self.assign(op, convert(x.name, x.type.dtype, target))

    def op_check_index(self, op: Op) -> None:
        access.check_index(self, op)

    def op_bitcast(self, op: Op) -> None:
        assert op.out is not None
        (x,) = op.args
        self.assign(op, f"{x.name}.to({tl_dtype(op.out.type.dtype)}, bitcast=True)")

    def op_where(self, op: Op) -> None:
        assert op.out is not None
        cond, a, b = op.args
        dims, compute = self.text_dims(op.out), op.attrs["compute"]
        expr = self.emit(
            "where",
            compute,
            self.operand(cond, dims, None),
            self.operand(a, dims, compute),
            self.operand(b, dims, compute),
        )
        if not any(isinstance(v, Value) for v in (a, b)):  # `tl.where(c, 1, 2)` is int32
            expr = f"({expr}).to({tl_dtype(compute)})"
        self.assign(op, self.cast_out(expr, compute, op.out.type.dtype))

    def op_index_view(self, op: Op) -> None:
        index = op.attrs["index"][1:] if op.out in self.flat else op.attrs["index"]
        self.assign(op, f"{op.args[0].name}[{', '.join(index)}]")

    def op_reshape(self, op: Op) -> None:
        views.reshape(self, op)

    def op_permute(self, op: Op) -> None:
        views.permute(self, op)

    def op_expand(self, op: Op) -> None:
        views.broadcast(self, op)

    def op_select(self, op: Op) -> None:
        views.select(self, op)

    def op_stack(self, op: Op) -> None:
        views.stack(self, op)

    def op_cat(self, op: Op) -> None:
        views.check_spreads(self, op)
        views.cat(self, op)

    def op_piece(self, op: Op) -> None:
        views.check_spreads(self, op)
        views.piece(self, op)

    def op_flip(self, op: Op) -> None:
        views.check_spreads(self, op)
        views.rearranged(self, op)

    op_roll = op_flip

    def op_regroup(self, op: Op) -> None:
        views.check_spreads(self, op)
        views.regroup(self, op)

    def op_literal(self, op: Op) -> None:
        views.literal_values(self, op)

    def op_full(self, op: Op) -> None:
        assert op.out is not None
        dtype, value = op.out.type.dtype, op.attrs["value"]
        shape = self.shape(self.text_dims(op.out))
        if isinstance(value, float) and dtype.is_floating_point:
            self.assign(op, typed_literal(value, dtype, shape))
        else:
            self.assign(op, f"tl.full({shape}, {literal(value)}, {tl_dtype(dtype)})")

    def op_arange(self, op: Op) -> None:
        assert op.out is not None
        block = op.out.type.dims[0]
        begin = op.attrs["begin"]
        expr = f"indices_{block}" if not begin else f"{begin} + indices_{block}"
        self.assign(op, f"({expr}).to({tl_dtype(op.out.type.dtype)})")

    def op_tile_index(self, op: Op) -> None:
        self.assign(op, f"indices_{op.args[0]}")

    def op_tile_begin(self, op: Op) -> None:
        self.assign(op, f"offset_{op.args[0]}")

    def op_tile_end(self, op: Op) -> None:
        block = self.kernel.blocks[op.args[0]]
        end = block.end_code()
        self.assign(op, f"tl.minimum(offset_{block.id} + {self.size(block.id)}, {end})")

    def op_tile_id(self, op: Op) -> None:
        block = self.kernel.blocks[op.args[0]]
        begin = block.begin_code()
        self.assign(op, f"(offset_{block.id} - {begin}) // {self.size(block.id)}")

    def op_dot(self, op: Op) -> None:
        products.op_dot(self, op)

    def op_reduce(self, op: Op) -> None:
        assert op.out is not None
        x = op.args[0]  # (a user's reduction of a tuple has one per item: `reduce_by`)
        kind, axis, block = op.attrs["kind"], op.attrs["axis"], op.attrs["block"]
        compute, dims = reduce_compute(op), self.text_dims(x)
        axis -= x.type.rank - len(dims)  # a flat value has lost its leading dim
        value = self.operand(x, dims, compute)
        if block is not None and self.has_mask(block) and kind != "custom":
            mask = expand(f"mask_{block}", len(dims), axis)
            value = f"tl.where({mask}, {value}, {identity(kind, compute)})"
        keep = ", keep_dims=True" if len(op.out.type.dims) == x.type.rank else ""
        if kind in ("prod", "custom"):
            expr = scans.reduce_by(self, op, value, axis, keep)
            self.assign(op, self.cast_out(expr, compute, op.out.type.dtype))
            return
        expr = f"{TL_REDUCE[kind]}({value}, {axis}{keep})"
        if kind == "sum" and compute.is_floating_point:
            # PyTorch's sums start from +0.0: a row of -0.0 sums to +0.0 (on a GPU, Triton's
            # tree of adds kept -0.0, and one element was not added to anything)
            expr = f"({expr} + 0.0)"
        elif compute.is_floating_point:
            self.line(f"{op.out.name}_in = {value}")
            size = "1" if block is None else self.size(block)
            position = expand(f"tl.arange(0, {size})", len(dims), axis)
            expr = scans.nan_aware(self, kind, op.out.name, axis, keep, position, compute)
        result = torch.int32 if kind.startswith("arg") else compute
        self.assign(op, self.cast_out(expr, result, op.out.type.dtype))

    def op_scan(self, op: Op) -> None:
        scans.scan(self, op)

    def op_rand(self, op: Op) -> None:
        scans.rand(self, op)

    def op_load(self, op: Op) -> None:
        access.load(self, op)

    def op_store(self, op: Op) -> None:
        access.store(self, op)

    def op_atomic_add(self, op: Op) -> None:
        atomics.atomic(self, op)

    op_atomic_max = op_atomic_min = op_atomic_and = op_atomic_or = op_atomic_add
    op_atomic_xor = op_atomic_xchg = op_atomic_add

    def op_atomic_cas(self, op: Op) -> None:
        atomics.atomic_cas(self, op)
