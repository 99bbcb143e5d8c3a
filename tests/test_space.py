"""Config spaces derived from the example kernels, and the tuner's trial log."""

from __future__ import annotations

import json
import random
from pathlib import Path

import layer_norm
import matmul
import pytest
import softmax_two_pass
import sum as sums
import torch

import tilecraft as tc
from tilecraft.autotune import space as spaces
from tilecraft.autotune.features import describe, features
from tilecraft.autotune.seeds import heuristic_seeds
from tilecraft.autotune.space import MAX_ELEMENTS, ConfigSpace
from tilecraft.exc import LoweringError


def space_of(kernel: tc.Kernel, args: tuple) -> ConfigSpace:
    return spaces.space_of(kernel.bind(args), on_gpu=False)


def test_matmul_space_has_the_knobs_of_its_loops_and_accesses() -> None:
    space = space_of(matmul.matmul, matmul.inputs(shape=(300, 200, 100), device="cpu"))
    names = {k.name for k in space.knobs}
    assert {
        "block_sizes[0]",
        "block_sizes[1]",
        "block_sizes[2]",
        "loop_orders[0]",
        "l2_groupings[0]",
        "pid_type",
        "num_warps",
        "num_stages",
    } <= names
    assert {"indexing[0]", "indexing[1]", "indexing[2]", "range_num_stages[0]"} <= names
    sizes = {k.name: k.choices for k in space.knobs}
    assert min(sizes["block_sizes[2]"]) == 16  # tl.dot needs 16 or more
    assert max(sizes["block_sizes[2]"]) == 256  # k = 200 rounds up to 256
    assert space.default() == space.config(space.values(space.default()))


def test_row_kernels_offer_whole_row_or_chunked_reductions() -> None:
    space = space_of(layer_norm.layer_norm, layer_norm.inputs(shape=(64, 3000), device="cpu"))
    (knob,) = [k for k in space.knobs if k.field == "reduction_loops"]
    assert knob.choices[0] is None and 2048 in knob.choices and 4096 not in knob.choices
    two_pass = space_of(softmax_two_pass.softmax_two_pass, softmax_two_pass.inputs(device="cpu"))
    assert sum(k.field == "range_unroll_factors" for k in two_pass.knobs) == 2


def test_a_reduction_that_cannot_be_looped_is_offered_whole() -> None:
    """Attention's backward sums each row of dO * O over the head dim and then uses dO in
    its key loop: looping that reduction cannot compile, so its space offers the whole row
    only (a first landscape spent 40% of its trials on such configs); the config the
    knob's chunk would give is indeed refused."""
    from tilecraft.nn.attention import attention_backward

    q = torch.empty(1, 2, 64, 128, device="meta")
    args = (q, q, q, q, q.new_empty(0), q, torch.empty(2, 1, 2, 64, device="meta"))
    bound = attention_backward.bind((*args, False, 0.1, 0, False))
    assert bound.spec.reductions == [128]
    (knob,) = [k for k in spaces.space_of(bound).knobs if k.field == "reduction_loops"]
    assert knob.choices == (None,)
    with pytest.raises(LoweringError, match="looped reduction"):
        bound.to_triton_code(tc.Config(reduction_loops=[64]))


def test_each_load_has_an_eviction_hint_knob_off_by_default() -> None:
    space = space_of(layer_norm.layer_norm, layer_norm.inputs(shape=(33, 300), device="cpu"))
    knobs = [k for k in space.knobs if k.field == "load_eviction_policies"]
    assert [k.index for k in knobs] == [0, 1, 2]  # x, weight, bias
    assert all(k.choices == (None, "first", "last") and k.default is None for k in knobs)
    assert space.default().get("load_eviction_policies") == [None, None, None]
    pasted = tc.Config(load_eviction_policies=["last", "", "first"])  # Helion's spelling
    assert space.values(space.snap(space.values(pasted)))["load_eviction_policies[0]"] == "last"


def test_launch_knobs_on_a_gpu_space_and_their_constraints() -> None:
    """Programs per SM (persistent kernels only: elsewhere the knob is dropped) and a
    register cap (never more than the SM's register file for the block's threads)."""
    bound = layer_norm.layer_norm.bind(layer_norm.inputs(shape=(33, 300), device="cpu"))
    cpu = ConfigSpace(bound.spec, bound.default_config, on_gpu=False)  # the interpreter's
    assert "maxnreg" not in {k.name for k in cpu.knobs}
    space = ConfigSpace(bound.spec, bound.default_config, on_gpu=True)
    values = space.values(space.default())
    flat = space.config({**values, "num_sm_multiplier": 4})
    assert flat.get("num_sm_multiplier") is None  # a flat launch has no programs per SM
    persistent = {**values, "pid_type": "persistent_blocked", "num_sm_multiplier": 4}
    assert space.config(persistent).get("num_sm_multiplier") == 4
    assert space.is_valid(space.config({**values, "num_warps": 16, "maxnreg": 128}))
    assert not space.is_valid(space.config({**values, "num_warps": 32, "maxnreg": 128}))


def test_random_neighbors_and_encodings_respect_the_constraints() -> None:
    space = space_of(sums.long_sum, sums.inputs(shape=(300, 5000), device="cpu"))
    rng = random.Random(0)
    for _ in range(30):
        config = space.random(rng)
        assert space.is_valid(config)
        assert len(space.encode(config)) == len(space.knobs)
        assert all(space.is_valid(n) for n in space.neighbors(config))
    values = {**space.values(space.default()), "block_sizes[0]": 4096, "block_sizes[1]": 4096}
    assert not space.is_valid(space.config(values)) and MAX_ELEMENTS < 4096 * 4096
    repaired = space.repair(values)  # shrunk until it fits the budgets
    assert space.is_valid(repaired) and max(repaired.block_sizes) < 4096


def test_snap_repairs_values_and_drops_unknown_names() -> None:
    space = space_of(matmul.matmul, matmul.inputs(device="cpu"))
    config = space.snap({"num_warps": 6, "block_sizes[0]": 100, "bogus": 3})
    assert config.num_warps == 8 and config.block_sizes[0] == 128


def test_heuristic_seeds_are_valid_matmul_tiles() -> None:
    # bf16: the Hopper tile 128x256x64 fits its shared memory (float32 operands would not)
    args = matmul.inputs(shape=(512, 512, 512), dtype=torch.bfloat16, device="cpu")
    seeds = heuristic_seeds(space_of(matmul.matmul, args))
    space = space_of(matmul.matmul, args)
    assert seeds and all(space.is_valid(s) for s in seeds)
    assert any(s.block_sizes == [128, 256, 64] for s in seeds)


def test_looped_kernels_are_seeded_with_long_chunks_over_few_rows() -> None:
    # the two-pass softmax loops over each row twice: 8192-wide chunks (past MAX_BLOCK, the
    # cap of blocks that are not loop chunks) of one row are among the first seeds
    args = softmax_two_pass.inputs(shape=(64, 20000), dtype=torch.bfloat16, device="cpu")
    space = space_of(softmax_two_pass.softmax_two_pass, args)
    seeds = heuristic_seeds(space)
    assert all(space.is_valid(s) for s in seeds)
    assert [1, 8192, 8192] in [s.block_sizes for s in seeds[:5]]
    assert space.default_config.block_sizes not in [s.block_sizes for s in seeds[:5]]


@pytest.mark.interpreter
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_tuning_writes_a_trial_log(tmp_path: Path, suffix: str) -> None:
    log = tmp_path / f"trials{suffix}"
    kernel = tc.kernel(
        sums.sum_rows.fn,
        cache_dir=tmp_path,
        autotune_workers=0,
        autotune_quiet=True,
        autotune_log=str(log),
    )
    kernel.autotune(sums.inputs(shape=(20, 100), device="cpu"), max_configs=3)
    lines = log.read_text().strip().splitlines()
    if suffix == ".jsonl":
        rows = [json.loads(line) for line in lines]
        assert len(rows) == 3 and all(r["status"] == "ok" for r in rows)
    else:
        assert lines[0].startswith("config,status,time_ms") and len(lines) == 4


def _scaled(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in tc.tile(x.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] * 2
    return out


def test_a_kernel_default_config_is_completed_checked_and_used() -> None:
    x = torch.randn(30, 250)
    heuristic = tc.kernel(_scaled).bind((x,)).default_config
    own = tc.kernel(_scaled, default_config=tc.Config(block_sizes=[None, 128], num_warps=2))
    config = own.bind((x,)).default_config
    assert config.block_sizes == [heuristic.block_sizes[0], 128] and config.num_warps == 2
    torch.testing.assert_close(own(x), x * 2)
    narrow = torch.randn(30, 50)  # no wider than the dimension needs (nor than the heuristic)
    assert own.bind((narrow,)).default_config.block_sizes[1] == 64
    by_args = tc.kernel(_scaled, default_config=lambda args: tc.Config(block_sizes=[1, 16]))
    assert by_args.bind((x,)).default_config.block_sizes == [1, 16]
    too_big = tc.kernel(_scaled, default_config=tc.Config(block_sizes=[32, 256], num_warps=1))
    assert too_big.bind((x,)).default_config == heuristic  # over the budgets: the heuristic
    with pytest.raises(tc.exc.InvalidConfig, match="has 3 entries"):
        tc.kernel(_scaled, default_config=tc.Config(block_sizes=[1, 2, 4])).bind((x,))


@tc.kernel
def _triangle_then_square(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A 1-D launch of even programs, then a 2-D one whose key loop ends at its row tile."""
    n = x.size(0)
    rows = torch.empty([n], dtype=torch.float32, device=x.device)
    prefix = torch.empty([n, n], dtype=torch.float32, device=x.device)
    for tile in tc.tile(n):
        rows[tile] = torch.sum(x[tile, :].to(torch.float32), -1)
    for tile_i, tile_j in tc.tile([n, n]):
        acc = tc.zeros([tile_i, tile_j], dtype=torch.float32)
        for tile_k in tc.tile(0, tile_i.end):  # later row tiles do more work
            seen = tile_k.index[None, :, None] <= tile_i.index[:, None, None]
            acc = acc + torch.sum(torch.where(seen, x[tile_k, tile_j][None, :, :], 0.0), 1)
        prefix[tile_i, tile_j] = acc
    return rows, prefix


def test_uneven_launches_may_run_longest_first_and_knobs_keep_their_loop_index() -> None:
    """`reversed_launches` is offered for the launches whose programs loop over
    device-computed bounds only, and a list knob missing for some loops (the 1-D launch has
    no l2_groupings) lands at its loop's index, so the 2-D launch gets it."""
    x = torch.randn(37, 37)
    bound = _triangle_then_square.bind((x,))
    space = ConfigSpace(bound.spec, bound.default_config)
    names = {k.name for k in space.knobs}
    assert "reversed_launches[1]" in names and "reversed_launches[0]" not in names
    assert "l2_groupings[1]" in names and "l2_groupings[0]" not in names
    # the default launches the longest programs (the last row tiles) first
    assert bound.spec.longest_last == {1}
    assert bound.default_config.get("reversed_launches") == [False, True]
    values = space.values(space.default())
    assert values["reversed_launches[1]"] is True
    config = space.config({**values, "reversed_launches[1]": False, "l2_groupings[1]": 2})
    assert config.get("reversed_launches") == [None, False]
    assert config.get("l2_groupings") == [None, 2]
    assert space.values(config)["l2_groupings[1]"] == 2
    assert 1.0 in features(describe(bound), config)  # the cost model reads the grouping (log2)
    code = bound.to_triton_code(config)
    assert "launch_pid = " not in code and "group_rows" in code
    assert bound.to_triton_code(bound.default_config).count("launch_pid = ") == 1
    want = (x.sum(1), x.cumsum(0))  # rows, and each row the sum of the rows up to it
    for run in (bound.compile(config), lambda x: _triangle_then_square.run_eagerly((x,))):
        for got, expected in zip(run(x), want, strict=True):
            torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(
    ("causal", "window", "forward", "backward"),
    [(False, 0, None, None), (True, 0, [True], [True, False]), (True, 4, None, None)],
)
def test_causal_attention_launches_its_longest_programs_first(
    causal: bool, window: int, forward: list | None, backward: list | None
) -> None:
    """Causal key loops end at the query tile: the forward's and dQ's later query tiles
    loop longest and launch first by default; dK/dV's later key tiles loop least (kept in
    order); with a window the trip counts are not known to grow (nothing reversed)."""
    from tilecraft.nn.attention import attention_backward, attention_forward

    q = torch.randn(1, 2, 40, 16)
    args = (q, q, q, q.new_empty(0), causal, 0.25, window, False)
    assert attention_forward.bind(args).default_config.get("reversed_launches") == forward
    out, stats = attention_forward(*args)
    bargs = (q, q, q, q, q.new_empty(0), out, stats, causal, 0.25, window, False)
    assert attention_backward.bind(bargs).default_config.get("reversed_launches") == backward
