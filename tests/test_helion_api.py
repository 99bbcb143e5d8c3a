"""Helion's public names beyond the core loops and ops (`hl.tile_index`, `hl.ones`,
`hl.subscript`, `hl.constexpr`, `helion.jit`, `helion.RefMode`, ...), each in a kernel
written as Helion's documentation writes it, in both CPU modes; and the names tilecraft
refuses (distributed memory, inline assembly and Triton), each failing at its line."""

from __future__ import annotations

import inspect

import pytest
import torch

import tilecraft as helion
import tilecraft.language as hl
from tilecraft import exc
from tilecraft.testing import check_modes


@helion.kernel()
def tile_functions(x: torch.Tensor) -> torch.Tensor:
    n = x.size(0)
    out = torch.empty([n, 4], dtype=torch.float32, device=x.device)
    for tile in hl.tile(n, block_size=8):
        zero = hl.zeros([tile], dtype=torch.float32)
        out[tile, 0] = x[tile] * hl.tile_index(tile)
        out[tile, 1] = zero + hl.tile_begin(tile)
        out[tile, 2] = zero + hl.tile_end(tile)
        out[tile, 3] = zero + hl.tile_id(tile) * 100 + hl.tile_block_size(tile)
    return out


def _tile_functions(x: torch.Tensor) -> torch.Tensor:
    i = torch.arange(x.numel())
    begin = i // 8 * 8
    end = torch.clamp(begin + 8, max=x.numel())
    return torch.stack([x * i, begin, end, i // 8 * 100 + 8], 1).float()


def test_tile_functions() -> None:
    check_modes(tile_functions, (torch.randn(29),), _tile_functions)


@helion.kernel()
def outer_plus_one(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0), y.size(0)], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile(out.size()):
        column = hl.subscript(x[tile_m], [slice(None), None])
        row = hl.subscript(y[tile_n], [None, slice(None)])
        out[tile_m, tile_n] = column * row + hl.ones([tile_m, tile_n], dtype=x.dtype)
    return out


def test_ones_and_subscript() -> None:
    x, y = torch.randn(19), torch.randn(37)
    check_modes(outer_plus_one, (x, y), lambda a, b: a[:, None] * b[None, :] + 1)


@helion.jit
def scale_rows(x: torch.Tensor, factor: hl.constexpr) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] * factor
    return out


def test_constexpr_annotation_and_jit() -> None:
    x = torch.randn(13, 5)
    check_modes(scale_rows, (x, 3), lambda a, f: a * f)
    with pytest.raises(exc.BadArgument, match=r"pass 3 itself"):
        scale_rows(x, hl.constexpr(3))


def test_helion_module_names() -> None:
    assert helion.language is hl and helion.runtime is not None
    assert helion.Settings().interpret in (True, False)
    eager = helion.kernel(scale_rows.fn, ref_mode=helion.RefMode.EAGER)
    assert eager.settings.interpret
    assert not helion.kernel(scale_rows.fn, ref_mode=helion.RefMode.OFF).settings.interpret
    with pytest.raises(exc.SettingsError, match="ref_mode"):
        helion.kernel(scale_rows.fn, ref_mode="fast")


# -- refused names -------------------------------------------------------------------------
@helion.kernel()
def waits(x: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        hl.wait(flags, [tile.id], signal=1)
        out[tile] = x[tile]
    return out


@helion.kernel()
def inline_asm(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.inline_asm_elementwise(
            "mov.b32 $0, $1;", "=r,r", [x[tile]], dtype=x.dtype, is_pure=True, pack=1
        )
    return out


@helion.kernel()
def inline_triton(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.inline_triton("{0} + 1", args=(x[tile],), output_like=x[tile])
    return out


@helion.kernel()
def scaled_dot(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor) -> torch.Tensor:
    out = torch.empty([a.size(0), b.size(1)], device=a.device)
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = hl.dot_scaled(a[tile_m, :], sa[tile_m, :], "e4m3", b[:, tile_n])
    return out


def _line_of(kernel: object, text: str) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)  # type: ignore[attr-defined]
    return first + next(k for k, line in enumerate(lines) if text in line)


@pytest.mark.parametrize(
    ("kernel", "args", "text", "why"),
    [
        (waits, (torch.randn(9), torch.zeros(2)), "hl.wait(", "symmetric memory"),
        (inline_asm, (torch.randn(9),), "hl.inline_asm_elementwise(", "inline GPU assembly"),
        (inline_triton, (torch.randn(9),), "hl.inline_triton(", "Triton code itself"),
        (scaled_dot, (torch.randn(3, 4), torch.randn(4, 5), torch.ones(3, 1)), "dot_sc", "MX"),
    ],
)
def test_refused_names_fail_at_their_line(mode, kernel: object, args: tuple, text: str, why: str):
    with pytest.raises(exc.UnsupportedOperation, match=why) as info:
        mode(kernel)(*args)
    assert info.value.loc is not None and info.value.loc.lineno == _line_of(kernel, text)
    assert "not supported by tilecraft" in str(info.value)


def test_refused_names_exist() -> None:
    for name in ("signal", "stacktensor_like", "triton_kernel", "start_async_remote_copy"):
        with pytest.raises(exc.UnsupportedOperation, match=f"hl.{name} is not supported"):
            getattr(hl, name)()
    with pytest.raises(exc.UnsupportedOperation, match="hl.StackTensor"):
        hl.StackTensor()


# -- debugging calls -------------------------------------------------------------------------
@helion.kernel()
def printed_double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        hl.device_print("tile:", x[tile])
        out[tile] = x[tile] * 2
    return out


def test_device_print(mode, capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(11)
    if mode.name == "eager":
        torch.testing.assert_close(mode(printed_double)(x), x * 2)
        assert "tile:" in capsys.readouterr().out
        return
    with pytest.warns(UserWarning, match="leave out `device_print`") as record:
        torch.testing.assert_close(mode(printed_double)(x), x * 2)
    assert record[0].lineno == _line_of(printed_double, "hl.device_print(")


def test_not_yet_names_fail_with_what_to_write() -> None:
    with pytest.raises(exc.UnsupportedOperation, match="call hl.rand four times"):
        hl.rand4x([4], 0)
    with pytest.raises(exc.UnsupportedOperation, match="not implemented yet"):
        hl.float4_e2m1fn_x2_to_float32(torch.zeros(2, dtype=torch.uint8))
