"""2^x for the Gluon attention forward, a share of it on the FMA units.

FlashAttention-4's trick: on Hopper the special function unit computes as many
exponentials a cycle as the tensor cores multiply scores at head dim 64, so the softmax
waits on it; a polynomial on the FMA units takes some of them.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


def _exp2_asm(pack: int) -> str:
    """PTX computing 2^x of `pack` floats, the last on the FMA units: 2^x = 2^f *
    2^round(x), f = x - round(x) in [-1/2, 1/2], 2^f by a degree-5 polynomial (relative
    error under 1.7e-7, as the unit's; exact at integers), round(x) added to its exponent;
    0 below -125, NaN kept."""
    x, out = f"${2 * pack - 1}", f"${pack - 1}"
    lines = [f"ex2.approx.ftz.f32 ${i}, ${pack + i};" for i in range(pack - 1)]
    lines += ["{", ".reg .b32 t, j, f, p;", ".reg .pred small;",
              f"add.rn.f32 t, {x}, 0f4B400000;",  # 1.5 * 2^23: its low bits are round(x)
              "sub.rn.f32 j, t, 0f4B400000;", f"sub.rn.f32 f, {x}, j;",
              "fma.rn.ftz.f32 p, f, 0f3AADDCD4, 0f3C1E7534;"]  # fmt: skip
    for c in ("3D635BA9", "3E75FCDE", "3F317215", "3F800000"):
        lines.append(f"fma.rn.ftz.f32 p, p, f, 0f{c};")
    lines += ["shl.b32 t, t, 23;", "add.s32 p, p, t;", f"setp.lt.f32 small, {x}, 0fC2FA0000;",
              f"selp.b32 {out}, 0, p, small;", "}"]  # fmt: skip
    return "\n".join(lines)


EXP2_HALF, EXP2_QUARTER = gl.constexpr(_exp2_asm(2)), gl.constexpr(_exp2_asm(4))


@gluon.jit
def exp2(x, SHARE: gl.constexpr):
    """2^x; one element in SHARE (2 or 4; 0: none) computed on the FMA units."""
    if SHARE == 2:
        return gl.inline_asm_elementwise(EXP2_HALF, "=r,=r,r,r", [x], dtype=gl.float32,
                                         is_pure=True, pack=2)  # fmt: skip
    elif SHARE == 4:
        return gl.inline_asm_elementwise(EXP2_QUARTER, "=r,=r,=r,=r,r,r,r,r", [x],
                                         dtype=gl.float32, is_pure=True, pack=4)  # fmt: skip
    else:
        return gl.exp2(x)
