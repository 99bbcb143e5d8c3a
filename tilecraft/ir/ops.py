"""The op table: every kind of IR operation, each with all of its rules in one entry.

An `OpDef` holds what the rest of the compiler needs to know about one op: the PyTorch
names a user writes for it, its kind, its result-type rule, its eager implementation (the
PyTorch function whose semantics it follows), its Triton emission and its category for
the cost model's features. The frontend makes a handler for every elementwise entry,
the code generator emits elementwise entries from `emit`, the verifier checks every op
against its entry, and the feature extractor counts ops by `category`. Adding an
elementwise op is one `define` call here.

`emit` gets the compute dtype first, then the Triton text of each operand (already cast
to the compute dtype). An op too long for one readable expression gives instead (or, for
some dtypes, as well) a `helper`: the source of a `@triton.jit` function `{name}(a, b)`
for a compute dtype, written once into the generated module and called by name. Ops
whose emission needs more than that (loads, reductions, matrix products, ...) are
written by the code generator's `op_<name>` methods and have neither.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tilecraft.ir.helpers import (
    FLOAT_FLOORDIV,
    INT_FLOORDIV,
    POW,
    REMAINDER,
    _expm1,
    _fmod,
    _log1p,
    _round_helper,
    _trunc,
    _with_fmod,
    is_float,
)
from tilecraft.ir.special import IN_FLOAT64, LIBDEVICE, zeta
from tilecraft.runtime.cpu import interpreter_set as interpreted


class Kind(enum.Enum):
    """What an op does to shapes: the verifier's and the code generator's first question."""

    ELEMENTWISE = "elementwise"  # broadcasts its operands
    REDUCE = "reduce"  # removes (or keeps as 1) one dim
    SCAN = "scan"  # keeps its operand's shape
    VIEW = "view"  # rearranges dims, no arithmetic
    CREATE = "create"  # a new tile from constants
    MEMORY = "memory"  # loads, stores, atomics
    DOT = "dot"  # matrix products
    TILE = "tile"  # tile attributes: indices, begin, end, id
    RANDOM = "random"  # counter-based random numbers
    CHECK = "check"  # reports a condition's False lanes in the bounds-check mode


class Result(enum.Enum):
    """The result dtype of an elementwise op, from its operands' promoted dtype."""

    SAME = "same"  # the promoted dtype
    FLOAT = "float"  # the promoted dtype, integers promoted to float32 (exp, sin, ...)
    BOOL = "bool"  # comparisons and tests (isnan, ...)
    INT = "int"  # integer operands only (shifts, bitwise ops)


Emit = Callable[..., str]


@dataclass(frozen=True)
class OpDef:
    """One op kind and its rules; see the module docstring."""

    name: str
    kind: Kind
    arity: int = 1
    result: Result = Result.SAME
    emit: Emit | None = None
    eager: Callable[..., Any] | None = None
    torch_names: tuple[str, ...] = ()
    category: str = "elementwise"
    helper: Callable[[torch.dtype], str | None] | None = None
    internal: bool = False  # made by the frontend for a torch op's rules, no name of its own


OPDEFS: dict[str, OpDef] = {}


def define(name: str, kind: Kind, **rules: Any) -> OpDef:
    """Add an op to the table (once per name)."""
    assert name not in OPDEFS, f"op {name!r} defined twice"
    OPDEFS[name] = OpDef(name, kind, **rules)
    return OPDEFS[name]


def is_elementwise(opdef: OpDef) -> bool:
    """An elementwise op emitted from the table (not written by the code generator)."""
    return opdef.kind is Kind.ELEMENTWISE and (opdef.emit or opdef.helper) is not None


def lookup(name: str) -> OpDef:
    """The entry of an IR op name; KeyError for names the table does not know."""
    return OPDEFS[name]


# -- emission helpers ---------------------------------------------------------------------
def _isnan(a: str) -> str:
    return f"({a} != {a})"


def _number(a: str) -> bool:
    """Whether operand text is a finite number's literal (which no NaN test needs)."""
    if a in ('float("inf")', '-float("inf")'):
        return True
    try:
        return not math.isnan(float(a))
    except ValueError:
        return False


def _extremum(fn: str, above: str) -> Emit:
    """torch.maximum or minimum (and clamp's bounds): NaN wins (tl.maximum returns the other
    operand). Of two zeros PyTorch's CUDA kernels give +0.0 as the maximum, as the GPU's
    max does; its CPU kernels, which the interpreter's `where` follows here, the second
    operand (maximum, in their vector loop) or the first (clamp to a number: relu(-0.0) is
    -0.0)."""

    def emit(d: torch.dtype, a: str, b: str) -> str:
        if not is_float(d):
            return f"{fn}({a}, {b})"
        if interpreted():  # (nested: `|` of a 0-d bool and a tile fails in the interpreter)
            return f"tl.where({_isnan(a)}, {a}, tl.where({a} {above} {b}, {a}, {b}))"
        nan = " | ".join(_isnan(x) for x in (a, b) if not _number(x))
        return f"tl.where({nan}, {a} + {b}, {fn}({a}, {b}))" if nan else f"{fn}({a}, {b})"

    return emit


_maximum, _minimum = _extremum("tl.maximum", ">"), _extremum("tl.minimum", "<")
_clamp_min, _clamp_max = _extremum("tl.maximum", ">="), _extremum("tl.minimum", "<=")


def _sign(d: torch.dtype, a: str) -> str:
    # torch.sign(nan) is 0, which these comparisons give
    return f"({a} > 0).to({a}.dtype) - ({a} < 0).to({a}.dtype)"


def _infix(symbol: str) -> Emit:
    return lambda d, a, b: f"{a} {symbol} {b}"


def _call(fn: str) -> Emit:
    return lambda d, a: f"{fn}({a})"


# -- the table: elementwise ops -------------------------------------------------------------
E = Kind.ELEMENTWISE
BOOL_SELECTS = {
    # (ints compared with 0, not `tl.where(a, True, b)` or `tl.where(a, b, False)`: of a
    # bool block a and a bool of no dims b the interpreter's numpy where made float32
    # values, and a store masked by them failed, "mask has unsupported dtype")
    "&": "(tl.where({a}, tl.where({b}, 1, 0), 0) != 0)",
    "|": "(tl.where({a}, 1, tl.where({b}, 1, 0)) != 0)",
    "^": "{a} != {b}",
}


def _bitwise(symbol: str) -> Emit:
    """`a & b` (| ^); of bools under Triton's interpreter, a select: its numpy `&` of a bool
    of no dims and a bool block fails (`tl.where` of one and the other does not)."""

    def emit(d: torch.dtype, a: str, b: str) -> str:
        if d == torch.bool and interpreted():
            return BOOL_SELECTS[symbol].format(a=a, b=b)
        return f"{a} {symbol} {b}"

    return emit


def _shift(symbol: str) -> Emit:
    """`a << b`, `a >> b` as PyTorch defines them for every `b`: a shift by the bit width
    or more, or by a negative amount, gives 0 (`>>` of a signed int: the sign's fill, a
    shift by width - 1). Triton's shift there is C's, undefined: on a GPU it came out as
    anything (LLVM's poison), where Triton's interpreter (numpy) gave PyTorch's answer."""

    def emit(d: torch.dtype, a: str, b: str) -> str:
        bits = torch.iinfo(d).bits
        fill = symbol == ">>" and d.is_signed  # out of range: a >> (bits - 1)
        most = bits - 1 if fill else bits
        try:
            amount = int(b)  # a constant shift, decided here
        except ValueError:
            keep = f"({b} >= 0) & ({b} < {most})"
            if fill:
                return f"{a} >> tl.where({keep}, {b}, {most})"
            return f"tl.where({keep}, {a} {symbol} {b}, 0)"
        if 0 <= amount < most:
            return f"{a} {symbol} {b}"
        return f"{a} >> {most}" if fill else f"{a} * 0"

    return emit


define("lshift", E, arity=2, emit=_shift("<<"), eager=torch.bitwise_left_shift, result=Result.INT)
define("rshift", E, arity=2, emit=_shift(">>"), eager=torch.bitwise_right_shift, result=Result.INT)
INFIX: list[tuple[str, str, Any, Result]] = [
    ("sub", "-", torch.sub, Result.SAME),
    ("lt", "<", torch.lt, Result.BOOL),
    ("le", "<=", torch.le, Result.BOOL),
    ("gt", ">", torch.gt, Result.BOOL),
    ("ge", ">=", torch.ge, Result.BOOL),
    ("eq", "==", torch.eq, Result.BOOL),
    ("ne", "!=", torch.ne, Result.BOOL),
]
for _name, _symbol, _eager, _result in INFIX:
    define(_name, E, arity=2, emit=_infix(_symbol), eager=_eager, result=_result)
define("and", E, arity=2, emit=_bitwise("&"), eager=torch.bitwise_and, result=Result.INT)
define("or", E, arity=2, emit=_bitwise("|"), eager=torch.bitwise_or, result=Result.INT)
define("xor", E, arity=2, emit=_bitwise("^"), eager=torch.bitwise_xor, result=Result.INT)


def _logical(symbol: str, of_bools: str) -> Emit:
    """An infix op that is logical on bools, as PyTorch's (True + True is True; Triton's
    `+` of two int1 gave 2, which a later cast to float kept)."""
    return lambda d, a, b: _bitwise(of_bools)(d, a, b) if d == torch.bool else f"{a} {symbol} {b}"


define("add", E, arity=2, emit=_logical("+", "|"), eager=torch.add)
define("mul", E, arity=2, emit=_logical("*", "&"), eager=torch.mul)


def _truediv(d: torch.dtype, a: str, b: str) -> str:
    # Triton's float32 `/` is the GPU's approximate division (2 ulp); PyTorch rounds it
    # (float64's is rounded already)
    if d == torch.float32:
        return f"tl.div_rn({a}, {b})"
    return f"{a} / {b}"


define("truediv", E, arity=2, emit=_truediv, eager=torch.true_divide)


def _scalar_div(d: torch.dtype, a: str, b: str) -> str:
    """A tile divided by a host scalar. PyTorch's CUDA kernels multiply by the scalar's
    reciprocal rounded in the compute dtype (at times an ulp from the quotient); its CPU
    kernels divide, as the interpreter does here."""
    if interpreted():
        return _truediv(d, a, b)
    one = "tl.full([], 1.0, tl.float32)" if d == torch.float32 else "1.0"
    return f"{a} * {_truediv(d, one, b)}"


define("scalar_div", E, arity=2, emit=_scalar_div, eager=torch.true_divide, internal=True)
# Triton's `/`: on a GPU within 2 ulp of the quotient, a few instructions where the rounded
# division takes about ten (softmax's, 13% of its time at 8192^2 in bf16). Only for ops
# that PyTorch itself does not fix to the bit (softmax: its exponentials and sums differ
# from PyTorch's in the last bits anyway).
define("div_approx", E, arity=2, emit=_infix("/"), eager=torch.true_divide, internal=True)
define("maximum", E, arity=2, emit=_maximum, eager=torch.maximum)
define("minimum", E, arity=2, emit=_minimum, eager=torch.minimum)
define("clamp_min", E, arity=2, emit=_clamp_min, eager=torch.clamp_min)
define("clamp_max", E, arity=2, emit=_clamp_max, eager=torch.clamp_max)
define(
    "floordiv",
    E,
    arity=2,
    eager=torch.floor_divide,
    helper=_with_fmod(FLOAT_FLOORDIV, INT_FLOORDIV),
)


def _truncdiv(d: torch.dtype, a: str, b: str) -> str:
    """`torch.div(a, b, rounding_mode="trunc")`. Integers: Triton's `//`, which truncates as
    C's division does (by zero: what `//` gives, 0 under Triton's interpreter, undefined
    on a GPU; PyTorch raises). Floats: the correctly rounded quotient (Triton's `/` may be
    off by an ulp on a GPU, which would move a quotient across an integer), truncated."""
    if not is_float(d):
        return f"{a} // {b}"
    return _trunc(_truediv(d, a, b))


# 16-bit floats are not divided by this op but by `truediv` then `trunc` (the frontend's
# `div`): PyTorch's CUDA kernel rounds their quotient to 16 bits before truncating it
define(
    "truncdiv",
    E,
    arity=2,
    emit=_truncdiv,
    eager=lambda a, b: torch.div(a, b, rounding_mode="trunc"),
)
define("mod", E, arity=2, eager=torch.remainder, helper=_with_fmod(REMAINDER))
define("fmod", E, arity=2, emit=_fmod, eager=torch.fmod, torch_names=("fmod",))
define(
    "pow",
    E,
    arity=2,
    eager=torch.pow,
    result=Result.FLOAT,
    category="transcendental",
    helper=lambda d: POW,
)
define("where", E, arity=3, emit=lambda d, c, a, b: f"tl.where({c}, {a}, {b})", eager=torch.where)


def _fma(d: torch.dtype, a: str, b: str, c: str) -> str:
    """`a * b + c` rounded once, where PyTorch's own kernel fuses it: addcmul and lerp
    (nvcc contracts them on a GPU, the CPU's vector code calls fmadd). Kernels compile
    without contraction (`fp_fusion`), so every other product and sum rounds as
    PyTorch's separate ops round them."""
    return f"tl.fma({a}, {b}, {c})" if is_float(d) else f"{a} * {b} + {c}"


define("fma", E, arity=3, emit=_fma, eager=lambda a, b, c: torch.addcmul(c, a, b), internal=True)


def _neg(d: torch.dtype, a: str) -> str:
    # Triton's `-x` is `0 - x`, +0.0 for +0.0 (and it reads a -0.0 constant as 0.0)
    return f"{a} * -1.0" if is_float(d) else f"-{a}"


define("neg", E, emit=_neg, eager=torch.neg)
define("not", E, emit=lambda d, a: f"{a} == 0", eager=torch.logical_not, result=Result.BOOL)
define("invert", E, emit=lambda d, a: f"~{a}", eager=torch.bitwise_not, result=Result.INT)
define("abs", E, emit=_call("tl.abs"), eager=torch.abs)
define("sign", E, emit=_sign, eager=torch.sign, torch_names=("sign",))
# tests of floats: (name, float test, integer test); integers are never NaN or infinite
TESTS = [
    ("isnan", "{a} != {a}", "{a} != {a}"),
    ("isinf", "tl.abs({a}) == float('inf')", "{a} != {a}"),
    ("isfinite", "tl.abs({a}) < float('inf')", "{a} == {a}"),
]
for _name, _float, _int in TESTS:
    define(
        _name,
        E,
        emit=lambda d, a, _f=_float, _i=_int: (_f if is_float(d) else _i).format(a=a),
        eager=getattr(torch, _name),
        result=Result.BOOL,
        torch_names=(_name,),
    )
for _name, _fn in (("floor", "tl.floor"), ("ceil", "tl.ceil")):
    define(
        _name,
        E,
        emit=lambda d, a, _f=_fn: f"{_f}({a})" if is_float(d) else a,
        eager=getattr(torch, _name),
        torch_names=(_name,),
    )
define(
    "trunc",
    E,
    emit=lambda d, a: _trunc(a) if is_float(d) else a,
    eager=torch.trunc,
    torch_names=("trunc", "fix"),
)
define(
    "round",
    E,
    emit=lambda d, a: a,
    eager=torch.round,
    torch_names=("round",),
    helper=_round_helper,
)


def _sqrt(d: torch.dtype, a: str) -> str:
    # Triton's float32 tl.sqrt is the GPU's approximate root; PyTorch's is correctly rounded
    return f"tl.sqrt_rn({a})" if d == torch.float32 else f"tl.sqrt({a})"


def _log10(d: torch.dtype, a: str) -> str:
    """libdevice's log10 on a GPU (CUDA's, as PyTorch's kernels). Under the interpreter,
    log2(x) * log10(2): in float32 that rounded twice and gave -30.000002 for 1e-30 and
    2.9999998 for 1000 (so floor(log10(x)) counted a digit too few), hence a float64
    product there, rounded once."""
    if not interpreted():
        return f"libdevice.log10({a})"
    product = f"tl.log2({a}.to(tl.float64)) * {math.log10(2)!r}"
    return product if d == torch.float64 else f"({product}).to(tl.float32)"


TRANSCENDENTAL: dict[str, tuple[Emit, Any]] = {
    "exp": (_call("tl.exp"), torch.exp),
    "exp2": (_call("tl.exp2"), torch.exp2),
    "log": (_call("tl.log"), torch.log),
    "log2": (_call("tl.log2"), torch.log2),
    "log10": (_log10, torch.log10),
    "log1p": (lambda d, a: _log1p(a), torch.log1p),
    "expm1": (lambda d, a: _expm1(a), torch.expm1),
    "sqrt": (_sqrt, torch.sqrt),
    "rsqrt": (_call("tl.rsqrt"), torch.rsqrt),
    "sigmoid": (_call("tl.sigmoid"), torch.sigmoid),
    "erf": (_call("tl.erf"), torch.erf),
    "sin": (_call("tl.sin"), torch.sin),
    "cos": (_call("tl.cos"), torch.cos),
    "tan": (lambda d, a: f"tl.sin({a}) / tl.cos({a})", torch.tan),
    "reciprocal": (lambda d, a: _truediv(d, "1.0", a), torch.reciprocal),
}
for _name, (_emit, _eager) in TRANSCENDENTAL.items():
    define(
        _name,
        E,
        emit=_emit,
        eager=_eager,
        result=Result.FLOAT,
        torch_names=(_name,),
        category="transcendental",
    )

# ops from libdevice on a GPU and from a Triton helper where the GPU has none or the
# interpreter runs (special.py)


def _libdevice(fn: str | None, helper: str) -> dict[str, Any]:
    """The emit and helper rules of a `LIBDEVICE` op."""
    if fn is None:
        return dict(helper=lambda d: helper)

    def emit(d: torch.dtype, a: str) -> str:
        if fn in IN_FLOAT64 and d != torch.float64:
            return f"libdevice.{fn}({a}.to(tl.float64)).to({a}.dtype)"
        return f"libdevice.{fn}({a})"

    return dict(emit=emit, helper=lambda d: helper if interpreted() else None)


for _name, (_device_fn, _helper, _eager, _names) in LIBDEVICE.items():
    define(
        _name,
        E,
        eager=_eager,
        result=Result.FLOAT,
        torch_names=_names,
        category="transcendental",
        **_libdevice(_device_fn, _helper),
    )

# the Hurwitz zeta function, torch.special.zeta(x, q) (special.py)
define(
    "zeta",
    E,
    arity=2,
    eager=torch.special.zeta,
    result=Result.FLOAT,
    torch_names=("zeta",),
    category="transcendental",
    helper=zeta,
)

# -- ops the code generator writes itself ----------------------------------------------------
define("cast", E, eager=lambda x, dtype: x.to(dtype))
# `x.view(dtype)`: the same bits read as another dtype of the same size (attrs none: the
# result's dtype says which)
define("bitcast", E, eager=lambda x, dtype: x.view(dtype))
define("reduce", Kind.REDUCE, category="reduce")
define("scan", Kind.SCAN, category="reduce")  # one op per output of a (tuple) scan
define("rand", Kind.RANDOM, arity=2, category="transcendental")
define("index_view", Kind.VIEW)  # `x[:, None]`: attrs index, one ":" or "None" per result dim
define("reshape", Kind.VIEW, eager=torch.reshape)  # the result's dims say the shape
define("permute", Kind.VIEW, eager=torch.permute)  # attrs perm
define("expand", Kind.VIEW, eager=torch.broadcast_to)  # size-1 dims repeated
define("select", Kind.VIEW, arity=2, category="reduce")  # attrs axis; args x, position
define("stack", Kind.VIEW, arity=-1, eager=torch.stack)  # attrs axis; one operand per item
define("cat", Kind.VIEW, arity=-1, eager=torch.cat)  # attrs axis, offsets
define("piece", Kind.VIEW, eager=torch.narrow)  # attrs axis, offset: a static part of a dim
define("flip", Kind.VIEW, eager=torch.flip)  # attrs axis: a static dim reversed
define("roll", Kind.VIEW, eager=torch.roll)  # attrs axis, shift: a static dim rotated
# attrs axis, count: static dims axis:axis + count reshaped to the result's dims there,
# elements moving between lanes (padded dims other than the outermost)
define("regroup", Kind.VIEW, eager=torch.reshape)
define("full", Kind.CREATE)
define("literal", Kind.CREATE, arity=0, eager=torch.tensor)  # attrs values
define("arange", Kind.CREATE)
define("load", Kind.MEMORY, category="load")
define("check_index", Kind.CHECK, arity=1)  # attrs what; args in-range flags (TILECRAFT_CHECK)
define("store", Kind.MEMORY, arity=2, category="store")
define("atomic_add", Kind.MEMORY, arity=2, category="atomic")
for _name in ("atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_xchg"):
    define(_name, Kind.MEMORY, arity=2, category="atomic")
define("atomic_cas", Kind.MEMORY, arity=3, category="atomic")  # args access, expected, value
define("dot", Kind.DOT, arity=3, category="dot")
for _name in ("tile_index", "tile_begin", "tile_end", "tile_id"):
    define(_name, Kind.TILE)


def writes(name: str) -> bool:
    """Whether an op of this name writes memory: a store or an atomic."""
    return name == "store" or name.startswith("atomic_")


def category(name: str) -> str:
    """The cost model's category of an op (elementwise for names the table lacks)."""
    opdef = OPDEFS.get(name)
    return opdef.category if opdef else "elementwise"
