"""Python operators and literals on the device: arithmetic, comparisons, boolean logic,
conditional expressions, tuples and slices (a mixin of the device compiler)."""

from __future__ import annotations

import ast
import operator
from typing import TYPE_CHECKING, Any

import torch

from tilecraft.exc import UnsupportedSyntax
from tilecraft.frontend.ops import OPS
from tilecraft.frontend.refs import HostTensor, on_device
from tilecraft.ir.nodes import Value

if TYPE_CHECKING:
    from tilecraft.frontend.builder import Builder

BINOPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
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
CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}


class Operators:
    """The device compiler's handlers of operators and literals."""

    b: Builder

    def expr(self, node: ast.expr) -> Any:
        raise NotImplementedError

    def operand(self, x: Any) -> Any:
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
        if on_device([left, right], {}):
            left, right = self.operand(left), self.operand(right)
        if not isinstance(left, Value) and not isinstance(right, Value):
            return PYOPS[pyop](left, right)
        return OPS[name](self.b, left, right)

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        x = self.expr(node.operand)
        x = self.operand(x) if isinstance(x, HostTensor) else x
        if not isinstance(x, Value):
            return UNARY_PYOPS[type(node.op)](x)
        if isinstance(node.op, ast.USub):
            return OPS["neg"](self.b, x)
        if isinstance(node.op, ast.Not) or x.type.dtype == torch.bool:
            return OPS["not"](self.b, x)
        if isinstance(node.op, ast.Invert):
            return OPS["invert"](self.b, x)
        return x

    def expr_Compare(self, node: ast.Compare) -> Any:
        if len(node.ops) != 1:
            raise UnsupportedSyntax("chained comparisons: combine them with &")
        left, right = self.expr(node.left), self.expr(node.comparators[0])
        if isinstance(node.ops[0], (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
            return py_compare(node.ops[0], left, right)
        if on_device([left, right], {}):
            left, right = self.operand(left), self.operand(right)
        if not isinstance(left, Value) and not isinstance(right, Value):
            return PYOPS[type(node.ops[0])](left, right)
        return OPS[CMPOPS[type(node.ops[0])]](self.b, left, right)

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
