"""Every config knob of the matrix-product kernels: right numbers and the intended code."""

from __future__ import annotations

import bmm
import matmul
import matmul_split_k
import pytest
import rms_norm
import softmax
import torch

import tilecraft as tc
from tilecraft.codegen.access import supported_indexing
from tilecraft.exc import InvalidConfig
from tilecraft.testing import assert_close

SHAPE = (37, 56, 40)  # ragged against the blocks, with 16-byte aligned rows (for TMA)
BASE = {"block_sizes": [16, 16, 16]}
KNOBS = {
    "flat": ({"pid_type": "flat"}, "tl.program_id(0)"),
    "xyz": ({"pid_type": "xyz"}, "tl.program_id(1)"),
    "persistent_blocked": ({"pid_type": "persistent_blocked"}, "for virtual_pid in"),
    "persistent_interleaved": ({"pid_type": "persistent_interleaved"}, "tl.num_programs(0)):"),
    "l2_grouping": ({"l2_groupings": [2]}, "group_rows = tl.minimum"),
    "l2_grouping_persistent": (
        {"l2_groupings": [4], "pid_type": "persistent_interleaved"},
        "group_span",
    ),
    "loop_order": ({"loop_orders": [[1, 0]]}, "pid_0 = pid // num_blocks_1"),
    "reversed": ({"reversed_launches": [True]}, "launch_pid = 8 - pid"),  # 3 x 3 tiles
    "reversed_xyz": (
        {"reversed_launches": [True], "pid_type": "xyz"},
        "pid_1 = 2 - tl.program_id(1)",
    ),
    "reversed_grouped": (
        {"reversed_launches": [True], "l2_groupings": [2], "pid_type": "persistent_blocked"},
        "launch_pid = 8 - virtual_pid",
    ),
    "range_num_stages": ({"range_num_stages": [2]}, "num_stages=2)"),
    "range_unroll": ({"range_unroll_factors": [2]}, "loop_unroll_factor=2"),
    "range_flatten": ({"range_flattens": [True]}, "flatten=True"),
    "range_multi_buffer": ({"range_multi_buffers": [False]}, "disallow_acc_multi_buffer=True"),
    "range_warp_specialize": ({"range_warp_specializes": [True]}, "warp_specialize=True"),
    "warps_stages": ({"num_warps": 2, "num_stages": 2}, "num_warps=2, num_stages=2"),
    "tensor_descriptor": ({"indexing": "tensor_descriptor"}, "tl.make_tensor_descriptor("),
    "block_ptr": ({"indexing": "block_ptr"}, "tl.make_block_ptr("),
    "sm_multiplier": ({"pid_type": "persistent_blocked", "num_sm_multiplier": 2}, "_kernel[8,]("),
    "maxnreg": ({"maxnreg": 128}, "maxnreg=128"),
    "eviction": ({"load_eviction_policies": ["last", "first"]}, "eviction_policy='evict_first'"),
    "mixed_indexing": (
        {"indexing": ["tensor_descriptor", "pointer", "pointer"]},
        "x_desc_0_2.load(",
    ),
}


def _kernel(knobs: dict) -> tc.Kernel:
    return tc.kernel(matmul.matmul.fn, config=tc.Config(**BASE, **knobs))


@pytest.mark.parametrize("name", list(KNOBS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_knob_is_correct(name: str, dtype: torch.dtype) -> None:
    knobs, _ = KNOBS[name]
    args = matmul.inputs(shape=SHAPE, dtype=dtype, device="cpu")
    assert_close(_kernel(knobs)(*args), matmul.reference(*args), dtype)


@pytest.mark.parametrize("name", list(KNOBS))
def test_knob_changes_the_code(name: str) -> None:
    knobs, expected = KNOBS[name]
    if "block_ptr" in str(knobs) and "block_ptr" not in supported_indexing():
        expected = "tl.load(x + ("  # this Triton removed block pointers: plain pointers
    args = matmul.inputs(shape=SHAPE, device="cpu")
    code = _kernel(knobs).bind(args).to_triton_code(tc.Config(**BASE, **knobs))
    assert expected in code
    assert "tl.dot(" in code


def test_descriptor_falls_back_for_a_gather_free_misaligned_view() -> None:
    x, y = matmul.inputs(shape=(33, 40, 17), device="cpu")
    x = x[:, 1:]  # starts 4 bytes into its storage: no tensor descriptor
    kernel = _kernel({"indexing": "tensor_descriptor"})
    code = kernel.bind((x, y[1:])).to_triton_code(kernel.config)
    assert "x_desc" not in code
    assert_close(kernel(x, y[1:]), matmul.reference(x, y[1:]))


@tc.kernel
def _scaled_rows(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in tc.tile(x.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] * scale[tile_m][:, None]
    return out


@pytest.mark.parametrize("rows", [16, 32])
def test_descriptors_read_no_box_under_128_bytes(rows: int) -> None:
    """A tensor descriptor's box holds 128 bytes or more: 16 float32 values (64 bytes) are
    read through pointers (such boxes, row statistics read in a pipelined loop, failed with
    "misaligned address" on an H200), 32 (128 bytes) through a descriptor."""
    x, scale = torch.randn(64, 80), torch.randn(64)
    config = tc.Config(block_sizes=[rows, 64], indexing="tensor_descriptor")
    code = _scaled_rows.bind((x, scale)).to_triton_code(config)
    assert "x_desc" in code and ("scale_desc" in code) == (rows == 32)
    assert_close(tc.kernel(_scaled_rows.fn, config=config)(x, scale), x * scale[:, None])


@pytest.mark.parametrize(
    "knobs, message",
    [
        ({"pid_type": "diagonal"}, "pid_type"),
        ({"loop_orders": [[0, 0]]}, "permutation"),
        ({"l2_groupings": [4], "pid_type": "xyz"}, "l2_groupings"),
        ({"num_warps": 3}, "num_warps"),
        ({"block_sizes": [16, 24, 16]}, "powers of two"),
        ({"block_sizes": [16, 16, 16, 16]}, "entries"),
        ({"load_eviction_policies": ["sometimes"]}, "load_eviction_policies"),
        ({"num_sm_multiplier": 3}, "num_sm_multiplier"),
        ({"maxnreg": 512}, "maxnreg"),
        ({"reversed_launches": ["yes"]}, "reversed_launches entries must be True or False"),
    ],
)
def test_invalid_configs_are_rejected(knobs: dict, message: str) -> None:
    args = matmul.inputs(shape=SHAPE)
    with pytest.raises(InvalidConfig, match=message):
        tc.kernel(matmul.matmul.fn, config=tc.Config(**knobs))(*args)


def test_xyz_rejects_too_many_programs_on_the_second_axis() -> None:
    args = matmul.inputs(shape=(16, 16, 70000 * 16), device="cpu")
    kernel = tc.kernel(matmul.matmul.fn, config=tc.Config(block_sizes=[16, 16, 16], pid_type="xyz"))
    with pytest.raises(InvalidConfig, match="65535"):
        kernel.bind(args).to_triton_code(kernel.config)


def test_batched_and_split_k_products_with_knobs() -> None:
    a, b = bmm.inputs(shape=(2, 19, 33, 21), device="cpu")
    for knobs in ({"pid_type": "persistent_interleaved"}, {"loop_orders": [[2, 1, 0]]}):
        kernel = tc.kernel(bmm.bmm.fn, config=tc.Config(block_sizes=[1, 16, 16, 16], **knobs))
        assert_close(kernel(a, b), bmm.reference(a, b))
    x, y = matmul_split_k.inputs(shape=(20, 300, 18), device="cpu")
    kernel = tc.kernel(matmul_split_k.matmul_split_k.fn, config=tc.Config(block_sizes=[16, 16, 32]))
    code = kernel.bind((x, y)).to_triton_code(kernel.config)
    assert "tl.atomic_add(" in code and "tl.range(begin + _tc_zero, end" in code
    assert_close(kernel(x, y), matmul_split_k.reference(x, y), torch.float32)


@tc.kernel
def _relaxed_split_k(x: torch.Tensor, y: torch.Tensor, sem: str | None) -> torch.Tensor:
    m, k = x.size()
    out = torch.zeros([m, y.size(1)], dtype=torch.float32, device=x.device)
    for tile_m, tile_n, outer_k in tc.tile([m, y.size(1), k], block_size=[None, None, 16]):
        acc = torch.mm(x[tile_m, outer_k], y[outer_k, tile_n], torch.float32)
        tc.atomic_add(out, [tile_m, tile_n], acc, sem=sem)
    return out


def test_relaxed_atomic_adds_of_whole_tiles_go_through_tensor_descriptors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With `indexing="tensor_descriptor"` a relaxed `tc.atomic_add` of a plain block is the
    descriptor's `atomic_add` (a TMA reduction on Hopper, clipped at the tensor's end like
    a descriptor's store) where Triton lowers it; not with another memory order, nor under
    Triton's CPU interpreter (which has none), where it runs through pointers."""
    import triton.language as tl

    from tilecraft.codegen import access

    config = tc.Config(block_sizes=[16, 16], indexing="tensor_descriptor")
    x, y = torch.randn(32, 48), torch.randn(48, 32)
    bound = _relaxed_split_k.bind((x, y, "relaxed"))
    assert_close(tc.kernel(_relaxed_split_k.fn, config=config)(x, y, "relaxed"), x @ y)
    if access.interpreter_set():  # CPU tensors run under it: pointers
        assert "tl.atomic_add(out + " in bound.to_triton_code(config)
    if not hasattr(getattr(tl, "tensor_descriptor", None), "atomic_add"):
        pytest.skip("this Triton's descriptors have no atomic_add")
    monkeypatch.setattr(access, "interpreter_set", lambda: False)  # the code a GPU gets
    assert "_desc_0_1.atomic_add([offset_0, offset_1], " in bound.to_triton_code(config)
    assert "tl.atomic_add(" not in bound.to_triton_code(config)
    ragged = _relaxed_split_k.bind((x[:30], y, "relaxed")).to_triton_code(config)
    assert "_desc_0_1.atomic_add([offset_0, offset_1], " in ragged
    acq_rel = _relaxed_split_k.bind((x, y, None)).to_triton_code(config)
    assert ".atomic_add([" not in acq_rel and "tl.atomic_add(out + " in acq_rel


def test_fp32_products_follow_the_tf32_setting() -> None:
    args = matmul.inputs(shape=SHAPE, device="cpu")
    exact = tc.kernel(matmul.matmul.fn)
    fast = tc.kernel(matmul.matmul.fn, allow_tf32=True)
    assert 'input_precision="ieee"' in exact.bind(args).to_triton_code()
    assert 'input_precision="tf32"' in fast.bind(args).to_triton_code()


@pytest.mark.parametrize("indexing", ["pointer", "block_ptr"])
def test_eviction_hints_on_row_kernels(mode, indexing: str) -> None:
    """Each load takes its own `load_eviction_policies` entry (program order), in both
    modes; a looped row re-reads with the same hint; "" means none."""
    x = torch.randn(19, 300)
    config = tc.Config(
        block_sizes=[4], reduction_loops=[128], indexing=indexing, load_eviction_policies=["last"]
    )
    kernel = mode(tc.kernel(softmax.softmax.fn, config=config))
    assert_close(kernel(x), softmax.reference(x))
    code = kernel.bind((x,)).to_triton_code(config)
    assert code.count("eviction_policy='evict_last'") == 3  # max, sum and output passes
    args = rms_norm.inputs(shape=(19, 300), device="cpu")
    config = tc.Config(block_sizes=[2], indexing=indexing, load_eviction_policies=["", "first"])
    kernel = mode(tc.kernel(rms_norm.rms_norm.fn, config=config))
    assert_close(kernel(*args), rms_norm.reference(*args))
    code = kernel.bind(args).to_triton_code(config)
    loads = [line for line in code.splitlines() if "tl.load(" in line]
    assert len(loads) == 2 and "evict" not in loads[0] and "evict_first" in loads[1]
