"""Python operators and literals on the device: arithmetic, comparisons, boolean logic,
conditional expressions, tuples and slices (a mixin of the device compiler)."""

from __future__ import annotations

import ast
import builtins
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from tilecraft.exc import ShapeMismatch, UnsupportedOperation, UnsupportedSyntax
from tilecraft.frontend.builder import category
from tilecraft.frontend.ops import OPS
from tilecraft.frontend.refs import HostTensor, TileRef, on_device
from tilecraft.ir.nodes import Value

if TYPE_CHECKING:
    from tilecraft.frontend.builder import Builder
    from tilecraft.frontend.memory import MemoryLowering

BINOPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "/",
    ast.FloorDiv: "floordiv",
    ast.Mod: "remainder",
    ast.Pow: "pow",
    ast.BitAnd: "bitwise_and",
    ast.BitOr: "bitwise_or",
    ast.BitXor: "bitwise_xor",
    ast.LShift: "lshift",
    ast.RShift: "rshift",
    ast.MatMult: "matmul",
}
PYOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
UNARY_PYOPS: dict[type, Any] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
# a tile in these is its indices (`x[tile + 10]`, Helion's spelling of `tile.index + 10`)
INDEX_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}


class Operators:
    """The device compiler's handlers of operators and literals."""

    b: Builder
    mem: MemoryLowering
    python_bools: set[int]  # ids of comparisons of host floats (Python bools in eager mode)

    def expr(self, node: ast.expr) -> Any:
        raise NotImplementedError

    def operand(self, x: Any) -> Any:
        raise NotImplementedError

    def _named(self, x: Any) -> str:
        raise NotImplementedError

    def expr_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def expr_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.expr(e) for e in node.elts)

    def expr_List(self, node: ast.List) -> list:
        return [self.expr(e) for e in node.elts]

    def expr_Slice(self, node: ast.Slice) -> slice:
        parts = [None if p is None else self.expr(p) for p in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def expr_BinOp(self, node: ast.BinOp) -> Any:
        return self.binop(
            BINOPS[type(node.op)], self.expr(node.left), self.expr(node.right), type(node.op)
        )

    def binop(self, name: str, left: Any, right: Any, pyop: Any) -> Any:
        if pyop is ast.Add and _sequences(left, right):
            return left + right  # tiles gathered in a list, as an unrolled loop builds one
        if pyop is ast.Mult and _repeated(left, right):
            return left * right  # `[tc.zeros([t])] * g`: a list of g of them
        if pyop in INDEX_ARITHMETIC:
            left, right = (self._indices(x) for x in (left, right))
        whole = [x for x in (left, right) if isinstance(x, HostTensor) and x.meta.dim()]
        if on_device([left, right], {}):
            left, right = self.operand(left), self.operand(right)
        if not isinstance(left, Value) and not isinstance(right, Value):
            return host_arithmetic(pyop, left, right)
        if pyop is ast.Mod and _host_floats(left, right):
            return _python_float_mod(self.b, left, right)
        try:
            return OPS[name](self.b, left, right)
        except ShapeMismatch:
            if not whole:
                raise
            raise UnsupportedOperation(  # most likely a tile index forgotten: say so
                f"{self._named(whole[0])} is a tensor of shape {list(whole[0].meta.shape)}, "
                "read whole here, which does not broadcast with the other operand: index it "
                "with tiles to read its values (`t[tile]`)"
            ) from None

    def _indices(self, x: Any) -> Any:
        return self.mem.tile_attr(x.block, "index") if isinstance(x, TileRef) else x

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        x = self.expr(node.operand)
        x = self.operand(x) if isinstance(x, HostTensor) else x
        if not isinstance(x, Value):
            return UNARY_PYOPS[type(node.op)](x)
        if isinstance(node.op, ast.Invert) and id(x) in self.python_bools:
            # `~(s > 0)` of a float argument: `~` of a Python bool is an int, -2 or -1
            return OPS["sub"](self.b, OPS["neg"](self.b, self.b.cast(x, torch.int64)), 1)
        if isinstance(node.op, ast.USub):
            return OPS["neg"](self.b, x)
        if isinstance(node.op, ast.Not) or x.type.dtype == torch.bool:
            return OPS["not"](self.b, x)
        if isinstance(node.op, ast.Invert):
            return OPS["invert"](self.b, x)
        return x

    def expr_Compare(self, node: ast.Compare) -> Any:
        """`a < b`; a chain `a <= b < c` as Python's `a <= b and b < c` (`b` read once), of
        scalars only: on tiles Python's `and` asks one truth value of many (use `&`)."""
        values = [self.expr(v) for v in (node.left, *node.comparators)]
        pairs = zip(node.ops, values[:-1], values[1:], strict=True)
        results = [self._compare(op, a, b) for op, a, b in pairs]
        if len(results) == 1:
            return results[0]
        if any(isinstance(r, Value) and r.type.rank for r in results):
            raise UnsupportedSyntax("chained comparisons of tiles: combine them with &")
        for r in results:  # a false one known while compiling decides, as Python's `and`
            if not isinstance(r, Value) and not r:
                return r
        device = [r for r in results if isinstance(r, Value)]
        result = device[0] if device else results[-1]
        for r in device[1:]:
            result = OPS["bitwise_and"](self.b, result, r)
        return result

    def _compare(self, op: ast.cmpop, left: Any, right: Any) -> Any:
        if isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
            return py_compare(op, left, right)
        if on_device([left, right], {}):
            left, right = self.operand(left), self.operand(right)
        if not isinstance(left, Value) and not isinstance(right, Value):
            return PYOPS[type(op)](left, right)
        result = OPS[CMPOPS[type(op)]](self.b, left, right)
        if all(not isinstance(v, Value) or v.weak for v in (left, right)):
            self.python_bools.add(id(result))  # of host floats: a Python bool in eager mode
        return result

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        values = [self.expr(v) for v in node.values]
        if not any(isinstance(v, Value) for v in values):
            result = values[0]
            for v in values[1:]:
                result = (result and v) if isinstance(node.op, ast.And) else (result or v)
            return result
        name = "bitwise_and" if isinstance(node.op, ast.And) else "bitwise_or"
        result = values[0]
        for v in values[1:]:
            result = OPS[name](self.b, result, v)
        return result

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        test = self.expr(node.test)
        if isinstance(test, Value):
            body, orelse = self.operand(self.expr(node.body)), self.operand(self.expr(node.orelse))
            return OPS["where"](self.b, test, body, orelse)
        return self.expr(node.body if test else node.orelse)


def host_arithmetic(pyop: Any, left: Any, right: Any) -> Any:
    """Python's arithmetic of numbers known while compiling; what Python raises on (`x % 0`
    in an arm eager mode may never run) is refused by name, not an internal failure."""
    try:
        return PYOPS[pyop](left, right)
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as e:  # (complex // 3)
        raise UnsupportedOperation(
            f"`{ast.unparse(ast.BinOp(ast.Constant(left), pyop(), ast.Constant(right)))}` of "
            "numbers known while compiling "
            f"raises {type(e).__name__} ({e}) in Python"
        ) from None


def _host_floats(*operands: Any) -> bool:
    """Python numbers and host float arguments (read at launch) or `float(v)`/`int(v)` of
    device values, a float among them: what eager mode computes with Python's arithmetic
    (`-int(v) % -3` is an int there, as `% -3` of any int: it was taken for a float, its
    zero -0.0, which made float32 of the int64 tile it met: flow fuzzer, seed 581)."""
    host = all(isinstance(o, (int, float)) or (isinstance(o, Value) and o.weak) for o in operands)
    return host and any(
        isinstance(o, float) or (isinstance(o, Value) and o.type.dtype.is_floating_point)
        for o in operands
    )


def _python_float_mod(b: Builder, left: Any, right: Any) -> Value:
    """Python's `%` of floats: PyTorch's remainder, but a zero takes the divisor's sign
    (`1 % -0.5` is -0.0 in Python, 0.0 in PyTorch; `-0.0 % 3` is 0.0, -0.0 in PyTorch)."""
    r = OPS["remainder"](b, left, right)
    if isinstance(right, Value):
        zero = OPS["where"](b, OPS["lt"](b, right, 0), -0.0, 0.0)
    else:
        zero = math.copysign(0.0, right)
    out: Value = OPS["where"](b, OPS["eq"](b, r, 0), zero, r)
    out.weak = True  # a Python float still (its test is a bool tile's), rounded as numbers are
    return out


def py_compare(op: ast.cmpop, left: Any, right: Any) -> bool:
    if isinstance(op, ast.Is):
        return left is right
    if isinstance(op, ast.IsNot):
        return left is not right
    if isinstance(op, ast.In):
        return left in right
    return left not in right


def _sequences(left: Any, right: Any) -> bool:
    """Whether `left + right` joins two lists (or two tuples), of values or not."""
    return isinstance(left, (list, tuple)) and type(left) is type(right)


def _repeated(left: Any, right: Any) -> bool:
    """Whether `left * right` repeats a list or tuple an int number of times."""
    seq, n = (left, right) if isinstance(left, (list, tuple)) else (right, left)
    return isinstance(seq, (list, tuple)) and type(n) is int


# -- Python builtins and math functions of device values -----------------------------------
MATH_NAMES = {id(getattr(math, n)): n for n in dir(math) if callable(getattr(math, n))}
ROUNDED = (builtins.round, math.floor, math.ceil, math.trunc)  # a float in, an int out


def builtin_call(b: Builder, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """A Python builtin or `math` function called with device values (tiles, or float
    arguments, which are read at launch): `abs`, `pow`, `float`, `bool` and `int` of
    integers computed as Python computes them; NotImplemented for any other function.
    What Python computes on a number only while compiling (`int` or `round` of a float,
    which raise on NaN; `math.sqrt`, which raises below 0) is refused: a kernel cannot
    raise, and a NaN or a wrapped integer where Python raises would be a wrong answer."""
    values = [a for a in [*args, *kwargs.values()] if isinstance(a, Value)]
    if not values:
        return NotImplemented
    if fn is builtins.abs and len(args) == 1 and not kwargs:
        return OPS["abs"](b, args[0])
    if fn is builtins.pow and len(args) == 2 and not kwargs:
        return OPS["pow"](b, *args)
    if fn in (builtins.float, builtins.int, builtins.bool) and len(args) == 1 and not kwargs:
        return _converted(b, fn, args[0])
    name = _python_name(fn)
    if name is None:
        return NotImplemented
    raise UnsupportedOperation(
        f"`{name}()` of a value computed on the device (a tile, or a float argument, which "
        f"is read at launch): Python computes {name}() of a number while compiling; use "
        f"torch functions on tiles ({_instead(fn, name)}), or pass the number as an int"
    )


def _converted(b: Builder, fn: Any, x: Value) -> Value:
    """`float(x)`, `int(x)`, `bool(x)` of a one-element value, as the Python number it
    would be in eager mode (a float is a host float: float64, meeting tiles weakly)."""
    if any(d is not None for d in x.type.dims):
        raise UnsupportedOperation(
            f"`{fn.__name__}()` of a tile of many elements (PyTorch refuses too): use "
            f".to(torch.{ {'float': 'float32', 'int': 'int64', 'bool': 'bool'}[fn.__name__] })"
        )
    if fn is builtins.bool:
        return OPS["ne"](b, x, 0)
    if fn is builtins.int and x.type.dtype.is_floating_point:
        raise UnsupportedOperation(
            "`int()` of a float computed on the device (or a float argument): Python raises "
            "on NaN and infinity where a kernel cannot; use torch.trunc(x) or "
            "x.to(torch.int64), or pass the number as an int"
        )
    # a number, meeting tiles as eager mode's Python number does (`v > int(v) * 65537`
    # compares in v's dtype, the number wrapped, as PyTorch converts it)
    dtype = torch.int64 if fn is builtins.int else torch.float64
    out = b.op("cast", (x,), dtype, x.type.dims, compute=dtype)
    out.weak = True
    return out


def item(b: Builder, x: Value) -> Value:
    """`t.item()` of a one-element tile: the Python number eager mode gives (`float(t)`,
    `int(t)` or `bool(t)` by its dtype)."""
    if any(d is not None for d in x.type.dims):
        raise UnsupportedOperation(
            "`.item()` of a tile of many elements (PyTorch refuses too): index one element"
        )
    return _converted(b, (builtins.bool, builtins.int, builtins.float)[category(x)], x)


OPS["item"] = item


def _python_name(fn: Any) -> str | None:
    if id(fn) in MATH_NAMES and getattr(math, MATH_NAMES[id(fn)]) is fn:
        return f"math.{MATH_NAMES[id(fn)]}"
    if fn in (builtins.round, builtins.divmod, builtins.complex, builtins.hash):
        return fn.__name__
    return None


def _instead(fn: Any, name: str) -> str:
    if fn in ROUNDED:
        return f"torch.{'round' if fn is builtins.round else fn.__name__}(x)"
    short = name.removeprefix("math.")
    return f"torch.{short}(x)" if hasattr(torch, short) else "torch's functions"


def numbers_only_call(
    b: Builder, fn: Any, args: list[Any], kwargs: dict[str, Any], op: Callable[[], Any]
) -> Any:
    """A torch function of Python numbers only (`torch.div(7, 2, rounding_mode='floor')`):
    what PyTorch computes, a 0-d tensor, becomes a constant of no dims and its dtype. A
    function PyTorch refuses numbers is refused (by the tile op `op`'s own check of its
    arguments where it has one, or else here); NotImplemented for a call that makes a
    tile of dims (`torch.zeros(3)`) or takes anything but numbers."""
    numbers = (bool, int, float)
    if not args or not all(isinstance(a, numbers) for a in args):
        return NotImplemented
    if not all(isinstance(v, (*numbers, str, type(None))) for v in kwargs.values()):
        return NotImplemented
    try:
        result = fn(*args, **kwargs)
    except (TypeError, RuntimeError) as e:
        op()  # its refusal names the argument that should be a tile
        raise UnsupportedOperation(
            f"`{getattr(fn, '__name__', fn)}` of numbers only: PyTorch takes a tensor here "
            f"({str(e).splitlines()[0]}); use Python arithmetic or a tile operand"
        ) from None
    if not isinstance(result, torch.Tensor) or result.dim() != 0:
        return NotImplemented
    return b.op("full", (), result.dtype, (), hint="number", value=result.item())


def tensor_of_host_floats(b: Builder, result: Any) -> Any:
    """A torch function's result computed of host floats (weak Values) only: what PyTorch
    returns, a 0-d float32 tensor, whose arithmetic is a tensor's after it (`%` keeps
    PyTorch's zero sign where Python's float `%` takes the divisor's)."""
    if not (isinstance(result, Value) and result.weak):
        return result
    return b.op("cast", (result,), torch.float32, result.type.dims, compute=torch.float32)


def augmented(b: Builder, name: str, old: Any, new: Any) -> Any:
    """`x op= y` of a tile `x` updates it in place in PyTorch: the result keeps `x`'s
    dtype (an int16 accumulator wraps as int16 after `acc += acc64`), and a result of a
    higher kind (a float into an integer tile) is refused, as PyTorch refuses it."""
    if not (isinstance(old, Value) and isinstance(new, Value)) or old.weak:
        return new
    if old.type.dims != new.type.dims:
        raise ShapeMismatch(
            f"`{name} op= ...` gives a tile of shape {b.describe(new.type.dims)}, which "
            f"`{name}` of shape {b.describe(old.type.dims)} cannot hold in place (PyTorch "
            f"refuses too): write `{name} = {name} op ...` for a new tile"
        )
    if old.type.dtype == new.type.dtype:
        return new
    if category(new) > category(old):
        raise UnsupportedOperation(
            f"`{name} op= ...` gives a {new.type.dtype} result, which the {old.type.dtype} "
            f"tile `{name}` cannot hold in place (PyTorch refuses too): write "
            f"`{name} = {name} op ...` for a new tile, or cast the operand"
        )
    return b.cast(new, old.type.dtype)
