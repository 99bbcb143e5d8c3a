"""Helion's atomics beyond `atomic_add` (`hl.atomic_max`, `atomic_min`, `atomic_and`,
`atomic_or`, `atomic_xor`, `atomic_xchg`, `atomic_cas`), written as Helion kernels, in both
CPU modes against PyTorch on ragged shapes: with tiles, gathers that hit a position
several times, an extra mask and an `if` on a tile; and the values every atomic returns
(those before its update, 0 in the lanes it leaves alone)."""

from __future__ import annotations

import os

import pytest
import torch

import tilecraft as helion
import tilecraft.language as hl
from tilecraft import exc
from tilecraft.ir.nodes import Value, walk_ops
from tilecraft.ir.types import TileType
from tilecraft.ir.verify import verify
from tilecraft.language.memory import ATOMICS
from tilecraft.testing import MODES, check_modes, run_mode


@helion.kernel()
def column_extremes(x: torch.Tensor, high: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    for tile_m, tile_n in hl.tile([m, n]):
        block = x[tile_m, tile_n]
        hl.atomic_max(high, [tile_n], block.amax(0), sem="relaxed")
        hl.atomic_min(low, [tile_n], block.amin(0))
    return torch.stack([high, low])


def test_atomic_max_and_min() -> None:
    x = torch.randn(45, 19)
    high, low = torch.full([19], float("-inf")), torch.full([19], float("inf"))
    check_modes(column_extremes, (x, high, low), lambda a, *_: torch.stack([a.amax(0), a.amin(0)]))


@helion.kernel()
def grouped_bits(
    x: torch.Tensor, groups: torch.Tensor, ors: torch.Tensor, ands: torch.Tensor, xors: torch.Tensor
) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        group = groups[tile]
        hl.atomic_or(ors, [group], x[tile])
        hl.atomic_and(ands, [group], x[tile])
        hl.atomic_xor(xors, [group], x[tile])
    return torch.stack([ors, ands, xors])


def _grouped_bits(x: torch.Tensor, groups: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
    out = torch.tensor([[0] * 5, [-1] * 5, [0] * 5], dtype=torch.int32)
    for value, g in zip(x.tolist(), groups.tolist(), strict=True):
        out[0, g] |= value
        out[1, g] &= value
        out[2, g] ^= value
    return out


def test_bitwise_atomics_on_repeated_positions() -> None:
    x = torch.randint(0, 1 << 20, (53,), dtype=torch.int32)
    groups = torch.randint(0, 5, (53,))
    starts = (torch.zeros(5, dtype=torch.int32), torch.full([5], -1, dtype=torch.int32))
    args = (x, groups, starts[0], starts[1], starts[0].clone())
    check_modes(grouped_bits, args, _grouped_bits)


@helion.kernel()
def claim_and_swap(x: torch.Tensor, slots: torch.Tensor, copy: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        hl.atomic_cas(slots, [tile], 0.0, x[tile])
        hl.atomic_xchg(copy, [tile], x[tile] * 2, extra_mask=x[tile] > 0)
    return torch.stack([slots, copy])


def test_atomic_cas_and_xchg() -> None:
    x = torch.randn(37)
    slots = torch.where(torch.rand(37) < 0.5, 0.0, torch.randn(37))
    copy = torch.randn(37)

    def reference(a: torch.Tensor, s: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.where(s == 0, a, s), torch.where(a > 0, a * 2, c)])

    check_modes(claim_and_swap, (x, slots, copy), reference)


@helion.kernel()
def positive_max(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        value = x[tile]
        if value > 0:
            hl.atomic_max(out, [tile.index % 4], value)
    return out


@pytest.mark.parametrize("block", [None, 8, 64])
def test_atomic_in_a_branch_on_a_tile(block: int | None) -> None:
    """Lanes meeting at one position inside an `if` on a tile: eager mode's atomic read
    each round's positions under the arm's mask again (a tile of 41 lanes in one block
    failed to broadcast)."""
    x = torch.randn(41)
    out = torch.zeros(4)

    def reference(a: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        kept = a.clamp(min=0)
        return torch.stack([kept[k::4].max() for k in range(4)])

    config = None if block is None else helion.Config(block_sizes=[block])
    check_modes(positive_max, (x, out), reference, config=config)


@helion.kernel()
def bad_sem(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        hl.atomic_min(out, [tile], x[tile], sem="sequential")
    return out


def test_bad_sem_is_refused_by_name() -> None:
    with pytest.raises(exc.UnsupportedOperation, match=r"tc.atomic_min\(sem='sequential'\)"):
        bad_sem(torch.randn(5), torch.zeros(5))


# -- the values before the update -------------------------------------------------------
@helion.kernel(config=helion.Config(block_sizes=[8, 4]))
def add_returning_old(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    olds = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n]):
        block = x[tile_m, tile_n]
        olds[tile_m, tile_n] = hl.atomic_add(out, [tile_m, tile_n], block, extra_mask=block > 0)
    return torch.stack([out, olds])


def test_atomic_add_returns_the_old_values() -> None:
    x, out = torch.randn(13, 10), torch.randn(13, 10)

    def reference(a: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return torch.stack([o + a.clamp(min=0), torch.where(a > 0, o, 0.0)])

    check_modes(add_returning_old, (x, out), reference)


@helion.kernel(config=helion.Config(block_sizes=[16]))
def lane_tickets(x: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
    tickets = torch.empty_like(x, dtype=torch.int32)
    for tile in hl.tile(x.size(0)):
        slot = torch.zeros_like(tile.index)
        tickets[tile] = hl.atomic_add(counter, [slot], 1, sem="relaxed")
    return tickets


@pytest.mark.parametrize("mode", MODES)
def test_a_counter_gives_each_lane_a_unique_ticket(mode: str) -> None:
    """Lanes meeting at one position see each other's adds in some order: the tickets are
    0, 1, ..., n - 1 in an order the hardware picks (eager mode: lane order)."""
    counter = torch.tensor([5], dtype=torch.int32)
    tickets = run_mode(lane_tickets, (torch.randn(37), counter), mode)
    assert sorted(tickets.tolist()) == list(range(5, 42))
    if mode == "eager":
        assert tickets.tolist() == list(range(5, 42))


@helion.kernel()
def program_tickets(x: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
    order = torch.full([(x.size(0) + 3) // 4], -1, dtype=torch.int64, device=x.device)
    for tile in hl.tile(x.size(0), block_size=4):  # (eager mode's tiles are 32 unless given)
        order[tile.id] = hl.atomic_add(counter, [0], 1)
    return torch.cat([order, counter])


@pytest.mark.parametrize("mode", MODES)
def test_a_scalar_counter_gives_each_program_a_ticket(mode: str) -> None:
    result = run_mode(program_tickets, (torch.randn(18), torch.zeros(1, dtype=torch.int64)), mode)
    assert sorted(result[:-1].tolist()) == list(range(5)) and result[-1] == 5


@helion.kernel()
def ranks_in_groups(groups: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    ranks = torch.empty_like(groups)
    for tile in hl.tile(groups.size(0)):
        ranks[tile] = hl.atomic_add(counts, [groups[tile]], 1)
    return ranks


@pytest.mark.parametrize("mode", MODES)
def test_lanes_at_one_position_rank_themselves(mode: str) -> None:
    """A histogram's counts, and each lane's rank among its bin's lanes: in each bin the
    ranks are 0..count-1 (eager mode: in lane order)."""
    groups = torch.randint(0, 5, (61,), dtype=torch.int32)
    ranks = run_mode(ranks_in_groups, (groups, torch.zeros(5, dtype=torch.int32)), mode)
    for g in range(5):
        mine = ranks[groups == g].tolist()
        assert sorted(mine) == list(range(len(mine)))
        if mode == "eager":
            assert mine == list(range(len(mine)))


@helion.kernel()
def claim_slots(
    x: torch.Tensor, slots: torch.Tensor, keys: torch.Tensor, owner: torch.Tensor
) -> torch.Tensor:
    found = torch.empty_like(x)
    took = torch.empty_like(keys)
    replaced = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        found[tile] = hl.atomic_cas(slots, [tile], 0.0, x[tile])
        key = keys[tile]
        took[tile] = hl.atomic_cas(owner, [tile], -1, key, extra_mask=key % 3 != 0)
        replaced[tile] = hl.atomic_xchg(slots, [tile], x[tile] * 2, extra_mask=x[tile] > 0)
    return torch.cat([found, slots, took.float(), owner.float(), replaced])


def test_atomic_cas_and_xchg_return_the_old_values() -> None:
    x = torch.randn(29)
    slots = torch.where(torch.rand(29) < 0.5, 0.0, torch.randn(29))
    keys = torch.randint(0, 100, (29,), dtype=torch.int32)
    owner = torch.where(torch.rand(29) < 0.5, -1, keys + 1).to(torch.int32)

    def reference(
        a: torch.Tensor, s: torch.Tensor, k: torch.Tensor, o: torch.Tensor
    ) -> torch.Tensor:
        claimed = torch.where(s == 0, a, s)
        live = k % 3 != 0
        took = torch.where(live, o, 0)
        owned = torch.where(live & (o == -1), k, o)
        replaced = torch.where(a > 0, claimed, 0.0)
        final = torch.where(a > 0, a * 2, claimed)
        return torch.cat([s, final, took.float(), owned.float(), replaced])

    check_modes(claim_slots, (x, slots, keys, owner), reference)


@helion.kernel()
def extremes_before(x: torch.Tensor, high: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    olds = torch.empty([2, m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        olds[0, tile_m, tile_n] = hl.atomic_max(high, [tile_m, tile_n], x[tile_m, tile_n])
        olds[1, tile_m, tile_n] = hl.atomic_min(low, [tile_m, tile_n], x[tile_m, tile_n])
    return torch.cat([olds, torch.stack([high, low])])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_atomic_max_and_min_return_the_old_values(dtype: torch.dtype) -> None:
    x = (torch.randn(11, 7) * 50).to(dtype)
    high, low = (torch.randn(11, 7) * 50).to(dtype), (torch.randn(11, 7) * 50).to(dtype)

    def reference(a: torch.Tensor, h: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
        return torch.stack([h, lo, torch.maximum(h, a), torch.minimum(lo, a)])

    check_modes(extremes_before, (x, high, low), reference)


@helion.kernel()
def bits_before(x: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    olds = torch.empty([3, x.size(0)], dtype=x.dtype, device=x.device)
    for tile in hl.tile(x.size(0)):
        olds[0, tile] = hl.atomic_or(words, [0, tile], x[tile])
        olds[1, tile] = hl.atomic_and(words, [1, tile], x[tile])
        olds[2, tile] = hl.atomic_xor(words, [2, tile], x[tile])
    return torch.cat([olds, words])


def test_bitwise_atomics_return_the_old_values() -> None:
    x = torch.randint(-(1 << 30), 1 << 30, (23,), dtype=torch.int32)
    words = torch.randint(-(1 << 30), 1 << 30, (3, 23), dtype=torch.int32)

    def reference(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.cat([w, torch.stack([w[0] | a, w[1] & a, w[2] ^ a])])

    check_modes(bits_before, (x, words), reference)


@helion.kernel()
def add_if_positive(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    olds = torch.full_like(x, -1.0)
    for tile in hl.tile(x.size(0)):
        value = x[tile]
        if value > 0:
            olds[tile] = hl.atomic_add(out, [tile], value)
    return torch.stack([out, olds])


def test_an_atomic_in_a_branch_on_a_tile_returns_the_old_values() -> None:
    x, out = torch.randn(19), torch.randn(19)

    def reference(a: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return torch.stack([o + a.clamp(min=0), torch.where(a > 0, o, -1.0)])

    check_modes(add_if_positive, (x, out), reference)


def test_an_unread_result_costs_nothing() -> None:
    """The IR keeps an atomic's result only where the kernel reads it; otherwise the
    generated line is the bare call it always was."""
    args = (torch.randn(45, 19), torch.zeros(19), torch.zeros(19))
    bound = column_extremes.bind(args)
    kernels = bound.analyze(helion.Config()).kernels
    atomics = [op for k in kernels for op in walk_ops(k.body) if op.name in ATOMICS.values()]
    assert len(atomics) == 2 and all(op.out is None for op in atomics)
    code = bound.to_triton_code()
    assert "    tl.atomic_max(" in code and "= tl.atomic_" not in code
    used = add_returning_old.bind((args[0][:13, :10], args[0][:13, :10]))
    (kernel,) = used.analyze(helion.Config()).kernels
    (atomic,) = [op for op in walk_ops(kernel.body) if op.name == "atomic_add"]
    assert atomic.out is not None and atomic.out.type.dtype == torch.float32
    assert "= tl.atomic_add(" in used.to_triton_code()


def test_the_verifier_checks_an_atomics_result() -> None:
    x = torch.randn(13, 10)
    (kernel,) = add_returning_old.bind((x, x)).analyze(helion.Config()).kernels
    (atomic,) = [op for op in walk_ops(kernel.body) if op.name == "atomic_add"]
    assert atomic.out is not None
    atomic.out = Value(TileType(torch.int32, atomic.out.type.dims), atomic.out.name)
    with pytest.raises(exc.LoweringError, match="is not the tile it accesses"):
        verify(kernel)


@helion.kernel(config=helion.Config(block_sizes=[2], reduction_loops=[8]))
def row_totals_before(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    totals = torch.empty([m], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        totals[tile_m] = hl.atomic_add(out, [tile_m, slice(None)], x[tile_m, :]).sum(1)
    return totals


def test_a_result_over_a_looped_reduction_dim_is_refused_by_name() -> None:
    """In chunks, each chunk's old values are gone after its trip (an atomic cannot be run
    again to recompute them, as a load is)."""
    x = torch.randn(4, 40)
    with pytest.raises(exc.LoweringError, match=r"reduction_loops=\[None\]"):
        run_mode(row_totals_before, (x, x.clone()), "triton")
    totals = run_mode(row_totals_before, (x, x.clone()), "eager")
    torch.testing.assert_close(totals, x.sum(1))


@helion.kernel()
def update_by_name(x: torch.Tensor, out: torch.Tensor, name: str) -> None:
    for tile in hl.tile(x.size(0)):
        getattr(hl, name)(out, [tile], x[tile])


@pytest.mark.parametrize(
    ("dtype", "name"),
    [(torch.float16, "atomic_max"), (torch.bfloat16, "atomic_min"), (torch.int8, "atomic_add"),
     (torch.int16, "atomic_or"), (torch.bool, "atomic_xchg")],
)  # fmt: skip
def test_atomics_triton_cannot_compile_for_a_dtype_are_refused(dtype, name) -> None:
    """The interpreter ran these, where Triton's GPU compiler refuses them (`atomic_max
    does not support fp16`): found by tests/test_fuzz_memory.py compiling for sm_90."""
    x = torch.zeros(5, dtype=dtype)
    with pytest.raises(exc.DtypeError, match=f"tc.{name} cannot update `out` of {dtype}"):
        update_by_name.bind((x, x.clone(), name)).to_triton_code(helion.Config())
    with pytest.raises(exc.DtypeError, match=f"tc.{name} cannot update a tensor of") as info:
        run_mode(update_by_name, (x, x.clone(), name), "eager")  # (the body alone, unbound)
    assert "getattr(hl, name)" in str(info.value)  # the user's line


def test_16_bit_float_adds_compile() -> None:
    x = torch.zeros(5, dtype=torch.float16)
    code = update_by_name.bind((x, x.clone(), "atomic_add")).to_triton_code(helion.Config())
    assert "tl.atomic_add(" in code


@helion.kernel
def add_into(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(out.size(0)):
        hl.atomic_add(out, [tile], y[tile])
    return out


def test_a_bfloat16_atomic_under_the_interpreter_is_refused_clearly() -> None:
    """Triton's interpreter failed with `ValueError('Unsupported data type')`; eager mode
    and a GPU run it."""
    y = torch.randn(5).bfloat16()
    out = torch.zeros_like(y)
    torch.testing.assert_close(run_mode(add_into, (out, y), "eager"), y)
    if os.environ.get("TILECRAFT_TEST_DEVICE", "cpu") == "cpu":
        with pytest.raises(exc.DtypeError, match="no bfloat16 atomics") as info:
            run_mode(add_into, (out, y), "triton")
        assert "hl.atomic_add(out, [tile], y[tile])" in str(info.value)
    else:
        torch.testing.assert_close(run_mode(add_into, (out, y), "triton"), y)


@helion.kernel
def add_with_sem(out: torch.Tensor, y: torch.Tensor, sem: str) -> torch.Tensor:
    for tile in hl.tile(out.size(0)):
        hl.atomic_add(out, [tile], y[tile], sem=sem)
    return out


@pytest.mark.parametrize("mode", ["eager", "triton"])
def test_an_unknown_sem_is_refused_in_both_modes(mode: str) -> None:
    y = torch.randn(5)
    torch.testing.assert_close(run_mode(add_with_sem, (torch.zeros(5), y, "relaxed"), mode), y)
    with pytest.raises(exc.UnsupportedOperation, match="sem='ERROR'") as info:
        run_mode(add_with_sem, (torch.zeros(5), y, "ERROR"), mode)
    assert "hl.atomic_add(out, [tile], y[tile], sem=sem)" in str(info.value)
