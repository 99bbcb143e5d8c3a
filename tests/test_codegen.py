"""Targeted checks of the generated Triton source (not snapshots), and of Config."""

from __future__ import annotations

import ast
import re

import pytest
import torch
from conftest import DEVICE

import tilecraft
import tilecraft as tc
from tilecraft.exc import InvalidConfig


@tc.kernel
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in tc.tile(out.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
    return out


@tc.kernel
def row_sums(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty(m, dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        out[tile_m] = x[tile_m, :].to(torch.float32).sum(-1)
    return out


@tc.kernel
def looped_row_sums(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty(m, dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        acc = tc.zeros([tile_m], dtype=torch.float32)
        for tile_n in tc.tile(n):
            acc = acc + x[tile_m, tile_n].sum(1)
        out[tile_m] = acc
    return out


def code_of(kernel: tc.Kernel, *shapes: tuple[int, ...], dtype=torch.float32, **config) -> str:
    args = tuple(torch.randn(s, device=DEVICE).to(dtype) for s in shapes)
    return kernel.bind(args).to_triton_code(tc.Config(**config))


def device_part(code: str) -> str:
    """The Triton kernels: everything before the host launcher."""
    host = re.search(r"^def (?!_)\w+\(", code, re.MULTILINE)
    assert host is not None, "the module ends with the host launcher"
    return code[: host.start()]


def test_module_has_a_jit_kernel_and_a_launcher() -> None:
    code = code_of(add, (37, 19), (37, 19), block_sizes=[16, 16])
    ast.parse(code)
    assert "@triton.jit" in code
    assert "tl.program_id" in code
    assert re.search(r"^def add\(", code, re.MULTILINE)


def test_code_is_deterministic() -> None:
    first = code_of(add, (37, 19), (37, 19), block_sizes=[16, 16])
    assert code_of(add, (37, 19), (37, 19), block_sizes=[16, 16]) == first


@pytest.mark.parametrize(("shape", "ragged"), [((37, 19), True), ((32, 64), False)])
def test_masks_only_for_ragged_shapes(shape, ragged) -> None:
    code = code_of(add, shape, shape, block_sizes=[16, 16])
    assert ("mask_" in code) == ragged


@pytest.mark.parametrize(("n", "ragged"), [(129, True), (64, False)])
def test_masks_for_whole_rows_not_a_power_of_two(n, ragged) -> None:
    code = code_of(row_sums, (32, n), block_sizes=[16])
    assert ("mask_" in code) == ragged


def test_inner_tile_loop_is_a_tl_range() -> None:
    code = code_of(looped_row_sums, (37, 300), block_sizes=[16, 32])
    assert "tl.range(" in device_part(code)


@pytest.mark.parametrize(("chunk", "looped"), [(None, False), (64, True), (512, False)])
def test_reduction_loops_chunk_the_row(chunk, looped) -> None:
    code = code_of(row_sums, (37, 300), block_sizes=[8], reduction_loops=[chunk])
    assert ("tl.range(" in code) == looped
    assert "tl.sum(" in code


@pytest.mark.parametrize(("dtype", "upcast"), [(torch.bfloat16, True), (torch.float32, False)])
def test_bf16_math_is_done_in_float32(dtype, upcast) -> None:
    code = device_part(code_of(add, (37, 19), (37, 19), dtype=dtype))
    assert ("tl.float32" in code) == upcast  # a plain `.to`, or bits widened (interpreter)


def test_block_sizes_are_constexprs_passed_by_the_launcher() -> None:
    code = code_of(add, (37, 19), (37, 19), block_sizes=[16, 8], num_warps=2)
    constexprs = re.findall(r"(\w+): tl.constexpr", code)
    launch = re.search(r"^\s+_\w+\[.*\]\((.*)\)$", code, re.MULTILINE)  # `_kernel[grid](...)`
    assert constexprs and launch is not None
    passed = dict(re.findall(r"(\w+)=(\w+)", launch.group(1)))
    assert sorted(passed[name] for name in constexprs) == ["16", "8"]
    assert passed["num_warps"] == "2"


def test_print_code_setting(monkeypatch, capsys) -> None:
    kernel = tc.kernel(add.fn)
    monkeypatch.setattr(kernel.settings, "print_code", True)
    monkeypatch.setattr(kernel.settings, "interpret", False)
    x = torch.randn(5, 3, device=DEVICE)
    kernel(x, x)
    assert "@triton.jit" in capsys.readouterr().err


def test_print_code_environment_variable(monkeypatch, capsys) -> None:
    monkeypatch.setenv("TILECRAFT_PRINT_CODE", "1")
    monkeypatch.delenv("TILECRAFT_INTERPRET", raising=False)
    kernel = tc.kernel(add.fn)
    x = torch.randn(5, 3, device=DEVICE)
    kernel(x, x)
    assert "@triton.jit" in capsys.readouterr().err


def test_no_code_printed_by_default(monkeypatch, capsys) -> None:
    monkeypatch.delenv("TILECRAFT_PRINT_CODE", raising=False)
    monkeypatch.delenv("TILECRAFT_INTERPRET", raising=False)
    x = torch.randn(5, 3, device=DEVICE)
    tc.kernel(add.fn)(x, x)
    assert "@triton.jit" not in capsys.readouterr().err


# -- Config --------------------------------------------------------------------------------

CONFIGS = [
    tc.Config(),
    tc.Config(block_sizes=[16, 8], num_warps=4, num_stages=2),
    tc.Config(block_sizes=[None, 32], reduction_loops=[None, 64]),
    tc.Config(block_sizes=[64], pid_type="flat", factor=4, name="tanh"),
]


@pytest.mark.parametrize("config", CONFIGS, ids=repr)
def test_config_repr_round_trips(config) -> None:
    assert eval(repr(config), {"tc": tilecraft}) == config


@pytest.mark.parametrize("config", CONFIGS, ids=repr)
def test_config_json_round_trips(config) -> None:
    again = tc.Config.from_json(config.to_json())
    assert again == config and hash(again) == hash(config)


@pytest.mark.parametrize(
    "values",
    [
        {"num_warps": 3},
        {"num_warps": 64},
        {"num_warps": "4"},
        {"block_sizes": [48]},
        {"block_sizes": [16, 0]},
        {"block_sizes": 16},
        {"reduction_loops": [100]},
        {"num_stages": 0},
        {"pid_type": "diagonal"},
    ],
    ids=str,
)
def test_invalid_config(values) -> None:
    with pytest.raises(InvalidConfig):
        tc.Config(**values)


def test_float_remainders_take_libdevice_fmod_on_a_gpu(monkeypatch) -> None:
    """Triton's float `%` divides approximately on NVIDIA GPUs (1e30 % -3 came out near
    4e22): compiled for a GPU, fmod, remainder and floor division call libdevice's exact
    fmod, with int constants cast to floats, in float64 (Triton's libdevice flushes
    float32 denormals: 1 % 1e-40 was NaN on an H100); the interpreter keeps `%` (exact
    there)."""
    from tilecraft.codegen.module import module_source
    from tilecraft.ir.ops import lookup

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    fmod = lookup("fmod").emit(torch.float32, "x", "-3")
    wide = "libdevice.fmod(tl.cast(x, tl.float64), tl.cast(-3, tl.float64))"
    assert fmod == f"tl.cast({wide}, tl.float32)"
    for name in ("mod", "floordiv"):
        assert "libdevice.fmod(tl.cast(a, tl.float64)" in lookup(name).helper(torch.float64)
    integers = lookup("mod").helper(torch.int32)  # integers keep Triton's `%` (exact)
    assert "r = a % b" in integers and "libdevice" not in integers
    head = module_source("k", "here", [f"    v = {fmod}"], ast.parse("pass"), {})
    assert "from triton.language.extra import libdevice" in head
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "libdevice" not in lookup("fmod").emit(torch.float32, "x", "-3")


def test_round_half_to_even_compares_with_the_half() -> None:
    """`round(x * 10)` on a GPU: the compiler fuses `x * 10 - floor(x * 10)` into an exact
    FMA (0.35 * 10 is 3.5 in float32, that FMA 0.49999994), so the helper compares x with
    floor(x) + 0.5 and never subtracts."""
    from tilecraft.ir.ops import lookup

    code = [line.split("#")[0] for line in lookup("round").helper(torch.float32).splitlines()]
    assert any("half = low + 0.5" in line for line in code)
    assert not any("a - low" in line for line in code)


@pytest.mark.parametrize(("block_n", "once"), [(32, True), (8, False)])
def test_a_loop_that_may_run_once_starts_at_a_zero_from_the_host(block_n: int, once: bool) -> None:
    """Triton folds a loop of one iteration into code with constant indices, which Triton
    3.6 miscompiled in some products on the H200: such a loop starts at `_tc_zero`, an
    argument the launcher passes as 0, so it stays a loop; longer loops are left alone."""
    x = torch.randn(5, 20, device=DEVICE)
    bound = looped_row_sums.bind((x,))
    config = tc.Config(block_sizes=[8, block_n])
    code = bound.to_triton_code(config)
    assert ("for offset_1 in tl.range(_tc_zero, 20," in code) is once
    signature = re.search(r"^def _looped_row_sums_kernel\((.*)\):", code, re.MULTILINE)
    assert signature is not None and ("_tc_zero" in signature[1]) is once
    torch.testing.assert_close(bound.compile(config)(x), x.sum(1))
