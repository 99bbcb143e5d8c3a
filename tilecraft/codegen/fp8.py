"""fp8 conversions as PyTorch converts, computed from the bits where Triton's differ.

Narrowing, on the GPU too: the GPU's own conversion saturates at the format's largest
finite value (470 and inf became 448 in e4m3fn, 1e6 became 57344 in e5m2), where PyTorch
gives NaN past 464 (e4m3fn, before versions that saturate) and inf (e5m2); ints have no
conversion to fp8 in Triton. Under the interpreter it also rounds halfway cases up (100.0
became 104 in e4m3, where PyTorch and the GPU round to even: 96), flushes subnormals to
zero and loses NaN (NaN became 384, inf 256). So conversions to fp8 go through these
expressions: round to nearest even on a float32's bits, subnormals by a scaled rounding,
overflow as this PyTorch converts (e4m3fn saturates at 448 in recent versions; older ones
give NaN past 464, which rounds to 480; e5m2 overflows to inf), NaN kept. Widening is the
GPU's own (through float32 to other dtypes), and under the interpreter, which reads fp8
NaN and inf as numbers (e4m3fn's NaN as 480), from the bits.
"""

from __future__ import annotations

import functools

import torch

# (exponent bias difference to float32 << mantissa bits, mantissa bits, smallest normal,
# largest finite bit pattern)
FORMATS = {
    torch.float8_e4m3fn: (120 << 3, 3, 2.0**-6, 0x7E),
    torch.float8_e5m2: (112 << 2, 2, 2.0**-14, 0x7B),
}
TL = {torch.float8_e4m3fn: "tl.float8e4nv", torch.float8_e5m2: "tl.float8e5"}


@functools.cache
def _e4m3_saturates() -> bool:
    return not bool(torch.tensor(float("inf")).to(torch.float8_e4m3fn).float().isnan())


def narrowed(x: str, dst: torch.dtype) -> str:
    """Float32 `x` converted to fp8 `dst` as PyTorch converts it."""
    bias, mant, tiny, top = FORMATS[dst]
    drop = 23 - mant
    a = f"tl.abs({x})"
    sign = f"(({x}).to(tl.uint32, bitcast=True) >> 31).to(tl.int32)"
    nan = f"({a} != {a})"
    if dst == torch.float8_e4m3fn:
        if not _e4m3_saturates():  # past 464 rounds to 480, e4m3fn's NaN there
            nan = f"({nan} | ({a} > 464.0))"
        a = f"tl.where({a} > 448.0, 448.0, {a})"
    a = f"tl.where({nan}, 0.0, {a})"  # (no NaN cast to an int below)
    bits = f"{a}.to(tl.uint32, bitcast=True)"
    rounded = f"(({bits} + {(1 << (drop - 1)) - 1} + (({bits} >> {drop}) & 1)) >> {drop})"
    normal = f"tl.minimum({rounded}.to(tl.int32) - {bias}, {top + 1})"
    scale = 2.0 ** (mant - 1) / tiny * 2  # one unit in the last place of a subnormal: 1
    sub = f"(({a} * {scale} + 8388608.0) - 8388608.0).to(tl.int32)"
    body = f"tl.where({nan}, 0x7F, tl.where({a} < {tiny}, {sub}, {normal}))"
    pattern = f"(({body}) | ({sign} << 7)).to(tl.uint8)"
    return f"{pattern}.to({TL[dst]}, bitcast=True)"


def widened(x: str, src: torch.dtype) -> str:
    """Fp8 `x` as float32, NaN and inf read from the bits."""
    bits = f"({x}).to(tl.uint8, bitcast=True)"
    low = f"({bits} & 0x7F)"
    value = f"({x}).to(tl.float32)"
    if src == torch.float8_e4m3fn:
        return f"tl.where({low} == 0x7F, float('nan'), {value})"
    inf = f"tl.where({bits} > 0x7F, -float('inf'), float('inf'))"
    return f"tl.where({low} > 0x7C, float('nan'), tl.where({low} == 0x7C, {inf}, {value}))"
