"""Differential fuzzing of control flow and scalar semantics in device loops: random kernels
of `if`/`elif`/`else` on tiles, on loaded scalars and on host values, `range` loops
(unrolled, and on the device when bounded by a loaded scalar) with `continue` and
accumulators, `while` loops (unrolled on host values, on the device on a loaded scalar)
with `continue` and `break`, stores inside arms, Python ints' `//` and `%` of negative
operands, `**`, shifts past the bit width, int wraparound, builtins (`abs`, `min`, `max`, `int`,
`float`) and `math` constants, run in both modes against a reference that runs the same
body element by element on 0-d tensors (so every `if` is a Python `if`). Values keep the
kernel's dtype (a `where` has a tile operand): after an `if` on a tile, a variable of
two dtypes is one of their promotion, where the reference's element keeps its arm's.

Fuzzers like this found: an accumulator updated with `acc += ...` in eager mode wrote
through to the tensor its tile was read from; `&`/`|` of a loaded scalar's comparison and
a tile's failed in Triton's interpreter; `torch.where(c, 0, -3)` made float32 (PyTorch:
int64) and lost int64 wraparound; `acc = 0` before a device loop updating it gave 0
(now refused); `abs`, `float`, `int`, `pow` of device values were refused.

16-bit float kernels add a Python number (and raise to its power) in float32 and round
once, in both modes, as PyTorch's CUDA kernels add; PyTorch's CPU add rounds the number
to 16 bits first (its mul does not) and its bfloat16 `h ** 3` rounds h * h first (its
float16 one does not), so the reference computes those under `fuzzing.Float32Numbers`
(at seeds 101-107 `acc += math.pi` in float16, `acc + -999` in bfloat16, -1000 there,
and a bfloat16 `(3 * acc) ** 3` were a rounding apart, which the kernels' remainders,
comparisons and products made whole units).

No kernel assigns `acc` a Python number (`acc = j0`, `acc = -float(n)`): after an `if` on
a tile, the kernel's `acc` is the arms' merged tile, where the reference's element keeps
the arm's number: an int, whose `0 * -971` is +0 where a float tile's is -0.0 (seed 407,
kernel 29), and which an int8 tile wraps where the reference's `max(a, -65530)` did not
(seed 415, kernel 61); a float in double precision, which a bfloat16 tile rounds, and
`-998.9 + 994.7` made the rounding whole units (seed 539, kernel 91).

No `~` negates a comparison of `acc`: where an arm of an `if` on a tile sets `acc = 1`,
the kernel's `acc` is a tile after the `if` but the reference's element is the Python int
1, whose `~(acc != -5.0)` is Python's `~True`, -2 (seed 108, kernel 169).

A square root by `** 0.5` is taken of an `abs`: of an expression of numbers (`float(v)`, v
a loaded scalar, or the host float `s`) the reference's `** 0.5` below zero is a Python
complex (its real part stored), where compiled code computes it on the device as a
tensor's power, NaN (seed 113, kernel 19; seed 514, kernel 84, `s ** 0.5` of -7.3).

Kernels whose `max`/`min` meet +0.0 and -0.0 are skipped: which zero comes out is
PyTorch's choice per position (its CPU maximum gives the second operand in its vector
loop, the first in a tensor's scalar tail: `torch.maximum` of -0.0 and 0.0 is -0.0 for
a float32 tensor of 4 elements, +0.0 at 64), so eager mode on a short tile, the
element-wise reference and compiled code (the second operand under Triton's interpreter,
+0.0 on a GPU) disagree on the sign; seen at seeds 104 and 107.

Float kernels use no constants beyond float16's range: PyTorch's CPU kernels are not
consistent there (`h * 100003` multiplies by the float32 constant, `h + -99991` adds the
constant rounded to float16 first, -inf; its CUDA kernels add the float32 constant).
tilecraft adds it in float32 in both modes, as does the reference (`Float32Numbers`), so
an expression of constants past the range (`(math.pi * 1000 + -999) ** 3`, seed 218)
agrees too."""

from __future__ import annotations

import math
import random
import re

import pytest
import torch
from conftest import DEVICE
from fuzzing import Float32Numbers, OneElementAtATime, load_kernels

from tilecraft import exc
from tilecraft.autotune.space import space_of
from tilecraft.testing import check_modes, run_mode

SEED = 11
KERNELS = 120
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.int16, torch.int8]
SHAPES = [(1, 1), (3, 5), (0, 4), (4, 9), (2, 17)]
HEADS = {  # the loop nest, its indentation, the loads and the output's index
    "tile2": ("    for tm, tn in tc.tile(out.size()):\n", 8, "v = f[tm][:, None]", "tm, tn"),
    "grid": (
        "    for i in tc.grid(out.size(0)):\n        for tn in tc.tile(out.size(1)):\n",
        12,
        "v = f[i]",
        "i, tn",
    ),
    "nested": (
        "    for tm in tc.tile(out.size(0)):\n        for tn in tc.tile(out.size(1)):\n",
        12,
        "v = f[tm][:, None]",
        "tm, tn",
    ),
}


class Draw:
    """Random statements and expressions for one kernel (its dtype and loop nest)."""

    def __init__(self, rng: random.Random, dtype: torch.dtype, head: str) -> None:
        self.rng, self.head, self.floats = rng, head, dtype.is_floating_point
        self.loop_vars: list[str] = []

    def leaf(self) -> str:
        leaves = ["a", "b", "v", "acc", "acc", "n", str(self.rng.choice([1, 2, 3, -1, 0]))]
        leaves += self.loop_vars
        if self.floats:
            leaves += ["s", "0.5", "-1.5", "math.pi", "abs(s)", "float(n)"]
            leaves += ["float(v)", "abs(v)"] if self.head == "grid" else []
        else:
            leaves += ["abs(n)", "(-n) // 3", "n % -4", "int(v)" if self.head == "grid" else "-n"]
        return self.rng.choice(leaves)

    def expr(self, depth: int) -> str:
        r, k = self.rng, self.rng.random()
        if depth <= 0 or k < 0.3:
            return self.leaf()
        e, t = (lambda: self.expr(depth - 1)), (lambda: f"(a + {self.expr(depth - 1)})")
        divisor = r.choice(["3", "-3", "2", "-7", "n"])
        if k < 0.45:
            ops = ["+", "-", "*"] + (["/", "//", "%"] if self.floats else [])
            return f"({e()} {r.choice(ops)} {e()})"
        if k < 0.58:
            mode = r.choice(["floor", "trunc"])
            return r.choice(
                [
                    f"({e()} {r.choice(['//', '%'])} {divisor})",
                    f"torch.div({t()}, {divisor}, rounding_mode={mode!r})",
                    f"torch.{r.choice(['remainder', 'fmod'])}({t()}, {divisor})",
                ]
            )
        if k < 0.66:
            return f"torch.where({self.cond()}, {t()}, {e()})"  # (of the kernel's dtype)
        if k < 0.72:
            return f"{r.choice(['max', 'min'])}({r.choice(['a', 'b', 'acc'])}, {e()})"
        if k < 0.8:
            return f"abs({e()})" if r.random() < 0.5 else f"(-{e()})"
        if k < 0.88:
            powers = [2, 3, 0.5, "2.0"] if self.floats else [0, 1, 2, 3]
            base, power = e(), r.choice(powers)
            if power == 0.5:  # (see the module's docstring)
                base = f"abs({base})"
            return f"({base} ** {power})"
        if k < 0.94 and not self.floats:
            return f"({t()} {r.choice(['<<', '>>'])} {r.choice([0, 1, 7, 31, 32, 33, 63])})"
        if self.floats:  # (see the module's docstring: no constants past float16's range)
            return f"({e()} * {r.choice([3, 7, 1000])} + {r.choice([7, -999, 'n'])})"
        return f"({e()} * {r.choice([12345, 100003, 65537])} + {r.choice([7, -99991, 'n'])})"

    def cond(self) -> str:
        r = self.rng
        compare = r.choice([">", "<", ">=", "<=", "==", "!="])
        name = r.choice(["a", "b", "acc", "v"])
        single = f"{name} {compare} {self.expr(1)}"
        if r.random() < 0.25:
            return f"({single}) {r.choice(['&', '|'])} ({self.cond()})"
        # (no `~` of `acc`'s comparison: see the module's docstring)
        return f"~({single})" if r.random() < 0.1 and name != "acc" else single

    def block(self, depth: int, indent: int) -> list[str]:
        return [line for _ in range(self.rng.randint(1, 3)) for line in self.stmt(depth, indent)]

    def stmt(self, depth: int, indent: int) -> list[str]:
        r, pad, k = self.rng, " " * indent, self.rng.random()
        if depth <= 0 or k < 0.35:
            form = r.choice(["acc = {}", "acc = acc + {}", "acc += {}", "acc = acc * {}", "STORE"])
            value = self.expr(2)
            while form == "acc = {}" and _number_valued(value):
                value = self.expr(2)  # (see the module's docstring)
            return [pad + form.replace("STORE", "out[IDX] = {}").format(value)]
        if k < 0.65:
            host = "n > 2" if r.random() < 0.5 else ("s > 0" if self.floats else "n < 0")
            lines = [f"{pad}if {self.cond() if r.random() < 0.85 else host}:"]
            lines += self.block(depth - 1, indent + 4)
            if r.random() < 0.4:
                lines += [f"{pad}elif {self.cond()}:", *self.block(depth - 1, indent + 4)]
            if r.random() < 0.5:
                lines += [f"{pad}else:", *self.block(depth - 1, indent + 4)]
            return lines
        if r.random() < 0.35:
            return self.while_loop(depth, indent)
        var, bound = f"j{len(self.loop_vars)}", r.choice(["3", "n % 4 + 1", "2"])
        if self.head == "grid" and not self.floats and r.random() < 0.4:
            bound = "v % 4"  # a loop on the device
        lines = [f"{pad}for {var} in range({bound}):"]
        if r.random() < 0.3:
            lines += [f"{pad}    if {self.cond()}:", f"{pad}        continue"]
        self.loop_vars.append(var)
        lines += self.block(depth - 1, indent + 4)
        self.loop_vars.pop()
        return lines

    def while_loop(self, depth: int, indent: int) -> list[str]:
        """A `while` counting trips (first, so that `continue` cannot skip it) up to a
        host bound, and in the grid nest also on the loaded scalar `v` (on the device)."""
        r, pad = self.rng, " " * indent
        var = f"j{len(self.loop_vars)}"
        test = f"{var} < {r.choice(['3', 'n % 4 + 1', '2'])}"
        if self.head == "grid" and r.random() < 0.6:
            test += f" and v {r.choice(['>', '<', '!='])} {r.choice(['0', '1', '-1', 'n'])}"
        lines = [f"{pad}{var} = 0", f"{pad}while {test}:", f"{pad}    {var} += 1"]
        if r.random() < 0.4:
            exit_ = r.choice(["continue", "break"])
            lines += [f"{pad}    if {self.scalar_cond()}:", f"{pad}        {exit_}"]
        self.loop_vars.append(var)
        lines += self.block(depth - 1, indent + 4)
        self.loop_vars.pop()
        return lines

    def scalar_cond(self) -> str:
        """A condition on numbers and the loaded scalar only (one truth value)."""
        left = "v" if self.head == "grid" else "n"
        return f"{left} {self.rng.choice(['>', '<', '=='])} {self.rng.choice(['0', '1', 'n'])}"


class _Tile:
    """A tile in `_number_valued`'s evaluation: arithmetic with it gives a tile."""

    def _tile(self, *_: object) -> _Tile:
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _tile
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _tile
    __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __abs__ = _tile
    __lshift__ = __rshift__ = _tile

    def __float__(self) -> float:  # float(v) of a loaded scalar: a number
        return 0.5

    def __int__(self) -> int:
        return 1


def _number_valued(expr: str) -> bool:
    """Whether `expr` gives a Python number (loop variables, `n`, `s`, constants,
    `float(v)`) rather than a tile."""
    names: dict[str, object] = {"a": _Tile(), "b": _Tile(), "v": _Tile(), "acc": _Tile()}
    names |= {"s": 0.5, "n": 2, "math": math} | {f"j{d}": 1 for d in range(8)}
    names |= {"max": lambda p, q: p, "min": lambda p, q: p}  # (a tile's `max` is a tile)
    try:
        value = eval(expr, {"torch": None}, names)  # noqa: S307 - drawn here
    except Exception:  # noqa: BLE001 - a tensor function: a tile's dtype
        return False
    return isinstance(value, (int, float))


def draw(i: int, rng: random.Random) -> tuple[torch.dtype, str, list[str]]:
    dtype, head = rng.choice(FLOATS + INTS), rng.choice(list(HEADS))
    return dtype, head, Draw(rng, dtype, head).block(2, 0)


def kernel_source(i: int, head: str, body: list[str]) -> str:
    loops, indent, scalar, index = HEADS[head]
    pad = " " * indent
    lines = [f"a = x[{index}]; b = y[{index}]; {scalar}", "acc = a"]
    lines += [line.replace("IDX", index) for line in body] + [f"out[{index}] = acc"]
    params = (
        "x: torch.Tensor, y: torch.Tensor, f: torch.Tensor, s: float, n: int, out: torch.Tensor"
    )
    return f"\n@tc.kernel\ndef k{i}({params}):\n{loops}" + "".join(pad + x + "\n" for x in lines)


def reference_source(body: list[str]) -> str:
    """The body run on each element as 0-d tensors (copies: `acc += ...` on a 0-d view
    would write through; a copy's in-place add keeps its dtype, as a tile's does)."""
    lines = ["a = x[r, c].clone(); b = y[r, c].clone(); v = f[r].clone()", "acc = a"]
    lines += [
        re.sub(r"acc \+= (.*)$", r"acc = _aug(acc, \1)", x.replace("IDX", "r, c")) for x in body
    ]
    lines += ["out[r, c] = acc"]
    loops = "    for r in range(out.shape[0]):\n        for c in range(out.shape[1]):\n"
    head = "def ref(x, y, f, s, n, out):\n    out = out.clone()\n"
    return head + loops + "".join(" " * 12 + x + "\n" for x in lines) + "    return out\n"


class ZeroTie(Exception):
    """`max`/`min` of +0.0 and -0.0: see the module's docstring."""


def _zeros_of_both_signs(p, q) -> bool:
    if not all(isinstance(v, (int, float, torch.Tensor)) for v in (p, q)):
        return False
    p, q = float(p), float(q)
    return p == 0 and q == 0 and math.copysign(1, p) != math.copysign(1, q)


def _extreme(pick):
    """Python's max/min as compiled kernels compute them on tiles (NaN wins)."""

    def extreme(p, q):
        if _zeros_of_both_signs(p, q):
            raise ZeroTie
        if isinstance(q, torch.Tensor) and not isinstance(p, torch.Tensor):
            p, q = q, p
        if isinstance(q, torch.Tensor):
            return pick(p, q)
        return torch.clamp(p, **{"min" if pick is torch.maximum else "max": q})

    return extreme


def reference(body: list[str]):
    scope = {
        "torch": torch,
        "math": math,
        "max": _extreme(torch.maximum),
        "min": _extreme(torch.minimum),
        "_aug": lambda a, v: a.clone().__iadd__(v) if isinstance(a, torch.Tensor) else a + v,
    }
    exec(reference_source(body), scope)

    def ref(*args):
        with Float32Numbers(), OneElementAtATime():  # (see their docstrings)
            return scope["ref"](*args)

    return ref


def inputs(i: int, dtype: torch.dtype, shape: tuple[int, int]) -> tuple:
    """Floats with NaN, infinities and signed zeros (whole numbers for a third of the
    kernels, so that comparisons with constants are met); small ints, loop bounds in
    -2..4."""
    g = torch.Generator().manual_seed(i)
    if dtype.is_floating_point:

        def values(size: tuple[int, ...]) -> torch.Tensor:
            v, pick = torch.randn(size, generator=g) * 4, torch.rand(size, generator=g)
            v = torch.where(pick < 0.05, math.nan, v)
            v = torch.where((pick > 0.05) & (pick < 0.1), math.inf * v.sign(), v)
            v = torch.where((pick > 0.1) & (pick < 0.15), -0.0, v)
            return (v.round() if i % 3 == 0 else v).to(dtype)

        x, y, f = values(shape), values(shape), values(shape[:1])
    else:
        x, y = (torch.randint(-20, 21, shape, generator=g).to(dtype) for _ in range(2))
        f = torch.randint(-2, 5, shape[:1], generator=g).to(dtype)
    s, n = [-2.5, 0.5, 1.25, -0.0, 3.0, 0.1, -7.3][i % 7], [3, -5, 1, 2, -1, 4][i % 6]
    return tuple(t.to(DEVICE) for t in (x, y, f)) + (s, n, torch.zeros(shape, dtype=dtype))


def cases() -> list[tuple[int, torch.dtype, str, list[str]]]:
    rng = random.Random(SEED)
    return [(i, *draw(i, rng)) for i in range(KERNELS)]


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):
    source = "import math\n" + "".join(kernel_source(i, h, body) for i, _, h, body in cases())
    return load_kernels(tmp_path_factory, "fuzzed_flow", source)


@pytest.mark.parametrize("i,dtype,head,body", cases(), ids=[f"k{c[0]}" for c in cases()])
def test_random_control_flow_agrees_in_both_modes(module, i, dtype, head, body) -> None:
    agree(module, i, dtype, head, body, None)


@pytest.mark.parametrize("case", cases()[::4], ids=[f"k{c[0]}" for c in cases()[::4]])
def test_random_control_flow_at_a_random_config(module, case) -> None:
    """A quarter of the kernels again at a config drawn from their space (blocks of 1..16
    lanes over rows of up to 9, loop orders): eager mode tiles as the config does."""
    i, dtype, head, body = case
    args = inputs(i, dtype, SHAPES[i % len(SHAPES)])
    try:
        bound = getattr(module, f"k{i}").bind((*args[:-1], args[-1].to(DEVICE)))
    except exc.TilecraftError as e:  # (a LoweringError fails the default-config test)
        pytest.skip(f"refused: {str(e).splitlines()[0]}")
    agree(module, i, dtype, head, body, space_of(bound, on_gpu=False).random(random.Random(i)))


def agree(module, i, dtype, head, body, config) -> None:
    args = inputs(i, dtype, SHAPES[i % len(SHAPES)])
    args = (*args[:-1], args[-1].to(DEVICE))
    ref = reference(body)
    try:  # (the element-wise reference on the CPU: PyTorch raises on what it refuses)
        ref(*(a.cpu() if isinstance(a, torch.Tensor) else a for a in args))
    except (TypeError, RuntimeError, ZeroDivisionError, OverflowError, ValueError):
        # (ValueError: a Python int the reference grew past 64 bits, which a tensor cannot
        # take; the kernel's is a tile there, wrapping in both modes: seed 414, kernel 0)
        pytest.skip("PyTorch refuses this kernel's arithmetic")
    except ZeroTie:
        pytest.skip("max or min of +0.0 and -0.0 (see the module's docstring)")
    kernel = getattr(module, f"k{i}")
    try:
        run_mode(kernel, args, "eager", config)
    except (TypeError, RuntimeError, ZeroDivisionError, OverflowError) as e:
        if "match the broadcast shape" not in str(e):  # on lanes the reference's path skips
            pytest.skip(f"PyTorch refuses this kernel's arithmetic: {e}")
        # `acc += tile` growing `acc` in place, or `acc` made a scalar before it (in a
        # device loop, seed 110, or an arm of an `if`, seed 114): refused where it changes
        # (or for another reason found first: `-1.5 / j0` at j0 = 0, seed 542, kernel 86)
        with pytest.raises(exc.TilecraftError) as refused:
            run_mode(kernel, args, "triton", config)
        assert not isinstance(refused.value, exc.LoweringError), refused.value
        return
    try:
        check_modes(
            kernel,
            args,
            lambda x, y, f, s, n, out: (x, y, f, ref(x, y, f, s, n, out)),
            dtype,
            config=config,
        )
    except exc.TilecraftError as e:  # a clear refusal, not a wrong answer
        if isinstance(e, exc.LoweringError):
            raise
        pytest.skip(f"refused: {str(e).splitlines()[0]}")
