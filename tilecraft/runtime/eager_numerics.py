"""Where eager mode computes an op as compiled code does rather than as PyTorch's CPU
kernels do. Those kernels round a 16-bit intermediate (or not), keep one zero or the other,
or overflow, depending on the path they take (a tensor of one element or a longer one, a
vector loop or its scalar tail); compiled code and PyTorch's CUDA kernels compute in
float32 and round once. Eager mode follows the compiled code, so that both modes give the
same bits whatever a tile's length."""

from __future__ import annotations

import math
from typing import Any

import torch

HALF = (torch.float16, torch.bfloat16)

# `h + c` and `h ** c` of a 16-bit float tile and a Python number, in float32 with c as a
# float32, then rounded once: as compiled and as PyTorch's CUDA kernels add (and as its CPU
# kernels multiply and divide); PyTorch's CPU add and sub round c to 16 bits first
# (`h + math.pi` then differed from the compiled kernel's sum in a fifth of float16
# values), and its bfloat16 cube rounds x * x before the last product (float16's does not)
NUMBER_OPS = {
    getattr(torch.Tensor, f"__{prefix}{name}__")
    for name in ("add", "sub", "pow")
    for prefix in "ri"
} | {torch.Tensor.__add__, torch.Tensor.__sub__, torch.add, torch.sub, torch.Tensor.add}
NUMBER_OPS |= {torch.Tensor.sub, torch.Tensor.add_, torch.Tensor.sub_, torch.Tensor.__pow__}
NUMBER_OPS |= {torch.pow, torch.Tensor.pow, torch.Tensor.pow_}

# `a // b` of two 16-bit float tiles: PyTorch's CPU kernel takes float32 steps on a tensor
# of one element and 16-bit steps on longer ones (its vectorized path rounds `a - a % b`
# and the quotient before flooring: bfloat16 1000 // 3 is 334 there, 332 in one element,
# in compiled code and in its CUDA kernel, which floors in float32 and rounds once); and
# `c // h`, whose dividend c both round to the tile's dtype first (`h // c` divides by c in
# float32 on the CPU already)
FLOOR_DIVISIONS: set[Any] = {
    torch.floor_divide,
    torch.Tensor.floor_divide,
    torch.Tensor.floor_divide_,
}
FLOOR_DIVISIONS |= {torch.Tensor.__floordiv__, torch.Tensor.__rfloordiv__}
FLOOR_DIVISIONS |= {torch.Tensor.__ifloordiv__}
ROUNDED_DIVISIONS: set[Any] = {torch.div, torch.Tensor.div, torch.Tensor.div_, torch.divide}
ROUNDED_DIVISIONS |= {torch.Tensor.divide, torch.Tensor.divide_}

# `torch.fmod(a, b)` and `a % b` of floats: PyTorch's CPU kernels give NaN where `a / b`
# passes about 1e38 (`0.5 % 1e-45`: its vectorized fmod is undefined there), where compiled
# code and its CUDA kernels give C's exact fmod (0.0); eager mode takes it in float64
FMODS: set[Any] = {torch.fmod, torch.Tensor.fmod, torch.Tensor.fmod_}
REMAINDERS: set[Any] = {torch.remainder, torch.Tensor.remainder, torch.Tensor.remainder_}
REMAINDERS |= {torch.Tensor.__mod__, torch.Tensor.__rmod__, torch.Tensor.__imod__}
FLOATS = (torch.float32, *HALF)

# `torch.maximum(a, b)` of two zeros: PyTorch's CPU kernel gives b in its vector loop and a
# in its scalar tail (a tile's zero then depends on its length); compiled code on the CPU
# gives b (on a GPU, +0.0 for the maximum, as PyTorch's CUDA kernels)
EXTREMA: set[Any] = {torch.maximum, torch.minimum, torch.Tensor.maximum, torch.Tensor.minimum}
EXTREMA |= {torch.max, torch.min, torch.Tensor.max, torch.Tensor.min}

# and `torch.clamp(x, min=lo)` with a tensor bound, a maximum of x and lo (then a minimum)
CLAMPS: dict[Any, tuple[str, ...]] = {f: ("min", "max") for f in (torch.clamp, torch.clip)}
CLAMPS |= {torch.Tensor.clamp: ("min", "max"), torch.Tensor.clip: ("min", "max")}
CLAMPS |= {torch.clamp_min: ("min",), torch.Tensor.clamp_min: ("min",)}
CLAMPS |= {torch.clamp_max: ("max",), torch.Tensor.clamp_max: ("max",)}

# `F.gelu(inf)`: NaN from PyTorch's CPU kernel, inf in compiled code (x * Φ(x), Φ(inf) = 1)
GELU = torch.nn.functional.gelu

# `sinh(89.0)` and `cosh(89.0)` in float32 (2.2e38): inf from PyTorch's vectorized CPU kernel
# (its exp(89) overflows), finite on one element, in compiled code and on a GPU
HYPERBOLIC: set[Any] = {torch.sinh, torch.cosh, torch.Tensor.sinh, torch.Tensor.cosh}

# topk's ties: compiled code takes the first positions (PyTorch's CPU kernel picks its own)
TOPK: set[Any] = {torch.topk, torch.Tensor.topk}

# a sort of floats with a NaN on a GPU: PyTorch's CUDA kernel put the NaN first in a stable
# sort of a few elements (an H100, torch 2.11), where its CPU kernel, its documentation and
# compiled code put NaNs last (first when descending); eager mode sorts those on the CPU
SORTS: set[Any] = {torch.sort, torch.Tensor.sort, torch.argsort, torch.Tensor.argsort}

_FMODS_AND_REMAINDERS = FMODS | REMAINDERS
_HANDLED = NUMBER_OPS | FLOOR_DIVISIONS | ROUNDED_DIVISIONS | _FMODS_AND_REMAINDERS | EXTREMA
_HANDLED |= HYPERBOLIC | set(CLAMPS) | {GELU} | TOPK | SORTS

IN_PLACE: set[Any] = {torch.Tensor.__iadd__, torch.Tensor.__isub__, torch.Tensor.add_}
IN_PLACE |= {torch.Tensor.sub_}
IN_PLACE |= {torch.Tensor.__ipow__, torch.Tensor.pow_, torch.Tensor.__ifloordiv__}
IN_PLACE |= {torch.Tensor.floor_divide_, torch.Tensor.div_, torch.Tensor.divide_}
IN_PLACE |= {torch.Tensor.fmod_, torch.Tensor.remainder_, torch.Tensor.__imod__}


def call(func: Any, args: tuple, kwargs: dict) -> Any:
    """`func(*args, **kwargs)`, computed as compiled code computes it where PyTorch's CPU
    kernels differ (every torch function of eager mode passes here: one set lookup for
    the others)."""
    result = _as_compiled(func, args, kwargs) if func in _HANDLED else NotImplemented
    return func(*args, **kwargs) if result is NotImplemented else result


def _as_compiled(func: Any, args: tuple, kwargs: dict) -> Any:
    if func in TOPK:
        return _first_of_ties(*args, **kwargs)
    if func in SORTS:
        return _sort(func, *args, **kwargs)
    if _widened(func, args, kwargs):
        return _in_float32(func, args, kwargs)
    if _fmod_of_floats(func, args, kwargs):
        return _exact_fmod(func, args)
    if func is GELU and kwargs.get("approximate", "none") == "none" and _on_cpu(args[:1]):
        return torch.where(args[0] == math.inf, args[0], func(*args, **kwargs))
    if func in HYPERBOLIC and len(args) == 1 and not kwargs and _on_cpu(args):
        return _hyperbolic(func, args[0])
    if _extremum_of_floats(func, args, kwargs):
        return _second_of_zeros(func, *args)
    if func in CLAMPS and _on_cpu(args[:1]) and args[0].dtype.is_floating_point:
        bounds = dict(zip(CLAMPS[func], args[1:], strict=False)) | kwargs
        if any(isinstance(v, torch.Tensor) for v in bounds.values()):
            return _clamped(args[0], bounds.get("min"), bounds.get("max"))
    if _trunc_of_halves(func, args, kwargs):
        dtype = torch.result_type(*args)
        quotient = torch.true_divide(*(a.to(dtype) for a in args)).trunc()
        return args[0].copy_(quotient) if func in IN_PLACE else quotient
    return NotImplemented


def _first_of_ties(
    x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> Any:
    """`torch.topk` taking the first of tied positions, as compiled code does."""
    values, indices = _sort(torch.sort, x, dim=dim, descending=largest, stable=True)
    return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))


def _sort(func: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
    """A sort or argsort (`SORTS`), on the CPU where `x` holds floats with a NaN on a GPU."""
    on_gpu = isinstance(x, torch.Tensor) and x.device.type != "cpu" and x.is_floating_point()
    if not (on_gpu and bool(x.isnan().any())):
        return func(x, *args, **kwargs)
    found = func(x.cpu(), *args, **kwargs)
    if isinstance(found, torch.Tensor):
        return found.to(x.device)
    return type(found)(tuple(t.to(x.device) for t in found))


def _second_of_zeros(func: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    zeros = (a == 0) & (b == 0)
    return torch.where(zeros, b, func(a, b)).to(torch.result_type(a, b))


def _clamped(x: torch.Tensor, low: Any, high: Any) -> torch.Tensor:
    """A clamp as compiled code computes it: a maximum with `low`, then a minimum with
    `high`, each tensor bound taken of two zeros (a number bound keeps x's zero)."""
    for bound, extremum, side in ((low, torch.maximum, "min"), (high, torch.minimum, "max")):
        if isinstance(bound, torch.Tensor):
            x = _second_of_zeros(extremum, x, bound)
        elif bound is not None:
            x = torch.clamp(x, **{side: bound})
    return x


def _hyperbolic(func: Any, x: torch.Tensor) -> torch.Tensor:
    """sinh or cosh, past |x| = 20 as e^(|x|/2) * e^(|x|/2) / 2 in float64 (finite up to
    the dtype's limit), with x's sign for sinh."""
    if not x.dtype.is_floating_point:
        return func(x)
    wide = x.double()
    half = torch.exp(wide.abs() * 0.5)
    far = half * (half * 0.5)
    if func in (torch.sinh, torch.Tensor.sinh):
        far = torch.copysign(far, wide)
    return torch.where(wide.abs() > 20, far, func(wide)).to(x.dtype)


def _extremum_of_floats(func: Any, args: tuple, kwargs: dict) -> bool:
    if func not in EXTREMA or kwargs or len(args) != 2:
        return False
    return _on_cpu(args) and torch.result_type(*args).is_floating_point


def _on_cpu(args: tuple) -> bool:
    return all(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in args)


def _trunc_of_halves(func: Any, args: tuple, kwargs: dict) -> bool:
    """`torch.div(a, b, rounding_mode="trunc")` of two tensors, at 16 bits: PyTorch's CPU
    kernel truncates the quotient rounded to 16 bits, as its CUDA kernel and compiled code
    do (2.9995 in float16 is 3), except on one element, whose float32 quotient it
    truncates."""
    if func not in ROUNDED_DIVISIONS or kwargs != {"rounding_mode": "trunc"} or len(args) != 2:
        return False
    tensors = all(isinstance(a, torch.Tensor) for a in args)
    return tensors and torch.result_type(*args) in HALF


def _widened(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether `func(*args, **kwargs)` is one of the ops above, at 16 bits."""
    if (func in NUMBER_OPS or func is torch.Tensor.__rfloordiv__) and not kwargs:
        return _half_and_number(args)
    floor = func in FLOOR_DIVISIONS and not kwargs
    floor = floor or (func in ROUNDED_DIVISIONS and kwargs == {"rounding_mode": "floor"})
    return floor and _half_tensors(args)


def _fmod_of_floats(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether `func(*args, **kwargs)` is an fmod or a remainder with a float32 or 16-bit
    result."""
    if func not in _FMODS_AND_REMAINDERS or kwargs or len(args) != 2:
        return False
    return torch.result_type(*args) in FLOATS


def _exact_fmod(func: Any, args: tuple) -> torch.Tensor:
    """C's fmod, exact in float64 for these dtypes, then moved to the divisor's sign in
    float32 for a remainder, as compiled code computes them."""
    dtype = torch.result_type(*args)
    ordered = args[::-1] if func is torch.Tensor.__rmod__ else args
    a, b = (torch.as_tensor(x).to(dtype).float() for x in ordered)  # (numbers too)
    r = torch.fmod(a.double(), b.double()).float()
    if func in REMAINDERS:
        r = torch.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
    return args[0].copy_(r) if func in IN_PLACE else r.to(dtype)


def _in_float32(func: Any, args: tuple, kwargs: dict) -> torch.Tensor:
    """`func(*args, **kwargs)` computed in float32 from its operands in their common dtype
    (an integer tile meeting a 16-bit one is rounded to it first, as PyTorch does), rounded
    once to that dtype; in place where `func` is."""
    dtype = torch.result_type(*args[:2])
    wide = [_wide(a, dtype, func is torch.Tensor.__rfloordiv__) for a in args]
    result = func(*wide, **kwargs)
    return args[0].copy_(result) if func in IN_PLACE else result.to(dtype)


def _wide(operand: Any, dtype: torch.dtype, rounds: bool) -> Any:
    """An operand as float32 from `dtype`: a tensor, or a number where `rounds`."""
    if isinstance(operand, torch.Tensor):
        return operand.to(dtype).float()
    return float(torch.tensor(operand, dtype=dtype)) if rounds else operand


def _half_and_number(args: tuple) -> bool:
    """A 16-bit float tensor and a Python number (not a bool), in that order. A number past
    the tensor's range too: PyTorch's CPU add rounds it to inf first (`-inf + 1e10` is NaN
    in float16) where compiled code and PyTorch's CUDA kernels add it in float32 (-inf)."""
    if len(args) != 2 or not isinstance(args[0], torch.Tensor) or args[0].dtype not in HALF:
        return False
    return isinstance(args[1], (int, float)) and not isinstance(args[1], bool)


def _half_tensors(args: tuple) -> bool:
    """Two tensors of at least one dimension whose common dtype is a 16-bit float (with a
    0-d tensor PyTorch takes its one-value path, in float32 already)."""
    if len(args) != 2 or not all(isinstance(a, torch.Tensor) and a.dim() for a in args):
        return False
    return torch.result_type(*args) in HALF
