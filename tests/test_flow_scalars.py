"""Regressions found by tests/test_fuzz_flow.py: scalars, builtins and accumulators in
device loops, in both modes against PyTorch."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft import exc
from tilecraft.testing import check_modes, run_mode


@tc.kernel
def bump(x: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        acc = x[t]
        acc += 1
        out[t] = acc


def test_augmented_assignment_does_not_write_through_to_the_input() -> None:
    """Eager mode's `acc += 1` updated the tensor `acc` was read from (x came back + 1)."""
    x = torch.arange(5.0, device=DEVICE)
    check_modes(bump, (x, torch.zeros(5, device=DEVICE)), lambda x, out: (x, x + 1))


@tc.kernel
def wrap16(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        acc = x[t]
        acc += y[t] * 1000
        out[t] = acc * 7


def test_augmented_assignment_keeps_the_dtype_as_pytorch_in_place() -> None:
    """`acc_int16 += int64 tile` stays int16 (and wraps as int16) as PyTorch's in-place add."""
    x = torch.tensor([30000, -5, 7], dtype=torch.int16, device=DEVICE)
    y = torch.tensor([900, 4, -3], dtype=torch.int64, device=DEVICE)
    out = torch.zeros(3, dtype=torch.int16, device=DEVICE)
    check_modes(wrap16, (x, y, out), lambda x, y, out: (x, y, x.clone().add_(y * 1000) * 7))


@tc.kernel
def float_into_int(x: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        acc = x[t]
        acc += 0.5
        out[t] = acc


def test_augmented_float_into_an_int_tile_is_refused() -> None:
    x = torch.arange(4, device=DEVICE)
    with pytest.raises(exc.UnsupportedOperation, match="cannot hold in place"):
        run_mode(float_into_int, (x, torch.zeros_like(x)), "triton")


@tc.kernel
def host_and_tile_flags(x: torch.Tensor, f: torch.Tensor, s: float, out: torch.Tensor) -> None:
    for i in tc.grid(x.size(0)):
        for t in tc.tile(x.size(1)):
            a = x[i, t]
            keep = ((s >= 0.5) & (a > 0)) | ((f[i] > 1) ^ (a < -1))
            out[i, t] = torch.where(keep, a, 1.0)


def test_scalar_conditions_combined_with_tiles() -> None:
    """`&`/`|`/`^` of a 0-d bool (a host float's or a loaded scalar's comparison) and a tile's
    failed in Triton's interpreter (numpy refused the operand types)."""
    x, f = torch.randn(3, 7, device=DEVICE), torch.tensor([0.0, 2.0, 5.0], device=DEVICE)

    def expected(x, f, s, out):
        keep = ((s >= 0.5) & (x > 0)) | ((f[:, None] > 1) ^ (x < -1))
        return x, f, torch.where(keep, x, 1.0)

    check_modes(host_and_tile_flags, (x, f, 1.5, torch.zeros_like(x)), expected)


@tc.kernel
def int_where(x: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t] = x[t] * (2 - torch.where(x[t] > 1, 0, -3)) * 1000000007 * 1000000007


def test_where_of_python_ints_is_int64() -> None:
    """Was float32 (PyTorch: int64), so the products lost int64's wraparound."""
    x = torch.tensor([-4, 9, 5, -8, 11], dtype=torch.int32, device=DEVICE)
    out = torch.zeros(5, dtype=torch.int64, device=DEVICE)
    want = x * (2 - torch.where(x > 1, 0, -3)) * 1000000007 * 1000000007
    check_modes(int_where, (x, out), lambda x, out: (x, want))


@tc.kernel
def builtins_of_scalars(x: torch.Tensor, f: torch.Tensor, s: float, out: torch.Tensor) -> None:
    for i in tc.grid(x.size(0)):
        for t in tc.tile(x.size(1)):
            v = f[i]
            a = x[i, t] + abs(v) + float(v) * abs(s) + pow(x[i, t], 2)
            out[i, t] = a + int(v) // 2 + torch.div(7, 2, rounding_mode="floor") + bool(v)


def test_builtins_and_torch_functions_of_numbers_in_a_device_loop() -> None:
    """abs/float/int/bool/pow of device values were refused ("did you mean `abs`?"), and so
    was a torch function of numbers only (`torch.div(7, 2, rounding_mode='floor')`)."""
    x, f = torch.randn(3, 5, device=DEVICE), torch.tensor([-3, 0, 5], device=DEVICE)

    def expected(x, f, s, out):
        v = f[:, None]
        a = x + v.abs() + v.double() * abs(s) + x**2
        return x, f, (a + torch.div(v, 2, rounding_mode="floor") + 3 + (v != 0)).float()

    check_modes(builtins_of_scalars, (x, f, -2.5, torch.zeros_like(x)), expected, torch.float32)


@tc.kernel
def floor_of_float(x: torch.Tensor, s: float, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t] = x[t] + math.floor(s)


@tc.kernel
def int_of_float(x: torch.Tensor, s: float, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t] = x[t] + int(s)


@pytest.mark.parametrize("kernel,name", [(floor_of_float, "math.floor"), (int_of_float, "int")])
def test_python_functions_of_device_floats_are_refused_by_name(kernel, name: str) -> None:
    """Python raises for NaN (and math.sqrt below 0) where a kernel cannot: refused."""
    x = torch.zeros(3, device=DEVICE)
    with pytest.raises(exc.UnsupportedOperation, match=f"`{name}\\(\\)` of a"):
        run_mode(kernel, (x, 2.5, torch.zeros_like(x)), "triton")


@tc.kernel
def inverted_host_flag(x: torch.Tensor, s: float, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t] = x[t] + ~(s > 0)


def test_invert_of_a_host_float_comparison_is_pythons() -> None:
    """`~(s > 0)` of a float argument is `~True == -2` in Python (it was `not`, False)."""
    x = torch.zeros(3, dtype=torch.int64, device=DEVICE)
    for s in (1.5, -1.5):
        check_modes(
            inverted_host_flag, (x, s, torch.zeros_like(x)), lambda x, s, o: (x, x + ~(s > 0))
        )


@tc.kernel
def number_accumulator(x: torch.Tensor, out: torch.Tensor) -> None:
    for i in tc.grid(x.size(0)):
        acc = 0
        for t in tc.tile(x.size(1)):
            acc = acc + x[i, t].sum()
        out[i] = acc


def test_a_number_updated_in_a_device_loop_is_refused() -> None:
    """`acc = 0` before a `tc.tile` loop that updates it compiled to 0 (the number was not
    carried across trips); refused, naming the variable."""
    x = torch.ones(3, 20, device=DEVICE)
    with pytest.raises(exc.UnsupportedSyntax, match="`acc` is a Python number before"):
        run_mode(number_accumulator, (x, torch.zeros(3, device=DEVICE)), "triton")


@tc.kernel
def modulo_of_ints(x: torch.Tensor, n: int, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t] = x[t] + 7 % n


def test_python_arithmetic_that_raises_is_refused_by_name() -> None:
    """`7 % 0` of numbers known while compiling was a LoweringError (an internal failure)."""
    x = torch.zeros(3, device=DEVICE)
    with pytest.raises(exc.UnsupportedOperation, match="`7 % 0` of numbers known"):
        run_mode(modulo_of_ints, (x, 0, torch.zeros_like(x)), "triton")


@tc.kernel
def same_in_both_arms(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> None:
    for i in tc.grid(x.size(0)):
        for t in tc.tile(x.size(1)):
            a = x[i, t]
            v = f[i]
            acc = a
            if a > 0:  # noqa: SIM108 (on a tile: a select)
                acc = v
            else:
                acc = v
            one = a
            if v > 0:  # noqa: SIM108 (on a loaded scalar: a branch)
                one = 1.0
            else:
                one = 1.0
            out[i, t] = acc + one


def test_a_variable_assigned_the_same_in_both_arms_keeps_it() -> None:
    """`if c: acc = v` / `else: acc = v` left `acc` as it was before the `if` in compiled
    code (both arms gave one value, so no select was made, and none was assigned either);
    found by the flow fuzzer (seed 107, kernel 104)."""
    x = torch.tensor([[-2.0, 3.0, 0.5], [4.0, -1.0, 0.0]], device=DEVICE)
    f = torch.tensor([7.0, -5.0], device=DEVICE)
    expected = f[:, None].expand(2, 3) + 1.0
    check_modes(same_in_both_arms, (x, f, torch.zeros_like(x)), lambda x, f, out: (x, f, expected))


@tc.kernel
def where_of_a_root(x: torch.Tensor, n: int, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        a = x[t]
        out[t] = torch.where(a > 0, a, n**0.5)


def test_a_complex_number_in_a_torch_call_is_refused_by_name() -> None:
    """`n ** 0.5` of a negative host int is a Python complex: an operator refused it, but as
    a torch function's argument it reached code generation (a LoweringError); the flow
    fuzzer's find (seed 107, kernel 97)."""
    args = (torch.ones(3, device=DEVICE), -1, torch.zeros(3, device=DEVICE))
    with pytest.raises(exc.UnsupportedOperation, match="complex"):
        run_mode(where_of_a_root, args, "triton")


@tc.kernel
def python_mods(x: torch.Tensor, s: float, t: float, out: torch.Tensor) -> None:
    for i in tc.tile(x.size(0)):
        a = x[i]
        out[i, 0] = torch.where(a > -100, s % t, a)
        out[i, 1] = torch.where(a > -100, s % -3.0, a)
        out[i, 2] = torch.where(a > -100, 2 % t, a)
        out[i, 3] = (s % t) % a


@pytest.mark.parametrize("s,t", [(1.0, -0.5), (-0.0, 3.0), (5.5, 2.0), (-5.5, 2.0), (3.0, -1.5)])
def test_host_floats_remainder_as_python_does(s: float, t: float) -> None:
    """`s % t` of host floats is Python's: a zero result takes the divisor's sign (`1.0 %
    -0.5` is -0.0), where compiled code took PyTorch's remainder (0.0); the dtype fuzzer's
    find (seed 32, kernel 46: `(n % s) % a`)."""
    x = torch.tensor([45.0, -11.0, 2.5], device=DEVICE, dtype=torch.float64)

    def reference(x: torch.Tensor, s: float, t: float, out: torch.Tensor) -> tuple:
        cols = [s % t, s % -3.0, 2 % t]
        wide = torch.tensor(cols, dtype=torch.float64, device=x.device).expand(3, 3)
        return x, torch.cat([wide, torch.remainder(torch.full_like(x, s % t), x)[:, None]], 1)

    out = torch.zeros(3, 4, dtype=torch.float64, device=DEVICE)
    check_modes(python_mods, (x, s, t, out), reference)


@tc.kernel
def remainders(h: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(h.size(0)):
        out[t, 0] = 28.991 % h[t]
        out[t, 1] = h[t] % 2.0009
        out[t, 2] = torch.fmod(h[t], 2.0009)
        out[t, 3] = h[t] % 2049


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_remainder_rounds_its_number_to_the_tile_dtype(dtype) -> None:
    """PyTorch's remainder and fmod (CPU and CUDA kernels) convert a Python number to a
    16-bit tensor's dtype first (`28.991 % h` is `29.0 % h` in float16); compiled code took
    it in float32 (flow fuzzer, seed 310, kernel 98: 7 ulps off)."""
    values = [1.3, -2.7, 5.1, -0.4, 7.0, -0.0, math.nan, math.inf, -math.inf]
    h = torch.tensor(values, device=DEVICE).to(dtype)

    def reference(h: torch.Tensor, out: torch.Tensor) -> tuple:
        parts = [28.991 % h, h % 2.0009, torch.fmod(h, 2.0009), h % 2049]
        return h, torch.stack(parts, 1)

    for n in (len(values), 1, 0):
        out = torch.empty(n, 4, device=DEVICE, dtype=dtype)
        check_modes(remainders, (h[:n], out), reference)


@tc.kernel
def compared(h: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(h.size(0)):
        x = h[t]
        out[t, 0] = x != math.pi
        out[t, 1] = x < math.pi
        out[t, 2] = x >= 0.1
        out[t, 3] = math.pi == x
        out[t, 4] = x > 65519.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_comparison_rounds_its_number_to_the_tile_dtype(dtype) -> None:
    """PyTorch compares a 16-bit tensor with a Python number in the tensor's dtype (its
    inputs are promoted to their common dtype first): float16's 3.140625 equals `math.pi`
    there; compiled code compared in float32 (flow fuzzer, seed 415, kernel 75)."""
    pi, tenth = float(torch.tensor(math.pi, dtype=dtype)), float(torch.tensor(0.1, dtype=dtype))
    values = [pi, tenth, 1.0, -0.0, 65504.0, math.nan, math.inf, -math.inf]
    h = torch.tensor(values, device=DEVICE).to(dtype)

    def reference(h: torch.Tensor, out: torch.Tensor) -> tuple:
        parts = [h != math.pi, h < math.pi, h >= 0.1, math.pi == h, h > 65519.0]
        return h, torch.stack(parts, 1)

    for n in (len(values), 1, 0):
        out = torch.empty(n, 5, device=DEVICE, dtype=torch.bool)
        check_modes(compared, (h[:n], out), reference)


@tc.kernel
def mixed_halves(i: torch.Tensor, h: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(i.size(0)):
        out[t, 0] = (i[t] + h[t]).to(torch.int32)  # (exact: within tolerance, 256 is 258)
        out[t, 1] = torch.div(i[t], h[t], rounding_mode="floor").to(torch.int32)
        out[t, 2] = (i[t] * h[t]).to(torch.int32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_an_integer_tile_rounds_to_the_16_bit_dtype_it_meets(dtype) -> None:
    """PyTorch converts an int16 tensor meeting a 16-bit float one to that dtype first
    (257 is 256 in bfloat16, so 257 + 0.5 is 256.5, then 256); compiled code took the ints
    exactly in float32 (dtype fuzzer, seed 421: 515 // 2 gave 257, then 256, for 258)."""
    i = torch.tensor([257, 515, 2049, -4097, 7, 0, 1], dtype=torch.int16, device=DEVICE)
    h = torch.tensor([0.5, 2.0, 1.0, 3.0, 0.25, -1.5, 4.0], device=DEVICE).to(dtype)

    def reference(i: torch.Tensor, h: torch.Tensor, out: torch.Tensor) -> tuple:
        parts = [i + h, torch.div(i, h, rounding_mode="floor"), i * h]
        return i, h, torch.stack(parts, 1).to(torch.int32)

    for n in (7, 1, 0):
        out = torch.empty(n, 3, device=DEVICE, dtype=torch.int32)
        check_modes(mixed_halves, (i[:n], h[:n], out), reference)


@tc.kernel
def floor_divided(h: torch.Tensor, g: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(h.size(0)):
        out[t, 0] = h[t] // g[t]
        out[t, 1] = torch.div(h[t], g[t], rounding_mode="floor")
        q = h[t]
        q //= g[t]
        out[t, 2] = q
        out[t, 3] = -999.7 // h[t]
        out[t, 4] = h[t] // 7.3


def _one_at_a_time(op: Callable, *tensors: torch.Tensor) -> torch.Tensor:
    """`op` on each element alone: PyTorch's one-element path, which computes a 16-bit
    floor division in float32 (its CPU kernel's vectorized path takes 16-bit steps)."""
    alone = [op(*(x[k : k + 1] for x in tensors)) for k in range(tensors[0].shape[0])]
    return torch.cat([op(*tensors)[:0], *alone])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_floor_division_floors_in_float32(dtype) -> None:
    """PyTorch's CPU floor division of 16-bit tensors gave bfloat16 1000 // 3 as 334 on a
    tensor longer than one element (it rounds `a - a % b` and the quotient to 16 bits) and
    332 on one element, in compiled code and in its CUDA kernel (333 rounded once); eager
    mode now floors in float32 as those do (dtype fuzzer, seed 421, kernel 113). `c // h`
    rounds its dividend to the tile's dtype (-999.7 is -1000 in bfloat16) in both."""
    g = torch.Generator().manual_seed(3)
    h = torch.cat([torch.tensor([1000.0, 560.0, 7.0, -0.0, math.nan, math.inf, 5.0, -3.0])])
    h = torch.cat([h, torch.randn(1000, generator=g) * 300]).to(dtype)
    d = torch.cat([torch.tensor([3.0, 3.0, 0.0, 2.0, 1.0, 2.0, math.inf, -0.0])])
    d = torch.cat([d, torch.randn(1000, generator=g) * 5]).to(dtype)
    ops = [
        lambda h, g: h // g,
        lambda h, g: torch.div(h, g, rounding_mode="floor"),
        lambda h, g: h // g,
        lambda h, g: -999.7 // h,
        lambda h, g: h // 7.3,
    ]

    def reference(h: torch.Tensor, g: torch.Tensor, out: torch.Tensor) -> tuple:
        return h, g, torch.stack([_one_at_a_time(op, h, g) for op in ops], 1)

    for n in (len(h), 1, 0):  # (to the bit: float64's tolerance)
        out = torch.empty(n, 5, device=DEVICE, dtype=dtype)
        args = (h[:n].to(DEVICE), d[:n].to(DEVICE), out)
        check_modes(floor_divided, args, reference, torch.float64)


@tc.kernel
def by_host_floats(h: torch.Tensor, s: float, out: torch.Tensor) -> None:
    for t in tc.tile(h.size(0)):
        x = h[t]
        out[t, 0] = x % s
        out[t, 1] = s % x
        out[t, 2] = torch.fmod(x, s)
        out[t, 3] = (x == s).to(x.dtype)
        out[t, 4] = (s < x).to(x.dtype)
        out[t, 5] = torch.div(x, s, rounding_mode="trunc")
        out[t, 6] = s // x
        out[t, 7] = torch.div(x, 7.3, rounding_mode="trunc")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_host_float_meets_a_16_bit_tile_as_a_number_does(dtype) -> None:
    """A float passed to the kernel is a Python number to PyTorch: remainders, comparisons
    and `s // h` take it rounded to the tile's dtype, as compiled code took a literal but
    not a host float (7.3 % h was 7.3125 % h eagerly); and a 16-bit quotient by a number is
    truncated in float32 (compiled code rounded it to 16 bits first: 250 of 3,000
    bfloat16 values off by one)."""
    g = torch.Generator().manual_seed(5)
    h = torch.tensor([7.3125, 7.296875, 3.140625, 14.625, -0.0, math.nan, math.inf, 1.0])
    h = torch.cat([h, torch.randn(1000, generator=g) * 300]).to(dtype)
    ops = [
        lambda h, s: h % s,
        lambda h, s: s % h,
        lambda h, s: torch.fmod(h, s),
        lambda h, s: (h == s).to(h.dtype),
        lambda h, s: (s < h).to(h.dtype),
        lambda h, s: torch.div(h, s, rounding_mode="trunc"),
        lambda h, s: s // h,
        lambda h, s: torch.div(h, 7.3, rounding_mode="trunc"),
    ]

    def reference(h: torch.Tensor, s: float, out: torch.Tensor) -> tuple:
        return h, torch.stack([_one_at_a_time(lambda x, op=op: op(x, s), h) for op in ops], 1)

    for s in (7.3, math.pi):
        for n in (len(h), 1, 0):  # (to the bit: float64's tolerance)
            out = torch.empty(n, len(ops), device=DEVICE, dtype=dtype)
            check_modes(by_host_floats, (h[:n].to(DEVICE), s, out), reference, torch.float64)


@tc.kernel
def truncated(h: torch.Tensor, g: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(h.size(0), block_size=4):
        out[t] = torch.div(h[t], g[t], rounding_mode="trunc")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_trunc_division_rounds_its_quotient_on_any_tile(dtype) -> None:
    """PyTorch's kernels truncate a 16-bit quotient rounded to 16 bits (41.6875 / 0.5957 is
    69.98, 70 in float16), except its CPU kernel on one element, which truncates the float32
    quotient: eager mode's tile of one element at a tensor's end gave 69 where compiled code
    gives 70."""
    h = [41.6875, -6.56640625, 7.0, -23.375, math.inf, math.nan, 7.0, -0.0, 46.0]
    g = [0.595703125, 0.1527099609375, 2.0, -0.20703125, 2.0, 3.0, 0.0, 5.0, -0.2490234375]
    h, g = (torch.tensor(v).to(dtype).to(DEVICE) for v in (h, g))
    expected = (h.float() / g.float()).to(dtype).trunc()

    def reference(h: torch.Tensor, g: torch.Tensor, out: torch.Tensor) -> tuple:
        return h, g, expected[: len(h)]

    for n in (9, 5, 1, 0):  # (9 and 5: a last tile of one element)
        out = torch.empty(n, dtype=dtype, device=DEVICE)
        check_modes(truncated, (h[:n], g[:n], out), reference, torch.float64)


@tc.kernel
def with_int_of_scalar(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> None:
    for i in tc.grid(x.size(0)):
        for t in tc.tile(x.size(1)):
            v = f[i]
            a = x[i, t]
            out[i, t, 0] = (v > int(v) * 65537 + 7).to(a.dtype)
            out[i, t, 1] = a + int(v) * 100003
            out[i, t, 2] = a * (int(v) - 70000)


def test_int_of_a_scalar_is_a_python_int_meeting_tiles() -> None:
    """`int(v)` of a loaded int16 scalar is a Python int in eager mode: meeting an int16
    tile it is converted to int16 (wrapped) as PyTorch converts a number, where compiled
    code took it as an int64 tile (`v > int(v) * 65537 + 7` compared in int64: -2 >
    -131067 is True, where PyTorch compares -2 > 5; flow fuzzer seed 515, kernel 1)."""
    x = torch.tensor([[1, -7, 300], [5, 6, -8]], dtype=torch.int16, device=DEVICE)
    f = torch.tensor([-2, 3], dtype=torch.int16, device=DEVICE)

    def reference(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> tuple:
        rows = []
        for a, v in zip(x, f.tolist(), strict=True):
            w = torch.full_like(a, v)
            parts = [(w > v * 65537 + 7).to(a.dtype), a + v * 100003]
            rows.append(torch.stack([*parts, a * (v - 70000)], 1))
        return x, f, torch.stack(rows)

    out = torch.zeros(2, 3, 3, dtype=torch.int16, device=DEVICE)  # (wrapped, as PyTorch)
    check_modes(with_int_of_scalar, (x, f, out), reference)


@tc.kernel
def with_int_remainder(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> None:
    for i in tc.grid(x.size(0)):
        for t in tc.tile(x.size(1)):
            out[i, t] = x[i, t] * 1000000000007 + (-int(f[i])) % -3


def test_python_remainder_of_int_of_a_scalar_stays_an_int() -> None:
    """`-int(v) % -3` is a Python int in eager mode; compiled code took it for a float (a
    zero of the divisor's sign, -0.0), which made float32 of the int64 tile it was added
    to (-18999999987712 for -19000000000133: flow fuzzer, seed 581, kernel 119)."""
    x = torch.tensor([[-19, 3, 0]], device=DEVICE)
    f = torch.tensor([2], device=DEVICE)
    out = torch.zeros(1, 3, dtype=torch.int64, device=DEVICE)
    expected = x * 1000000000007 + (-2) % -3
    for mode in ("eager", "triton"):
        assert torch.equal(run_mode(with_int_remainder, (x, f, out), mode)[-1], expected)


@tc.kernel
def with_int_quotient(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> None:
    for i in tc.grid(x.size(0)):
        for t in tc.tile(x.size(1)):
            out[0, i, t] = x[i, t] + int(f[i]) / 3
            out[1, i, t] = x[i, t] * (int(f[i]) / 7)


def test_python_quotient_of_ints_of_scalars_is_a_double() -> None:
    """`int(v) / 3` is a Python float in eager mode (a double); compiled code took it as
    PyTorch's int tensor / int, a float32 (2/3 rounded to 0.6666667 met a float64 tile)."""
    x = torch.tensor([[1.0, 2.0, 1e-9]], dtype=torch.float64, device=DEVICE)
    f = torch.tensor([2], device=DEVICE)
    out = torch.zeros(2, 1, 3, dtype=torch.float64, device=DEVICE)
    expected = torch.stack([x + 2 / 3, x * (2 / 7)])
    for mode in ("eager", "triton"):
        assert torch.equal(run_mode(with_int_quotient, (x, f, out), mode)[-1], expected)


@tc.kernel
def items(x: torch.Tensor, counts: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    """`.item()` of loaded scalars: the Python numbers eager mode gets (a float meets the
    bfloat16 tile as a number, an int bounds a loop on the device, a bool picks a branch)."""
    out = torch.zeros_like(x)
    for i in tc.grid(x.size(0)):
        scale, n, on = x[i, 0].float().item(), counts[i].item(), flags[i].item()
        total = x[i, :] * scale
        for _ in range(n):
            total = total + 1
        if on:
            out[i, :] = total
    return out


def _items(x: torch.Tensor, counts: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    total = x * x[:, :1].float() + counts[:, None].to(x.dtype)
    return torch.where(flags[:, None], total, 0).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_item_of_one_element_gives_a_python_number(dtype: torch.dtype) -> None:
    x = torch.randn(6, 5).to(dtype)
    counts, flags = torch.tensor([0, 1, 3, 2, 0, 1]), torch.tensor([1, 0, 1, 1, 1, 0]) > 0
    check_modes(items, (x, counts, flags), _items, dtype=dtype)
