"""Triton for scans, reductions by a combine function, and counter-based random numbers.

Combine functions become `@triton.jit` helpers written before the kernel: the built-in
ones (products, cummax/cummin on value-index pairs) as text, a user's function by
writing its traced IR. Over a block with masked-off lanes, a combine function is
wrapped to carry a `valid` flag, so those lanes never enter a result whatever the user's
function is (reverse scans and reductions need that; no identity element is assumed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tilecraft.codegen.common import NO_NAN, expand
from tilecraft.codegen.rules import TL_REDUCE, identity, tl_dtype
from tilecraft.exc import LoweringError
from tilecraft.ir.combine import Combine
from tilecraft.ir.nodes import Op

if TYPE_CHECKING:
    from tilecraft.codegen.kernel import KernelWriter

MUL = "def {name}(a, b):\n    return a * b\n"

# (value, index) pairs: the later element wins ties, NaN beats numbers, a later NaN wins
CUM_BEST = """def {name}(v0, i0, v1, i1):
    take = {take}
    return tl.where(take, v1, v0), tl.where(take, i1, i0)
"""


def helper(w: KernelWriter, key: str, text: str, short: str | None = None) -> str:
    """The name of a `@triton.jit` helper (`text` with `{name}`), added once per kernel."""
    if key not in w.helpers:
        name = f"_{w.kernel.name.lstrip('_')}_{short or key}_{len(w.helpers)}"
        w.helpers[key] = (name, "@triton.jit\n" + text.format(name=name))
    return w.helpers[key][0]


# log(exp(a) + exp(b)) as PyTorch's logcumsumexp takes it: NaN from either, a pair of the
# same infinity is that infinity, else max + log1p(exp(min - max)) (log1p by its series
# where 1 + e would round e away: the core of tl has no log1p)
LOG_ADD_EXP = """def {name}(a, b):
    hi = tl.maximum(a, b)
    lo = tl.minimum(a, b)
    e = tl.exp(lo - hi)
    out = hi + tl.where(e < 1e-4, e - 0.5 * e * e, tl.log(1.0 + e))
    out = tl.where((lo == hi) & (hi - hi != 0), hi, out)
    return tl.where((a != a) | (b != b), a + b, out)
"""

NAN_BEST = "def {name}(a, b):\n    return tl.{fn}(a, b, propagate_nan=tl.PropagateNan.ALL)\n"


def nan_best(w: KernelWriter, kind: str) -> str:
    """The combine function of a max or min that keeps NaN (one `max.NaN` per step)."""
    fn = "maximum" if kind == "max" else "minimum"
    return helper(w, f"{kind}_nan", NAN_BEST.replace("{fn}", fn))


def cum_best(w: KernelWriter, kind: str, dtype: torch.dtype) -> str:
    better = ">=" if kind == "max" else "<="
    take = f"v1 {better} v0"
    if dtype.is_floating_point:
        take = f"(v1 != v1) | ((v0 == v0) & (v1 {better} v0))"
    return helper(w, f"cum{kind}_{str(dtype)[6:]}", CUM_BEST.replace("{take}", take))


def user_combine(w: KernelWriter, combine: Combine) -> str:
    """A user's combine function written from its traced IR."""
    key = f"combine{id(combine)}"
    if key in w.helpers:
        return w.helpers[key][0]
    saved = w.lines, w.depth, w.located
    w.lines, w.depth = [], 1
    try:
        for op in combine.body:
            w.op(op)
        w.line("return " + ", ".join(r.name for r in combine.results))
        body = "\n".join(w.lines)
    finally:
        w.lines, w.depth, w.located = saved
    params = ", ".join(p.name for p in combine.params)
    return helper(w, key, f"def {{name}}({params}):\n{body}\n", "combine")


def with_valid(w: KernelWriter, fn: str, n: int) -> str:
    """`fn` over n-tuples, extended with a validity flag: invalid elements are skipped."""
    a = [f"a{i}" for i in range(n)]
    b = [f"b{i}" for i in range(n)]
    r = [f"r{i}" for i in range(n)]
    lines = [f"def {{name}}({', '.join([*a, 'av', *b, 'bv'])}):"]
    lines.append(f"    {', '.join(r)} = {fn}({', '.join([*a, *b])})")
    picks = [
        f"tl.where(av & bv, {ri}, tl.where(av, {ai}, {bi}))"
        for ri, ai, bi in zip(r, a, b, strict=True)
    ]
    lines.append(f"    return {', '.join(picks)}, av | bv")
    return helper(w, f"valid_{fn}", "\n".join(lines) + "\n", "skip_masked")


def scan(w: KernelWriter, op: Op) -> None:
    """`out = scan(x..., kind, axis)`: cumsum, cumprod, cummax/cummin (values or
    indices), logcumsumexp, or a user's combine function (one output of its tuple)."""
    assert op.out is not None
    kind, axis, block = op.attrs["kind"], op.attrs["axis"], op.attrs["block"]
    compute, reverse, dims = op.attrs["compute"], op.attrs.get("reverse", False), op.out.type.dims
    computes = op.attrs.get("computes") or (compute,)
    values = [w.operand(x, dims, c) for x, c in zip(op.args, computes, strict=True)]
    carry = w.scan_carries.get(id(op))
    # masked-off lanes come after the valid ones: only a reverse scan or a running total
    # across chunks would take them in
    masked = block is not None and w.has_mask(block) and (reverse or carry is not None)
    mask = expand(f"mask_{block}", len(dims), axis) if masked else ""
    rev = ", reverse=True" if reverse else ""
    if kind in ("sum", "prod"):
        value = f"tl.where({mask}, {values[0]}, {identity(kind, compute)})" if masked else values[0]
        expr = f"tl.cum{kind}({value}, {axis}{rev})"
        if carry is not None:
            expr = carry_chunk(w, op, kind, value, expr, axis)
        elif kind == "sum" and compute.is_floating_point:
            # PyTorch's running sums start from +0.0: a leading -0.0 sums to +0.0
            expr = f"({expr} + 0.0)"
        w.assign(op, w.cast_out(expr, compute, op.out.type.dtype))
        return
    if kind in ("max", "min"):
        size = w.size(block) if block is not None else "1"
        # positions along the dim; in a chunk of a looped dim, counted from the row's start
        index = f"indices_{block}" if carry is not None else f"tl.arange(0, {size})"
        pos = expand(index, len(dims), axis)
        w.line(f"{op.out.name}_pos = tl.zeros({w.shape(dims)}, tl.int64) + {pos}")
        values, fn = [values[0], f"{op.out.name}_pos"], cum_best(w, kind, compute)
    elif kind == "logsumexp":
        fn = helper(w, "log_add_exp", LOG_ADD_EXP)
    else:
        fn = user_combine(w, op.attrs["combine"])
    if carry is not None:
        result = _from_zero(kind, continue_chunk(w, op, values, fn))
        w.assign(op, w.cast_out(result, compute, op.out.type.dtype))
        return
    if masked:
        values, fn = (
            [*values, f"tl.broadcast_to({mask}, {w.shape(dims)})"],
            with_valid(w, fn, len(values)),
        )
    scanned = f"tl.associative_scan(({', '.join(values)},), {axis}, {fn}{rev})"
    w.line(f"{op.out.name}_all = {scanned}")
    result = _from_zero(kind, f"{op.out.name}_all[{op.attrs.get('component', 0)}]")
    w.assign(op, w.cast_out(result, compute, op.out.type.dtype))


def _from_zero(kind: str, result: str) -> str:
    """PyTorch's logcumsumexp starts from -inf, so a leading -0.0 comes out +0.0."""
    return f"({result} + 0.0)" if kind == "logsumexp" else result


def carry_chunk(w: KernelWriter, op: Op, kind: str, value: str, expr: str, axis: int) -> str:
    """A cumsum/cumprod of one chunk of a looped dim, continued from the chunks before."""
    assert op.out is not None
    carry = w.scan_carries[id(op)]
    combine = "+" if kind == "sum" else "*"
    reduced = f"tl.sum({value}, {axis}, keep_dims=True)"
    if kind == "prod":
        reduced = f"tl.reduce({value}, {axis}, {helper(w, 'mul', MUL)}, keep_dims=True)"
    w.line(f"{op.out.name}_chunk = {expr} {combine} {carry}")
    w.line(f"{carry} = {carry} {combine} {reduced}")
    return f"{op.out.name}_chunk"


def continue_chunk(w: KernelWriter, op: Op, values: list[str], fn: str) -> str:
    """A scan of one chunk of a looped dim by `fn`, continued from the chunks before: each
    element is combined with the carry (the fold of all earlier chunks), then the carry
    takes in this chunk's fold (its masked-off lanes skipped). Until the first chunk is
    done the carry holds nothing (`_cv` is False): no identity element is needed."""
    assert op.out is not None
    name, axis, block, dims = op.out.name, op.attrs["axis"], op.attrs["block"], op.out.type.dims
    carry, n, k = w.scan_carries[id(op)], len(values), op.attrs.get("component", 0)
    carries = [f"{carry}{j}" for j in range(n)]
    valid = f"tl.broadcast_to({expand(f'mask_{block}', len(dims), axis)}, {w.shape(dims)})"
    if not w.has_mask(block):  # chunks that tile the row exactly: every lane is valid
        valid = f"tl.full({w.shape(dims)}, 1, tl.int1)"
    w.line(f"{name}_s = tl.associative_scan(({', '.join(values)},), {axis}, {fn})")
    folded = f"tl.reduce(({', '.join(values)}, {valid}), {axis}, {with_valid(w, fn, n)}"
    w.line(f"{name}_t = {folded}, keep_dims=True)")
    scanned = [f"{name}_s[{j}]" for j in range(n)]
    totals = [f"{name}_t[{j}]" for j in range(n)]
    w.line(f"{name}_j = {fn}({', '.join(carries + scanned)})")
    w.line(f"{name}_c = {fn}({', '.join(carries + totals)})")
    joined = [f"{name}_j" if n == 1 else f"{name}_j[{j}]" for j in range(n)]
    merged = [f"{name}_c" if n == 1 else f"{name}_c[{j}]" for j in range(n)]
    w.line(f"{name}_out = tl.where({carry}_cv, {joined[k]}, {scanned[k]})")
    for j in range(n):
        w.line(f"{carries[j]} = tl.where({carry}_cv, {merged[j]}, {totals[j]})")
    w.line(f"{carry}_cv = {carry}_cv | {name}_t[{n}]")
    return f"{name}_out"


def init_carry(w: KernelWriter, op: Op) -> None:
    """Before a loop over chunks: a scan's running total (or carry) starts empty."""
    assert op.out is not None
    kind, axis, compute = op.attrs["kind"], op.attrs["axis"], op.attrs["compute"]
    if op.attrs.get("reverse"):
        raise LoweringError(
            "a reverse scan over a looped dim: use reduction_loops=[None] for this kernel",
            op.loc,
        )
    dims = list(op.out.type.dims)
    dims[axis] = None
    shape, carry = w.shape(tuple(dims)), f"{op.out.name}_carry"
    w.scan_carries[id(op)] = carry
    if kind in ("sum", "prod"):
        w.line(f"{carry} = tl.full({shape}, {identity(kind, compute)}, {tl_dtype(compute)})")
        return
    computes = (compute, torch.int64) if kind in ("max", "min") else op.attrs["computes"]
    for j, dtype in enumerate(computes):
        w.line(f"{carry}{j} = tl.full({shape}, 0, {tl_dtype(dtype)})")
    w.line(f"{carry}_cv = tl.full({shape}, 0, tl.int1)")


def reduce_by(w: KernelWriter, op: Op, value: str, axis: int, keep: str) -> str:
    """A product, or a user's combine function, folded along `axis` (masked lanes
    already hold 1 for products; a user's reduction skips them by a validity flag)."""
    kind = op.attrs["kind"]
    if kind == "prod":
        return f"tl.reduce({value}, {axis}, {helper(w, 'mul', MUL)}{keep})"
    assert op.out is not None
    x = op.args[0]
    block, dims = op.attrs["block"], x.type.dims
    computes = op.attrs["computes"]
    values = [w.operand(a, dims, c) for a, c in zip(op.args, computes, strict=True)]
    fn = user_combine(w, op.attrs["combine"])
    if block is not None and w.has_mask(block):
        mask = expand(f"mask_{block}", len(dims), axis)
        values, fn = (
            [*values, f"tl.broadcast_to({mask}, {w.shape(dims)})"],
            with_valid(w, fn, len(values)),
        )
    w.line(f"{op.out.name}_all = tl.reduce(({', '.join(values)},), {axis}, {fn}{keep})")
    return f"{op.out.name}_all[{op.attrs.get('component', 0)}]"


def rand(w: KernelWriter, op: Op) -> None:
    """Philox random numbers from a seed and each element's global offset."""
    assert op.out is not None
    seed, offsets = (w.operand(a, op.out.type.dims, None) for a in op.args)
    if op.attrs["kind"] == "uniform":
        w.assign(op, f"tl.rand({seed}, {offsets})")
    else:  # the raw 32 bits, as a signed int (what hl.randint maps into its range)
        w.assign(op, f"tl.randint({seed}, {offsets}).to(tl.int32, bitcast=True)")


def nan_aware(
    w: KernelWriter,
    kind: str,
    name: str,
    axis: int,
    keep: str,
    position: str,
    compute: torch.dtype | None = None,
) -> str:
    """A float max/min/argmax/argmin of `{name}_in` along `axis` that propagates NaN as
    PyTorch does: max/min are NaN if any element is, arg* give the position of the
    first NaN. (tl.max and tl.argmax drop NaN on the GPU; the interpreter differs, and
    its argmax fails on a slice of NaN only, so the fold itself never sees NaN.) A
    float32 max/min is one fold whose steps keep NaN (`max.NaN` on the GPU, as Helion
    emits) rather than a NaN count and a fold of the rest: a reduction less per row."""
    value = f"{name}_in"
    if kind in ("max", "min") and compute == torch.float32:
        return f"tl.reduce({value}, {axis}, {nan_best(w, kind)}{keep})"
    isnan = f"({value} != {value})"
    finite = f"tl.where({isnan}, {identity(kind, torch.float32)}, {value})"
    fold = f"{TL_REDUCE[kind]}({finite}, {axis}{keep})"
    if kind in ("max", "min"):
        w.line(f"{name}_nan = tl.max({isnan}.to(tl.int32), {axis}{keep}) > 0")
        return f'tl.where({name}_nan, float("nan"), {fold})'
    w.line(f"{name}_nan = tl.min(tl.where({isnan}, {position}, {NO_NAN}), {axis}{keep})")
    return f"tl.where({name}_nan < {NO_NAN}, {name}_nan, {fold})"
