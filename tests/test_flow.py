"""Control flow in device loops against PyTorch, in both modes: `if` on host values,
device scalars and tiles; loops unrolled while compiling; loops bounded by tensors."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft import exc
from tilecraft.testing import assert_close


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(shape, device=DEVICE)


# -- `if` on a scalar computed on the device: a real branch ---------------------------------


@tc.kernel
def by_flag(x: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for i in tc.grid(m):
        row = x[i, :]
        if flags[i] > 0:
            y = row * 2
        elif flags[i] < 0:
            y = -row
        else:
            y = 0
        out[i, :] = y
    return out


@pytest.mark.parametrize("shape", [(7, 5), (1, 1), (3, 16)], ids=str)
def test_if_elif_else_on_a_loaded_scalar(shape, mode) -> None:
    x = randn(*shape)
    flags = torch.randint(-1, 2, (shape[0],), device=DEVICE)
    flags[0] = -1
    expected = torch.where(flags[:, None] > 0, 2 * x, torch.where(flags[:, None] < 0, -x, 0))
    assert_close(mode(by_flag)(x, flags), expected)


def test_scalar_if_is_a_triton_branch() -> None:
    x, flags = randn(3, 4), torch.ones(3, dtype=torch.int64, device=DEVICE)
    code = by_flag.bind((x, flags)).to_triton_code()
    assert "    if " in code and "else:" in code and "tl.where" not in code


@tc.kernel
def scale_tiles(x: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0), block_size=4):
        acc = x[tile]
        if flags[tile.begin] != 0:
            acc = acc * 3
        out[tile] = acc
    return out


def test_if_on_a_flag_per_tile(mode) -> None:
    x = randn(11)
    flags = torch.tensor([1, 0, 0, 0, 0, 1, 1, 1, 2, 0, 0], device=DEVICE)  # first of each 4
    expected = x * torch.repeat_interleave(torch.tensor([3.0, 1.0, 3.0], device=DEVICE), 4)[:11]
    assert_close(mode(scale_tiles)(x, flags), expected)


@tc.kernel
def sum_positive_chunks(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        acc = tc.zeros([tile_m], dtype=torch.float32)
        for tile_n in tc.tile(n, block_size=4):
            rows = x[tile_m, tile_n].sum(dim=1)
            if rows.sum() > 0:  # a scalar: the whole chunk or nothing
                acc = acc + rows
        out[tile_m] = acc
    return out


def test_scalar_if_updating_a_loop_accumulator(mode) -> None:
    x = randn(5, 10)
    expected = torch.zeros(5, device=DEVICE)
    for j in range(0, 10, 4):  # one tile of rows (5 < any block size), chunks of 4 columns
        block = x[:, j : j + 4]
        if block.sum() > 0:
            expected += block.sum(dim=1)
    assert_close(mode(sum_positive_chunks)(x), expected)


# -- `if` on a tile: both arms, merged with selects -----------------------------------------


@tc.kernel
def piecewise(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for tile in tc.tile(x.size()):
        v = x[tile]
        if v > 1:
            w = v * 2
            out[tile] = 10.0  # a store in an arm is masked by its condition
        elif v < -1:
            w = -v
        else:
            w = v + 0.5
        out[tile] = out[tile] + w
    return out


@pytest.mark.parametrize("shape", [(37, 19), (1, 1), (16, 64)], ids=str)
def test_if_elif_else_on_a_tile(shape, mode) -> None:
    x = randn(*shape) * 2
    w = torch.where(x > 1, 2 * x, torch.where(x < -1, -x, x + 0.5))
    expected = torch.where(x > 1, 10.0, 0.0) + w
    assert_close(mode(piecewise)(x), expected)


@tc.kernel
def masked_gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    out = torch.zeros([idx.size(0)], dtype=x.dtype, device=x.device)
    for tile in tc.tile(idx.size(0)):
        i = idx[tile]
        if i < x.size(0):  # indices past the end are never read
            out[tile] = x[i] + 1
    return out


def test_gather_under_a_tile_condition(mode) -> None:
    x, idx = randn(9), torch.tensor([0, 8, 9, 1000, 3], device=DEVICE)
    expected = torch.tensor([x[0] + 1, x[8] + 1, 0, 0, x[3] + 1], device=DEVICE)
    assert_close(mode(masked_gather)(x, idx), expected)


@tc.kernel
def clipped_rows(x: torch.Tensor, limit: float) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        row = x[tile_m, :]
        total = row.sum(dim=1)
        if total[:, None] > limit:
            row = row / total[:, None]
        out[tile_m, :] = row
    return out


@pytest.mark.parametrize("reduction_loops", [None, 4])
def test_tile_if_over_a_whole_dim(reduction_loops, mode) -> None:
    x = randn(6, 9).abs()
    kernel = tc.kernel(clipped_rows.fn, config=tc.Config(reduction_loops=[reduction_loops]))
    total = x.sum(dim=1, keepdim=True)
    assert_close(mode(kernel)(x, 4.0), torch.where(total > 4.0, x / total, x))


@tc.kernel
def shapes_differ(x: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for i in tc.grid(x.size(0)):
        y = x[i, :]
        if flags[i] > 0:
            y = y.sum()
        out[i, :] = y
    return out


def test_merging_different_shapes_is_an_error() -> None:
    with pytest.raises(exc.ShapeMismatch, match="same shape in both"):
        shapes_differ(randn(3, 4), torch.ones(3, dtype=torch.int64, device=DEVICE))


def test_ir_prints_branches() -> None:
    from tilecraft.ir.printer import format_kernel

    bound = by_flag.bind((randn(2, 3), torch.ones(2, dtype=torch.int64, device=DEVICE)))
    text = format_kernel(bound.analyze(tc.Config()).kernels[0])
    assert "if %" in text and "yield y" in text and "else:" in text


# -- loops unrolled while compiling ------------------------------------------------------------


@tc.kernel
def unrolled(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    for tile in tc.tile(m):
        acc = x[tile, 0]
        for j in tc.static_range(1, n):
            acc = acc + x[tile, j] * (j + 1)
        for scale in (2.0, 0.5):
            acc = acc * scale
        for k in range(2):
            if k == 0:  # a host value in each copy: compile-time selection
                acc = acc + 1
        for _ in tc.static_range(4, step=2):  # two copies
            acc = acc + 0.5
        out[tile] = acc
    return out


@pytest.mark.parametrize("n", [1, 4])
def test_static_range_and_python_loops(n, mode) -> None:
    x = randn(13, n)
    weights = torch.arange(1, n + 1, dtype=torch.float32, device=DEVICE)
    assert_close(mode(unrolled)(x), (x * weights).sum(dim=1) + 2)


@tc.kernel
def windowed(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m], dtype=x.dtype, device=x.device)
    for tile in tc.tile(m):
        columns = []
        for j in tc.static_range(n):  # a list of tiles, built while unrolling
            columns = columns + [x[tile, j] * (j + 1)]
        pair = (columns[0],) + (columns[n - 1],)
        out[tile] = columns[n // 2] + pair[0] - pair[1]
    return out


def test_lists_of_tiles_join(mode) -> None:
    x = randn(13, 3)
    assert_close(mode(windowed)(x), x[:, 1] * 2 + x[:, 0] - x[:, 2] * 3)


def test_static_range_needs_host_ints() -> None:
    @tc.kernel
    def bad(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        for i in tc.grid(x.size(0)):
            for j in tc.static_range(n[0]):
                x[i] = x[i] + j
        return x

    with pytest.raises(exc.UnsupportedSyntax, match="static_range"):
        bad(randn(3), torch.ones(1, dtype=torch.int64, device=DEVICE))


# -- loops bounded by values read on the device ---------------------------------------------


@tc.kernel
def segment_sums(x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    b = offsets.size(0) - 1
    out = torch.zeros([b], dtype=torch.float32, device=x.device)
    counts = torch.zeros([b], dtype=torch.int64, device=x.device)
    for i in tc.grid(b):
        start, end = offsets[i], offsets[i + 1]
        acc = tc.zeros([1], dtype=torch.float32)
        for tile in tc.tile(start, end, block_size=4):
            acc = acc + x[tile].sum()
        out[i] = acc.sum()
        n = tc.zeros([1], dtype=torch.int64).sum()
        for _ in range(start, end):  # `range` over device values: a loop on the device
            n = n + 1
        counts[i] = n
    return out, counts


def test_loops_bounded_by_loaded_offsets(mode) -> None:
    x = randn(23)
    offsets = torch.tensor([0, 5, 5, 6, 23], device=DEVICE)
    sums, counts = mode(segment_sums)(x, offsets)
    expected = torch.stack([x[a:b].sum() for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
    assert_close(sums, expected)
    assert torch.equal(counts, offsets.diff())


# -- functions passed to a kernel, inlined -------------------------------------------------


@tc.kernel
def matmul(x: torch.Tensor, y: torch.Tensor, epilogue=lambda acc, tile: acc) -> torch.Tensor:
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = epilogue(acc, (tile_m, tile_n))
    return out


def gelu_ish(v: torch.Tensor, scale: float = 0.5) -> torch.Tensor:
    """A helper `def`: inlined where the kernel calls it with tiles."""
    clipped = torch.relu(v)
    return clipped * scale


def test_epilogue_lambdas_and_closures(mode) -> None:
    x, y, bias = randn(19, 7), randn(7, 11), randn(11)
    kernel = mode(matmul)
    assert_close(kernel(x, y), x @ y)
    assert_close(kernel(x, y, lambda acc, tile: acc * 2), 2 * (x @ y))
    offset = 3.0
    assert_close(
        kernel(x, y, lambda acc, tile: torch.relu(acc + bias[tile[1]]) - offset),
        torch.relu(x @ y + bias) - offset,
    )
    assert_close(kernel(x, y, lambda acc, tile: gelu_ish(acc, scale=2.0)), 2 * torch.relu(x @ y))


def test_each_function_compiles_on_its_own() -> None:
    x, y = randn(4, 3), randn(3, 5)

    def scaled(s: float):
        return lambda acc, tile: acc * s

    first, second = matmul.bind((x, y, scaled(2.0))), matmul.bind((x, y, scaled(3.0)))
    assert first is second  # the same code; the float is an argument of the kernel
    assert_close(matmul(x, y, scaled(3.0)), 3 * (x @ y))
    assert matmul.bind((x, y, lambda acc, tile: acc + 1)) is not first


def _sum_columns(acc: torch.Tensor, x: torch.Tensor, tile_m: Any, start: int, end: int) -> Any:
    """A helper holding a device loop, its carried sum returned to the caller."""
    for tile_n in tc.tile(start, end):
        acc = acc + torch.sum(x[tile_m, tile_n], -1)
    return acc


@tc.kernel
def row_sums(x: torch.Tensor, halves: bool) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        acc = tc.zeros([tile_m], dtype=torch.float32)
        half = n // 2 if halves else n
        acc = _sum_columns(acc, x, tile_m, 0, half)
        if halves:
            acc = _sum_columns(acc, x, tile_m, half, n)
        out[tile_m] = acc
    return out


@pytest.mark.parametrize("halves", [False, True])
def test_helper_with_a_loop(mode, halves: bool) -> None:
    """A loop's result returned by an inlined helper keeps its variable (it was renamed
    at the call and the generated code read an undefined name)."""
    x = randn(37, 53)
    assert_close(mode(row_sums)(x, halves), x.sum(1))
    assert_close(mode(row_sums)(x[:1, :1], halves), x[:1, :1].sum(1))


SHIFT = 1


def test_module_values_a_function_reads_are_part_of_the_key() -> None:
    global SHIFT
    x, y = randn(4, 3), randn(3, 5)

    def shifted(acc: torch.Tensor, tile: tuple) -> torch.Tensor:
        return acc + SHIFT

    assert_close(matmul(x, y, shifted), x @ y + 1)
    SHIFT = 2
    try:
        assert_close(matmul(x, y, shifted), x @ y + 2)
    finally:
        SHIFT = 1


GAIN, OFFSETS, BLOCK, WIDE = 2.0, (1, 3), 16, torch.float64
SHIFTS, TABLE = [0.0, [1.0]], {"bias": 0.0}  # changed in place below
SETTING, WEIGHTS = SimpleNamespace(gain=1.0), np.array([1.0, 0.0])


def _offset(v: torch.Tensor) -> torch.Tensor:
    return v + OFFSETS[1]


@tc.kernel
def module_constants(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=WIDE, device=x.device)
    for tile in tc.tile(x.size(0), block_size=BLOCK):
        out[tile] = (_offset(x[tile] * GAIN) + OFFSETS[0]).to(WIDE)
    return out


@tc.kernel
def module_containers(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] * SHIFTS[1][0] * SETTING.gain + SHIFTS[0] + TABLE["bias"] + WEIGHTS[1]
    return out


def test_module_lists_and_dicts_changed_in_place(mode) -> None:
    """A module-level list, dict or numpy array the kernel reads, changed in place (the
    same object), or an object's attribute: the next call computes with the new values
    (compiled code kept the first ones)."""
    x = randn(37)
    mode(module_containers)
    assert_close(module_containers(x), x)
    try:
        SHIFTS[1][0], TABLE["bias"] = 3.0, 0.5
        assert_close(module_containers(x), x * 3 + 0.5)
        SHIFTS[0] = -1.0
        assert_close(module_containers(x), x * 3 - 0.5)
        SETTING.gain = 2.0
        assert_close(module_containers(x), x * 6 - 0.5)
        WEIGHTS[1] = 0.25
        assert_close(module_containers(x), x * 6 - 0.25)
    finally:
        SHIFTS[:], TABLE["bias"], SETTING.gain = [0.0, [1.0]], 0.0, 1.0
        WEIGHTS[1] = 0.0
    assert_close(module_containers(x), x)
    assert_close(module_containers(x[:1]), x[:1])


def test_module_constants_are_read_again_at_each_call(mode) -> None:
    """Module-level numbers and tuples the kernel, its helpers and its host code read are
    compiled in, and the kernel is specialized on them: set anew, the next call computes
    with the new values (it ran the first values' kernel: a wrong answer, in both modes)."""
    global GAIN, OFFSETS, BLOCK, WIDE
    x = randn(37)
    mode(module_constants)
    assert_close(module_constants(x), (x * 2 + 3 + 1).double())
    try:
        WIDE = torch.float16  # alone: a dtype is a constant too
        assert module_constants(x).dtype == torch.float16
        GAIN, OFFSETS, BLOCK = 0.5, (-1.0, 10), 8
        assert_close(module_constants(x), (x * 0.5 + 10 - 1.0).half())
        GAIN = float("nan")
        assert module_constants(x).isnan().all()
    finally:
        GAIN, OFFSETS, BLOCK, WIDE = 2.0, (1, 3), 16, torch.float64
    assert_close(module_constants(x), (x * 2 + 3 + 1).double())
    assert_close(module_constants(x[:0]), x[:0].double())


def test_closure_values_rebound_or_changed_in_place(mode) -> None:
    """A kernel made in a function reads its closure's values: rebound (`nonlocal`) or
    changed in place, the next call computes with the new ones (both modes kept the first)."""
    gain, offsets = 2.0, [0.0]

    @tc.kernel
    def scaled(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in tc.tile(x.size(0)):
            out[tile] = x[tile] * gain + offsets[0]
        return out

    def set_gain(value: float) -> None:
        nonlocal gain
        gain = value

    x = randn(37)
    mode(scaled)
    assert_close(scaled(x), x * 2)
    set_gain(-1.0)
    assert_close(scaled(x), -x)
    offsets[0] = 0.5
    assert_close(scaled(x), 0.5 - x)
    assert_close(scaled(x[:0]), x[:0])


# -- host code reading values of tensors ------------------------------------------------------


@tc.kernel
def first_n(x: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    n = int(sizes[1].item())  # specializes the kernel on this value
    out = torch.zeros([n], dtype=x.dtype, device=x.device)
    for tile in tc.tile(n):
        out[tile] = x[tile] * 2
    return out


def test_item_in_host_code_specializes_on_the_value(mode) -> None:
    x = randn(20)
    kernel = mode(first_n)
    for n in (7, 13, 7):
        sizes = torch.tensor([0, n, 5], device=DEVICE)
        assert_close(kernel(x, sizes), 2 * x[:n])


@tc.kernel
def reads_a_sum(x: torch.Tensor) -> torch.Tensor:
    n = int(x.sum().item())
    out = torch.zeros([n], device=x.device)
    for tile in tc.tile(n):
        out[tile] = 1.0
    return out


def test_item_of_a_computed_value_is_a_clear_error() -> None:
    with pytest.raises(exc.HostCodeError, match="pass the value as an int") as info:
        reads_a_sum(torch.ones(3, device=DEVICE))
    assert "n = int(x.sum().item())" in str(info.value)


@tc.kernel
def rows_by_flag(x: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for i in tc.grid(m):
        row = x[i, :]
        if flags[i] > 0:
            row = row / row.sum()
            out[i, :] = row  # stored twice where the flag is set: the same values
        out[i, :] = row
    return out


@pytest.mark.parametrize("reduction_loops", [None, 4])
def test_scalar_if_on_a_chunked_row(reduction_loops, mode) -> None:
    x, flags = randn(5, 9).abs() + 0.1, torch.tensor([1, 0, 1, 1, 0], device=DEVICE)
    kernel = tc.kernel(rows_by_flag.fn, config=tc.Config(reduction_loops=[reduction_loops]))
    expected = torch.where(flags[:, None] > 0, x / x.sum(dim=1, keepdim=True), x)
    assert_close(mode(kernel)(x, flags), expected)
    if reduction_loops is None:
        assert "    if " in kernel.bind((x, flags)).to_triton_code(kernel.config)


# -- written in Helion's dialect -----------------------------------------------------------


def test_a_helion_kernel_with_control_flow_ports_by_its_imports(mode) -> None:
    import tilecraft as helion
    import tilecraft.language as hl

    @helion.kernel(static_shapes=True)
    def fused(x: torch.Tensor, flags: torch.Tensor, epilogue=lambda acc, tile: acc) -> torch.Tensor:
        m, n = x.size()
        out = torch.empty_like(x)
        for tile_m in hl.tile(m):
            acc = x[tile_m, :]
            for _ in hl.static_range(2):
                acc = acc * 2
            if flags[tile_m.begin] > 0:
                acc = acc + 1
            if acc < 0:
                acc = -acc
            out[tile_m, :] = epilogue(acc, (tile_m,))
        return out

    x = randn(9, 6)
    flags = torch.ones(9, dtype=torch.int64, device=DEVICE)
    expected = (4 * x + 1).abs() - 1
    assert_close(mode(fused)(x, flags, lambda acc, tile: acc - 1), expected)


@tc.kernel
def positive_chunks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.size()
    sums = torch.zeros([m], dtype=torch.float32, device=x.device)
    hits = torch.zeros([m], dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        acc = tc.zeros([tile_m], dtype=torch.float32)
        for tile_n in tc.tile(n, block_size=4):
            rows = x[tile_m, tile_n].sum(dim=1)
            if rows > 0:  # a tile condition inside a loop: the accumulator merges each trip
                acc = acc + rows
        sums[tile_m] = acc
        if acc > 1:
            tc.atomic_add(hits, [tile_m], 1.0)  # masked by the condition
    return sums, hits


def test_tile_if_in_a_loop_and_a_masked_atomic(mode) -> None:
    x = randn(21, 13)
    chunks = x.split(4, dim=1)
    expected = sum(c.sum(dim=1).clamp(min=0) for c in chunks)
    sums, hits = mode(positive_chunks)(x)
    assert_close(sums, expected)
    assert_close(hits, (expected > 1).float())


def test_tuning_features_look_inside_branches() -> None:
    from tilecraft.autotune.features import describe, features
    from tilecraft.autotune.llm.prompt import ir_summary

    @tc.kernel
    def loop_in_a_branch(x: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
        m, n = x.size()
        out = torch.zeros([m], device=x.device)
        for tile_m in tc.tile(m):
            acc = tc.zeros([tile_m])
            if flags[tile_m.begin] > 0:
                for tile_n in tc.tile(n):
                    acc = acc + x[tile_m, tile_n].sum(dim=1)
            out[tile_m] = acc
        return out

    bound = loop_in_a_branch.bind((randn(8, 8), torch.ones(8, dtype=torch.int64, device=DEVICE)))
    desc = describe(bound)
    assert desc["depth"] == 1 and features(desc, bound.default_config)
    assert "device loop" in ir_summary(bound)
