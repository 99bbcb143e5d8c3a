"""Idioms of Helion's examples that tilecraft got wrong or refused (found porting
flex_attention, fp8_gemm_blockwise and gdn_fwd_o): each against PyTorch in both modes."""

from __future__ import annotations

import collections
import dataclasses
import math

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft import exc
from tilecraft.testing import check_modes, run_mode


@tc.kernel
def group_scaled_mm(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, group: int):
    """out[i] = scale[i // group] * (x[i] @ w): a row tile must stay within one group."""
    m = x.size(0)
    out = torch.empty(m, w.size(1), device=x.device)
    rows = tc.register_block_size(group)
    for tm in tc.tile(m, block_size=rows):
        acc = tc.dot(x[tm, :], w[:, :], out_dtype=torch.float32)
        out[tm, :] = acc * scale[tm.begin // group]
    return out


@pytest.mark.parametrize("group", [4, 2, 1])
def test_register_block_size_keeps_its_maximum_on_a_product(group: int) -> None:
    """The product's tiles were at least 16 rows whatever the maximum: every row past the
    first group took the first group's scale."""
    x, w = torch.randn(12, 24), torch.randn(24, 5)
    scale = torch.randn(12 // group)
    check_modes(
        group_scaled_mm,
        (x, w, scale, group),
        lambda x, w, s, g: s.repeat_interleave(g)[:, None] * (x @ w),
    )
    sizes = group_scaled_mm.bind((x, w, scale, group)).default_config.to_dict()["block_sizes"]
    assert sizes[0] <= group


def test_the_tuner_keeps_a_registered_maximum_too() -> None:
    from tilecraft.autotune.space import ConfigSpace

    args = (torch.randn(12, 24), torch.randn(24, 5), torch.randn(3), 4)
    bound = group_scaled_mm.bind(args)
    space = ConfigSpace(bound.spec, bound.default_config)
    knob = next(k for k in space.knobs if k.field == "block_sizes" and k.index == 0)
    assert max(knob.choices) <= 4


@tc.kernel
def window_sum(x: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    out = torch.zeros(1, device=x.device)
    for t in tc.tile(x.size(0), block_size=4):
        if lo <= t.begin < hi:
            tc.atomic_add(out, [torch.zeros_like(t.index)], x[t])
    return out


@pytest.mark.parametrize("lo, hi", [(4, 12), (0, 20), (8, 8), (12, 4)])
def test_a_chained_comparison_of_scalars(lo: int, hi: int) -> None:
    x = torch.randn(20)
    expected = x[lo:hi].sum().reshape(1) if lo < hi else torch.zeros(1)
    check_modes(window_sum, (x, lo, hi), lambda *a: expected)


@tc.kernel
def between(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in tc.tile(x.size(0)):
        out[t] = torch.where(0 < x[t] < 1, x[t], 0.0)
    return out


def test_a_chained_comparison_of_tiles_is_refused_in_both_modes() -> None:
    with pytest.raises(exc.UnsupportedSyntax, match="chained comparisons of tiles"):
        run_mode(between, (torch.randn(7),), "triton")
    with pytest.raises(RuntimeError, match="ambiguous"):
        run_mode(between, (torch.randn(7),), "eager")


@tc.kernel
def add_positions(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in tc.tile(x.size(0)):
        out[t] = x[t] + (t.begin + tc.arange(t.block_size))
    return out


@pytest.mark.parametrize("n", [10, 1, 33])
def test_begin_plus_arange_of_the_block_size_is_the_tiles_index(n: int) -> None:
    x = torch.randn(n)
    check_modes(add_positions, (x,), lambda x: x + torch.arange(n))


@tc.kernel
def chunks_of_six(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for r in tc.grid(x.size(0)):
        for t in tc.tile(r * 6, r * 6 + 6, block_size=6):
            out[r, t] = x[r, t] * 2
    return out


def test_a_block_size_not_a_power_of_two_on_device_bounds_is_refused() -> None:
    """It reached Triton, whose interpreter raised on `tl.arange(0, 6)`."""
    with pytest.raises(exc.InvalidConfig, match="must be a power of two, got 6"):
        run_mode(chunks_of_six, (torch.randn(3, 18),), "triton")


@tc.kernel
def registers_eight(q: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(q.size(), dtype=torch.int32, device=q.device)
    rows = tc.register_block_size(8)
    for tb, tm in tc.tile(q.size(), block_size=[1, rows]):
        out[tb, tm] = (tm.block_size + 0 * tm.index)[None, :]
    return out


def test_eager_mode_keeps_a_registered_maximum_without_a_config() -> None:
    from tilecraft.language import state

    with state.running_eagerly(state.EagerContext(torch.device("cpu"), block_size=32)):
        assert tc.register_block_size(8) == 8
        assert tc.register_block_size(100) == 32
    assert int(run_mode(registers_eight, (torch.randn(2, 13),), "eager").max()) <= 8


@tc.kernel
def gate_times_up(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A fused SwiGLU projection: `w` holds the gate's columns, then the up projection's;
    each reads its half as `w[tk, s : s + tile.block_size]`."""
    m, k = x.size()
    n = w.size(1) // 2
    out = torch.empty(m, n, device=x.device)
    for tm, tn in tc.tile([m, n]):
        gate = tc.zeros([tm, tn], dtype=torch.float32)
        up = tc.zeros([tm, tn], dtype=torch.float32)
        for tk in tc.tile(k):
            up_begin = tn.begin + n
            gate = tc.dot(x[tm, tk], w[tk, tn.begin : tn.begin + tn.block_size], acc=gate)
            up = tc.dot(x[tm, tk], w[tk, up_begin : up_begin + tn.block_size], acc=up)
        out[tm, tn] = torch.nn.functional.silu(gate) * up
    return out


@pytest.mark.parametrize("m, k, n", [(19, 40, 11), (1, 16, 1), (33, 7, 24)])
def test_a_slice_of_a_tiles_block_size_from_a_computed_start(m: int, k: int, n: int) -> None:
    x, w = torch.randn(m, k), torch.randn(k, 2 * n)

    def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        both = x @ w
        return torch.nn.functional.silu(both[:, :n]) * both[:, n:]

    check_modes(gate_times_up, (x, w), reference)


@tc.kernel
def heads_as_rows(q: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """dense_gdpa's shape: a one-sequence tile's heads flattened into rows of one product,
    then unflattened back (`[ts, h, tq, d] -> [ts * h, tq, d]`)."""
    b, h, m, d = q.shape
    out = torch.empty(b, h, m, w.size(1), device=q.device)
    for ts, tq in tc.tile([b, m], block_size=[1, None]):
        rows = q[ts, :, tq, :].flatten(0, 1)  # [h, tq, d]: the sequence tile holds one
        mixed = torch.matmul(rows, w[None, :, :].expand(h, d, w.size(1)))
        out[ts, :, tq, :] = mixed.unflatten(0, [ts, h])
    return out


@pytest.mark.parametrize("batch, seq", [(3, 5), (1, 1), (2, 17)])
def test_flatten_merges_a_tile_holding_one_position(batch: int, seq: int) -> None:
    q, w = torch.randn(batch, 2, seq, 4), torch.randn(4, 3)
    check_modes(heads_as_rows, (q, w), lambda q, w: q @ w)


@tc.kernel
def flattens_a_wide_tile(q: torch.Tensor) -> torch.Tensor:
    out = torch.empty(q.size(0) * q.size(1), device=q.device)
    for ts in tc.tile(q.size(0), block_size=2):
        out[ts.begin * q.size(1) : ts.begin * q.size(1) + 6] = q[ts, :].flatten()
    return out


def test_flatten_still_refuses_a_tile_of_several_positions() -> None:
    with pytest.raises(exc.UnsupportedOperation, match="would merge a tile's dim"):
        run_mode(flattens_a_wide_tile, (torch.randn(4, 3),), "triton")


@tc.kernel
def chunk_products(a: torch.Tensor, x: torch.Tensor, chunk: int) -> torch.Tensor:
    """Each chunk's `[C, C]` block of `a` times the chunk's rows of `x`: the product's inner
    dims are `a`'s whole dim of C and the rows of a `block_size=C` tile (gdn's w and u)."""
    chunk = tc.specialize(chunk)
    out = torch.empty_like(x)
    for t in tc.tile(x.size(0), block_size=chunk):
        out[t, :] = tc.dot(a[t, :], x[t, :])
    return out


@pytest.mark.parametrize("rows", [8, 10, 1])
def test_a_product_over_a_tile_of_the_whole_dims_size(rows: int) -> None:
    a, x = torch.randn(rows, 4), torch.randn(rows, 3)

    def reference(a: torch.Tensor, x: torch.Tensor, chunk: int) -> torch.Tensor:
        padded = torch.cat([x, torch.zeros(-rows % chunk, 3)])  # a short chunk's rows read 0
        parts = [a[i : i + chunk] @ padded[i : i + chunk] for i in range(0, rows, chunk)]
        return torch.cat(parts)

    check_modes(chunk_products, (a, x, 4), reference)


@tc.kernel
def rows_of_a_registered_block(x: torch.Tensor) -> torch.Tensor:
    rows_per = tc.register_block_size(4, 16)
    out = torch.zeros_like(x)
    for _ in tc.grid(1):
        rows = tc.arange(rows_per)  # the dim of `tc.zeros([rows_per])`
        acc = tc.zeros([rows_per], dtype=torch.float32)
        acc = acc + tc.load(x, [rows], extra_mask=rows < x.size(0))
        tc.store(out, [rows], acc, extra_mask=rows < x.size(0))
    return out


def test_arange_of_a_registered_block_size_meets_zeros_of_it() -> None:
    check_modes(rows_of_a_registered_block, (torch.randn(3),), lambda x: x)


@tc.kernel
def registered_over_all(x: torch.Tensor) -> torch.Tensor:
    n = x.size(0)
    rows = tc.register_block_size(n)
    out = torch.empty_like(x)
    for t in tc.tile(n, block_size=rows):
        acc = tc.zeros([rows], dtype=torch.float32)
        acc += x[t]
        out[t] = acc
    return out


@pytest.mark.parametrize("n", [0, 1, 5])
def test_register_block_size_of_a_dim_of_zero(n: int) -> None:
    """A maximum of 0 was read as no maximum (1024), a dim other than the tile's."""
    check_modes(registered_over_all, (torch.randn(n),), lambda x: x)


@tc.kernel
def indexed_by_lists(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm, tn in tc.tile(x.size()):
        where = [tm, tn]
        out[where] = x[where] + y[[tm, tn]]
    return out


def test_a_list_of_tiles_indexes_as_a_tuple() -> None:
    """`x[[tm, tn]]` as `x[tm, tn]` (Helion's template_via_closure): eager mode raised."""
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    check_modes(indexed_by_lists, (x, y), lambda x, y: x + y)


@tc.kernel
def scaled_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm in tc.tile(x.size(0)):
        ramp = tc.arange(x.size(1)).to(torch.float32)[None, :]
        out[tm, :] = x[tm, :] * w.to(torch.float32) + ramp.broadcast_to(tm, x.size(1))
    return out


def test_a_whole_host_tensor_and_broadcast_to_sizes() -> None:
    """`w.to(...)` of a whole host tensor reads it as `w[:]` does; `broadcast_to(t, n)`
    takes its sizes as arguments: compiled code refused both, eager mode ran them."""
    x, w = torch.randn(5, 7), torch.randn(7, dtype=torch.float16)
    check_modes(scaled_rows, (x, w), lambda x, w: x * w.float() + torch.arange(7.0))


@tc.kernel
def reduce_rows(x: torch.Tensor, fn: object) -> torch.Tensor:
    out = torch.empty([x.size(0)], dtype=torch.float32, device=x.device)
    for t in tc.tile(x.size(0)):
        out[t] = fn(x[t, :], dim=-1)
    return out


def test_each_builtin_passed_as_an_argument_compiles_its_own_kernel() -> None:
    """After `torch.amax`, `torch.sum` ran amax: builtins shared one specialization."""
    x = torch.randn(7, 13)
    for fn in (torch.amax, torch.sum, torch.amin):
        check_modes(reduce_rows, (x, fn), lambda x, fn: fn(x, dim=-1))


@tc.kernel
def evens_counts_and_fills(x: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(x.size(0), 4, device=x.device)
    for t in tc.tile(x.size(0), block_size=4):
        evens = tc.arange(0, 8, step=2).to(torch.float32)  # 0, 2, 4, 6
        tiles = t.count + tc.zeros([t], dtype=torch.float32)  # how many tiles the loop runs
        filled = tc.full([t, 4], fill[0], dtype=torch.float32)  # a fill read on the device
        out[t, :] = x[t, None] * evens[None, :] + tiles[:, None] + filled
    return out


@pytest.mark.parametrize("n, value", [(9, 0.25), (1, math.nan), (4, -math.inf), (0, 1.0)])
def test_arange_steps_tile_count_and_a_fill_read_on_the_device(n: int, value: float) -> None:
    x, fill = torch.randn(n), torch.tensor([value])
    count = -(-n // 4)
    check_modes(
        evens_counts_and_fills,
        (x, fill),
        lambda x, f: x[:, None] * torch.arange(0.0, 8.0, 2.0) + count + f[0],
    )


@tc.kernel
def spin_locks(lock: torch.Tensor) -> torch.Tensor:
    """Helion's lock: a `while` on an atomic of a `block_size=1` tile (one value)."""
    for idx in tc.tile(lock.size(0), block_size=1):
        while tc.atomic_cas(lock, [idx], 0, 1) == 1:
            pass
        tc.atomic_cas(lock, [idx], 1, 2)
    return lock


def test_a_while_on_a_tile_holding_one_position() -> None:
    lock = torch.zeros(5, dtype=torch.int32)
    check_modes(spin_locks, (lock,), lambda lock: torch.full((5,), 2, dtype=torch.int32))


@tc.kernel
def rows_and_ones(dst: torch.Tensor, row: torch.Tensor, ones: torch.Tensor) -> tuple:
    for i in tc.grid(dst.size(0)):
        dst[i] = row  # a whole host tensor stored at a grid index
        ones[i] = dst[i : i + 1, 0]  # a [1] tile stored into one element, as PyTorch does
    return dst, ones


def test_stores_of_a_whole_host_tensor_and_of_a_size_one_tile() -> None:
    dst, row, ones = torch.zeros(4, 3), torch.randn(3), torch.zeros(4)
    check_modes(rows_and_ones, (dst, row, ones), lambda d, r, o: (r.expand(4, 3), r[0].expand(4)))


@tc.kernel
def tile_offsets(x: torch.Tensor, shift: int) -> torch.Tensor:
    """Helion's `x[tile + k]`: a tile in arithmetic is its indices, in loads and stores."""
    out = torch.zeros(x.size(0) + 3, x.size(1), dtype=x.dtype, device=x.device)
    for tm, tn in tc.tile(x.size()):
        out[tm + 3, tn] = x[tm, tn] + x[shift + tm, tn] * 2 + x[tm * 2 - 1, tn]
    return out


def _tile_offsets(x: torch.Tensor, shift: int) -> torch.Tensor:
    rows = torch.arange(x.size(0))

    def read(index: torch.Tensor) -> torch.Tensor:  # rows past either end read 0
        ok = (index >= 0) & (index < x.size(0))
        return torch.where(ok[:, None], x[index.clamp(0, max(x.size(0) - 1, 0))], 0)

    out = torch.zeros(x.size(0) + 3, x.size(1), dtype=x.dtype)
    out[3:] = x + read(rows + shift) * 2 + read(rows * 2 - 1)
    return out


@pytest.mark.parametrize(("rows", "shift"), [(13, 4), (1, 0), (0, 2), (20, 25)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_tile_plus_an_offset_indexes_as_its_indices(
    rows: int, shift: int, dtype: torch.dtype
) -> None:
    x = torch.randn(rows, 5).to(dtype)
    if rows > 2:
        x[1, 2], x[2, 0] = float("nan"), float("-inf")
    check_modes(tile_offsets, (x, shift), _tile_offsets, dtype=dtype)


@tc.kernel
def allocates_on_the_cpu(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(x.size(0))  # no device=: on the CPU
    for t in tc.tile(x.size(0)):
        out[t] = x[t] * 2
    return out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CPU tensor given to a GPU launch")
def test_a_cpu_tensor_given_to_a_gpu_launch_is_named() -> None:
    with pytest.raises(exc.HostCodeError, match="`out` passed to device code is on the CPU"):
        allocates_on_the_cpu(torch.randn(5, device="cuda"))


@dataclasses.dataclass
class Pair:
    a: torch.Tensor
    b: torch.Tensor


Named = collections.namedtuple("Named", ["a", "b"])


@tc.kernel
def add_held(pair: object, shift: tuple) -> torch.Tensor:
    a, b = (pair["a"], pair["b"]) if isinstance(pair, dict) else (pair[0], pair[1])
    out = torch.empty_like(a)
    for t in tc.tile(a.size(0)):
        out[t] = a[t] + b[t] * shift[0]
    return out


@tc.kernel
def add_fields(pair: Pair) -> torch.Tensor:
    out = torch.empty_like(pair.a)
    for t in tc.tile(pair.a.size(0)):
        out[t] = pair.a[t] + pair.b[t]
    return out


@pytest.mark.parametrize("box", ["list", "tuple", "dict", "namedtuple"])
def test_tensors_and_ints_in_a_container_are_specialized_on(box: str) -> None:
    """Tensors held in a list, tuple, dict or namedtuple argument, then others of another
    shape or stride: each call compiles for its own (a kernel compiled for 13 elements had
    written 27 of 40 wrong, and past the end of smaller ones); ints in a tuple too."""
    make = {"list": list, "tuple": tuple, "namedtuple": lambda p: Named(*p)}
    make["dict"] = lambda p: {"a": p[0], "b": p[1]}
    for n, stride, shift in ((13, 1, 2), (40, 1, 2), (5, 1, 3), (9, 2, 3), (1, 1, 3), (0, 1, 3)):
        a, b = torch.randn(n * stride, device=DEVICE)[::stride], torch.randn(n, device=DEVICE)
        if n > 2:
            a[0], b[1] = float("nan"), float("inf")
        got = add_held(make[box]((a, b)), (shift, 0))
        torch.testing.assert_close(got, a + b * shift, equal_nan=True)
    for n in (13, 40, 5):
        a, b = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
        torch.testing.assert_close(add_fields(Pair(a, b)), a + b)


@tc.kernel
def weighted_parts(parts: tuple, scales: list) -> torch.Tensor:
    """Tensors of a tuple argument read in device code: by position, in a loop over the
    tuple and through `zip` (each becomes an argument of the launch)."""
    out = torch.zeros_like(parts[0])
    for t in tc.tile(out.size(0)):
        acc = out[t] + parts[1][t]
        for p, s in zip(parts, scales, strict=True):
            acc = acc + p[t] * s
        for p in parts:
            acc = acc - p[t]
        out[t] = acc
    return out


@pytest.mark.parametrize("n", [7, 1, 0])
def test_tensors_of_a_tuple_read_in_device_code(n: int) -> None:
    parts = (torch.randn(n), torch.randn(n), torch.randn(n))
    if n > 2:
        parts[0][2] = float("nan")

    def reference(parts: tuple, scales: list) -> torch.Tensor:
        return parts[1] + sum(p * s for p, s in zip(parts, scales, strict=True)) - sum(parts)

    check_modes(weighted_parts, (parts, [1.0, 2.0, 3.0]), reference)


BIAS = torch.ones(4)


@tc.kernel
def reads_a_module_tensor(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for t in tc.tile(x.size(0)):
        out[t] = x[t] + BIAS[t]
    return out


def test_a_module_level_tensor_is_refused_by_name() -> None:
    with pytest.raises(exc.UnsupportedOperation, match="`BIAS` is a tensor that device code"):
        reads_a_module_tensor.bind((torch.randn(4),))


@tc.kernel
def row_sums_in_one_tile(w: torch.Tensor) -> torch.Tensor:
    """`register_block_size(least, most)` with both the row's power of two: one tile a row
    (each row's tile overwrites its sum, so a row split in two was summed in part)."""
    rows, d = w.shape
    out = torch.empty([rows], dtype=torch.float32, device=w.device)
    whole = tc.register_block_size(tc.next_power_of_2(d), tc.next_power_of_2(d))
    for tr, td in tc.tile([rows, d], block_size=[None, whole]):
        out[tr] = torch.sum(w[tr, td].float(), dim=-1)
    return out


@pytest.mark.parametrize("d", [100, 1, 33])
def test_register_block_size_keeps_its_minimum(d: int) -> None:
    w = torch.randn(3, d)
    w[1, 0] = float("inf")
    check_modes(row_sums_in_one_tile, (w,), lambda w: w.sum(-1))
    bound = row_sums_in_one_tile.bind((w,))
    assert bound.default_config.to_dict()["block_sizes"][0] == tc.next_power_of_2(d)
    from tilecraft.autotune.space import ConfigSpace

    space = ConfigSpace(bound.spec, bound.default_config)
    knob = next(k for k in space.knobs if k.field == "block_sizes" and k.index == 0)
    assert min(knob.choices) == tc.next_power_of_2(d)


@tc.kernel
def every_step(x: torch.Tensor, step: int) -> torch.Tensor:
    """`tc.grid(begin, end, step)` as the launch, with a step per dim, and nested (the step
    was dropped when compiled: every index was run)."""
    out = torch.zeros_like(x)
    for i, j in tc.grid([1, 0], x.size(), step=[step, 2]):
        out[i, j] = x[i, j] * 2
    for i in tc.grid(x.size(0), step=step):
        for j in tc.grid(1, x.size(1), 3):
            out[i, j] = out[i, j] + 100
    return out


def _every_step(x: torch.Tensor, step: int) -> torch.Tensor:
    out = torch.zeros_like(x)
    out[1::step, ::2] = x[1::step, ::2] * 2
    out[::step, 1::3] += 100
    return out


@pytest.mark.parametrize(("rows", "cols", "step"), [(7, 5, 2), (1, 1, 3), (0, 4, 2), (9, 8, 20)])
def test_grid_steps(rows: int, cols: int, step: int) -> None:
    x = torch.randn(rows, cols)
    check_modes(every_step, (x, step), _every_step)


def _sum_and_biggest(lx, li, rx, ri):  # type: ignore[no-untyped-def]
    return lx + rx, torch.maximum(li, ri)


@tc.kernel
def reduce_pairs(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`tc.reduce` of a tuple of tiles (compiled code failed on more than one operand)."""
    sums = torch.empty([x.size(0)], device=x.device)
    tops = torch.empty([x.size(0)], device=x.device)
    for r in tc.tile(x.size(0)):
        s, t = tc.reduce(_sum_and_biggest, (x[r, :], y[r, :]), dim=1, other=(0.0, -1e30))
        sums[r], tops[r] = s, t
    return sums, tops


@pytest.mark.parametrize("cols", [5, 1, 17])
def test_reduce_of_a_tuple(cols: int) -> None:
    x, y = torch.randn(3, cols), torch.randn(3, cols)
    check_modes(reduce_pairs, (x, y), lambda x, y: (x.sum(1), y.amax(1)))


def _running_argmax(left, right):  # type: ignore[no-untyped-def]
    """Helion's tuple format: each side a tuple (value, index)."""
    (lv, li), (rv, ri) = left, right
    take = rv > lv
    return torch.where(take, rv, lv), torch.where(take, ri, li)


@tc.kernel
def argmax_both_ways(x: torch.Tensor, combine: object) -> tuple[torch.Tensor, torch.Tensor]:
    running = torch.zeros_like(x)
    last = torch.zeros([x.size(0)], device=x.device)
    for r in tc.tile(x.size(0)):
        v = x[r, :]
        where = tc.arange(x.size(1)).float()[None, :].expand_as(v)
        _, running[r, :] = tc.associative_scan(combine, (v, where), dim=1)
        _, last[r] = tc.reduce(_running_argmax, (v, where), dim=1)
    return running, last


def _argmax_both_ways(x: torch.Tensor, combine: object) -> tuple[torch.Tensor, torch.Tensor]:
    best = torch.cummax(x, 1).values
    firsts = [
        [int((x[r, : c + 1] == best[r, c]).nonzero()[0]) for c in range(x.size(1))]
        for r in range(x.size(0))
    ]
    return torch.tensor(firsts, dtype=x.dtype).reshape(x.shape), x.argmax(1).to(x.dtype)


@pytest.mark.parametrize("cols", [5, 1, 19])
def test_combine_functions_in_helions_tuple_format(cols: int) -> None:
    x = torch.randn(3, cols)
    check_modes(argmax_both_ways, (x, _running_argmax), _argmax_both_ways)


@tc.kernel
def interleave_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """Rows interleaved with their negatives by a stack and a reshape to block sizes (int4
    unpacking's shape): eager mode padded the wrong dim of a tile cut short."""
    m, n = x.shape
    out = torch.zeros(2 * m, n, device=x.device)
    for tm, tn in tc.tile([m, n], block_size=[rows, 16]):
        v = x[tm, tn]
        both = torch.stack([v, -v], dim=1).reshape(tm.block_size * 2, tn.block_size)
        out[tm.begin * 2 + tc.arange(tm.block_size * 2), tn] = both
    return out


@pytest.mark.parametrize(
    ("m", "n", "rows"), [(4, 4, 2), (2, 1, 1), (5, 7, 2), (3, 3, 1), (4, 4, 1)]
)
def test_a_stack_reshaped_to_block_sizes_on_a_short_tile(m: int, n: int, rows: int) -> None:
    x = torch.randn(m, n)
    check_modes(interleave_rows, (x, rows), lambda x, r: torch.stack([x, -x], 1).reshape(2 * m, n))


@tc.kernel
def sum_of_exps(x: torch.Tensor) -> torch.Tensor:
    """A `register_block_size` accumulator over a row cut short at its end: compiled code
    added exp(0) in the lanes past the row's end (a softmax's denominator too large)."""
    m, n = x.shape
    bn = tc.register_block_size(n)
    out = torch.empty(m, device=x.device)
    for tm in tc.tile(m):
        acc = tc.zeros([tm, bn])
        for tn in tc.tile(n, block_size=bn):
            acc += torch.exp(x[tm, tn])
        out[tm] = acc.sum(-1)
    return out


@pytest.mark.parametrize("n", [5, 13, 16, 1, 0])
def test_an_accumulator_keeps_the_lanes_past_its_rows_end(n: int) -> None:
    x = torch.randn(3, n)
    if n:
        x[0, 0] = -float("inf")
    config = tc.Config(block_sizes=[8, 4])
    check_modes(sum_of_exps, (x,), lambda x: x.exp().sum(-1), config=config)


@tc.kernel
def product_of_parts(parts: tuple, width: int) -> torch.Tensor:
    """A list of tiles built in device code: repeated, assigned by position, appended to."""
    out = torch.empty_like(parts[0])
    for t in tc.tile(out.size(0)):
        cache = [tc.zeros([t])] * width
        for i, p in enumerate(parts):
            cache[i] = p[t]
        grown = []
        for p in parts:
            grown.append(p[t] + 1)
        out[t] = cache[0] * cache[1] + cache[width - 1] + grown[0] * grown[1]
    return out


@pytest.mark.parametrize("n", [5, 1, 0])
def test_a_list_of_tiles_built_in_device_code(n: int) -> None:
    a, b = torch.randn(n), torch.randn(n)

    def reference(parts: tuple, width: int) -> torch.Tensor:
        a, b = parts
        return a * b + 0 + (a + 1) * (b + 1)

    check_modes(product_of_parts, ((a, b), 3), reference)


@tc.kernel
def _plus(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


@tc.kernel
def totals_by_a_kernel_combine(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A combine function decorated as a kernel, as Helion allows: its function."""
    totals = torch.empty(x.size(0), device=x.device)
    running = torch.empty_like(x)
    for r in tc.tile(x.size(0)):
        totals[r] = tc.reduce(_plus, x[r, :], dim=1)
        running[r, :] = tc.associative_scan(_plus, x[r, :], dim=1)
    return totals, running


@pytest.mark.parametrize("cols", [4, 1, 13])
def test_a_combine_function_decorated_as_a_kernel(cols: int) -> None:
    x = torch.randn(3, cols)
    check_modes(totals_by_a_kernel_combine, (x,), lambda x: (x.sum(1), x.cumsum(1)))


@tc.kernel
def rows_plus_one(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`tc.zeros([t, next_power_of_2(n)])` meeting a whole row `x[t, :]` of n (Helion's
    spelling): the padded dim is the row's, its lanes past n masked."""
    out = torch.empty_like(x)
    sums = torch.empty(x.size(0), device=x.device)
    for t in tc.tile(x.size(0)):
        acc = tc.zeros([t, tc.next_power_of_2(x.size(1))])
        acc = acc + x[t, :]
        out[t, :] = acc + 1
        sums[t] = acc.sum(-1)
    return out, sums


@pytest.mark.parametrize("n", [19, 1, 32, 3])
def test_a_row_padded_to_a_power_of_two(n: int) -> None:
    x = torch.randn(37, n)
    x[0, 0] = float("nan")
    check_modes(rows_plus_one, (x,), lambda x: (x + 1, x.sum(-1)))
