"""Edge shapes: dims of length 0 and 1 in every position, in both modes, never out of bounds."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.exc import ShapeMismatch
from tilecraft.testing import check_modes, run_mode

SENTINEL = 7.0  # what a buffer around an empty view holds: an out-of-bounds access sees it


def empty_view(rows: int, fill: float = SENTINEL) -> torch.Tensor:
    """A (rows, 0) view into a buffer of `fill`: a kernel that touches it is out of bounds."""
    return torch.full((rows, 8), fill, device=DEVICE)[:, :0]


@tc.kernel
def row_softmax_into(x: torch.Tensor, out: torch.Tensor) -> None:
    for tile_m in tc.tile(x.size(0)):
        out[tile_m, :] = torch.softmax(x[tile_m, :], dim=1)


@tc.kernel
def row_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = x.size()
    total = torch.empty(m, device=x.device)
    mean = torch.empty(m, device=x.device)
    var = torch.empty(m, device=x.device)
    for tile_m in tc.tile(m):
        row = x[tile_m, :]
        total[tile_m] = row.sum(-1)
        mean[tile_m] = row.mean(-1)
        var[tile_m] = torch.var(row, dim=-1)
    return total, mean, var


def stats_reference(x: torch.Tensor) -> tuple:
    return x.sum(-1), x.mean(-1), torch.var(x, dim=-1)


@pytest.mark.parametrize("mode", ["eager", "triton"])
def test_empty_row_writes_nothing(mode) -> None:
    x, out = empty_view(5), empty_view(5, fill=-1.0)
    buffer = out.as_strided((5, 8), (8, 1))
    row_softmax_into(x, out) if mode == "triton" else run_mode(row_softmax_into, (x, out), mode)
    assert torch.equal(buffer, torch.full_like(buffer, -1.0))


@pytest.mark.filterwarnings("ignore:var.*degrees of freedom")
def test_empty_row_reductions() -> None:
    check_modes(row_stats, (empty_view(6),), stats_reference)


@pytest.mark.parametrize("shape", [(4, 0), (0, 5), (0, 0)])
def test_examples_on_empty_inputs(shape) -> None:
    import layer_norm
    import rms_norm
    import softmax

    x = torch.randn(shape, device=DEVICE)
    w, b = torch.randn(shape[1], device=DEVICE), torch.randn(shape[1], device=DEVICE)
    check_modes(softmax.softmax, (x,), softmax.reference)
    if shape[1] == 0:  # it takes torch.amax of each row, which PyTorch refuses on empty rows
        with pytest.raises(ShapeMismatch):
            softmax.softmax_decomposed(x)
    else:
        check_modes(softmax.softmax_decomposed, (x,), softmax.reference)
    check_modes(rms_norm.rms_norm, (x, w), rms_norm.reference)
    check_modes(layer_norm.layer_norm, (x, w, b), layer_norm.reference)


@tc.kernel
def row_amax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.size(0), device=x.device)
    for tile_m in tc.tile(x.size(0)):
        out[tile_m] = torch.amax(x[tile_m, :], dim=1)
    return out


@tc.kernel
def row_argmin(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.size(0), dtype=torch.int64, device=x.device)
    for tile_m in tc.tile(x.size(0)):
        out[tile_m] = x[tile_m, :].argmin(dim=-1)
    return out


@pytest.mark.parametrize("kernel", [row_amax, row_argmin], ids=["amax", "argmin"])
def test_max_over_empty_dim_raises(kernel) -> None:
    with pytest.raises(ShapeMismatch, match="length 0"):
        kernel(torch.randn(3, 0, device=DEVICE))
    with pytest.raises((IndexError, RuntimeError)):
        run_mode(kernel, (torch.randn(3, 0, device=DEVICE),), "eager")


@tc.kernel
def add_3d(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_a, tile_b in tc.tile([x.size(0), x.size(1)]):
        out[tile_a, tile_b, :] = x[tile_a, tile_b, :] + y[tile_a, tile_b, :]
    return out


@tc.kernel
def sum_middle(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.size(0), x.size(2), device=x.device)
    for tile_a, tile_c in tc.tile([x.size(0), x.size(2)]):
        out[tile_a, tile_c] = x[tile_a, :, tile_c].sum(dim=1)
    return out


SHAPES_3D = [(0, 3, 5), (3, 0, 5), (3, 5, 0), (1, 3, 5), (3, 1, 5), (3, 5, 1), (1, 1, 1), (2, 3, 7)]


@pytest.mark.parametrize("shape", SHAPES_3D, ids=lambda s: "x".join(map(str, s)))
def test_length_0_and_1_in_every_position(shape) -> None:
    x, y = torch.randn(shape, device=DEVICE), torch.randn(shape, device=DEVICE)
    check_modes(add_3d, (x, y), torch.add)
    check_modes(sum_middle, (x,), lambda t: t.sum(dim=1))


@pytest.mark.parametrize("chunk", [1, 2])
def test_looped_reduction_with_a_short_last_chunk(chunk) -> None:
    x = torch.randn(3, 3, device=DEVICE)
    kernel = tc.kernel(row_stats.fn, config=tc.Config(reduction_loops=[chunk]))
    check_modes(kernel, (x,), stats_reference)


@tc.kernel
def scale_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    for tile_m, tile_n in tc.tile(x.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] * w[tile_m, tile_n]
    return out


def test_expanded_and_offset_views() -> None:
    x = torch.randn(9, 14, device=DEVICE)[2:, 3:]  # an offset view
    w = torch.randn(7, 1, device=DEVICE).expand(7, 11)  # stride 0 along dim 1
    check_modes(scale_rows, (x, w), torch.mul)


@tc.kernel
def shifted_rows(x: torch.Tensor, out: torch.Tensor) -> None:
    m, n = out.size()
    for tile_m, tile_n in tc.tile([m, n], block_size=[2, 4]):
        for r in range(2):
            i = tile_m.begin + r + 1  # past the last row in the last program
            row = tc.load(x, [i, tile_n.index], other=-2.0)
            tc.store(out, [i, tile_n.index], row + 1.0)


# (rows, cols): with 4 columns the column tile needs no mask, so the row's bound is the
# access's only mask, a scalar (Triton's interpreter once rejected it as int32)
ROW_SHAPES = [(3, 5), (3, 4), (1, 4), (0, 4), (3, 0)]


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_an_int_index_past_the_end_is_masked_in_both_modes(shape) -> None:
    """`tile.begin + 1` is an int in eager mode and a device value in compiled code: past
    the end of its dim, both read `other` and write nothing (eager mode once wrote such a
    store's values to row 0)."""

    def reference(x: torch.Tensor, out: torch.Tensor) -> None:
        out[1:] = x[1:] + 1.0

    x = torch.randn(shape, device=DEVICE)
    check_modes(shifted_rows, (x, torch.full(shape, -1.0, device=DEVICE)), reference)


@tc.kernel
def next_row(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m, tile_n in tc.tile([m, n], block_size=[1, 4]):
        row = tc.load(x, [tile_m.begin + 1, tile_n.index], other=-2.0)
        out[tile_m.begin, tile_n] = row
    return out


@tc.kernel
def add_next_row(x: torch.Tensor, out: torch.Tensor) -> None:
    m, n = out.size()
    for tile_m, tile_n in tc.tile([m, n], block_size=[1, 4]):
        tc.atomic_add(out, [tile_m.begin + 1, tile_n.index], x[tile_m.begin, tile_n])


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_a_scalar_row_bound_alone_masks_loads_and_atomics(shape) -> None:
    """A load and an atomic add whose only mask is a scalar row's bound (the next row,
    past the end in the last program) read `other` and add nothing there."""

    def next_reference(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x[1:], torch.full_like(x[:1], -2.0)])[: len(x)]

    def add_reference(x: torch.Tensor, out: torch.Tensor) -> None:
        out[1:] += x[:-1]

    x = torch.randn(shape, device=DEVICE)
    check_modes(next_row, (x,), next_reference)
    check_modes(add_next_row, (x, torch.randn(shape, device=DEVICE)), add_reference)


@tc.kernel
def copy_flagged_rows(x: torch.Tensor, flags: torch.Tensor, out: torch.Tensor) -> None:
    m, n = out.size()
    for tile_m, tile_n in tc.tile([m, n], block_size=[1, 4]):
        keep = flags[tile_m.begin] > 0
        tc.store(out, [tile_m.begin, tile_n.index], x[tile_m.begin, tile_n], extra_mask=keep)


@pytest.mark.parametrize("shape", [(3, 4), (3, 5), (1, 4)], ids=["3x4", "3x5", "1x4"])
def test_a_scalar_extra_mask_alone(shape) -> None:
    """A scalar `extra_mask` on a store of a tile is a scalar mask like a row's bound."""

    def reference(x: torch.Tensor, flags: torch.Tensor, out: torch.Tensor) -> None:
        out[flags > 0] = x[flags > 0]

    x, flags = torch.randn(shape, device=DEVICE), torch.tensor([1, 0, 1][: shape[0]])
    check_modes(
        copy_flagged_rows, (x, flags.to(DEVICE), torch.zeros(shape, device=DEVICE)), reference
    )


@pytest.mark.parametrize("m,k,n", [(0, 5, 3), (4, 0, 3), (4, 5, 0), (1, 1, 1), (9, 21, 17)])
@pytest.mark.parametrize(
    "relu_x,has_residual,has_gate", [(True, True, False), (False, False, True)]
)
def test_linear_fused_on_empty_and_non_finite_inputs(
    m: int, k: int, n: int, relu_x: bool, has_residual: bool, has_gate: bool
) -> None:
    """The transformer block's fused product, forward (ReLU on x, residual) and input
    gradient (the gate) forms: empty dims, one element, NaN and inf where PyTorch puts them
    (a NaN gate zeroes, as ReLU's backward does), both modes."""
    import linear_fused

    x, w = torch.randn(m, k, device=DEVICE), torch.randn(k, n, device=DEVICE)
    residual, gate = torch.randn(m, n, device=DEVICE), torch.randn(m, n, device=DEVICE)
    if m > 1 and k > 1:
        x[0, 0], x[1, 1] = float("nan"), float("-inf")
    if m > 1 and n > 1:
        residual[1, 0], gate[0, 1], gate[1, 1] = float("inf"), float("nan"), float("inf")
    none = torch.empty(0, device=DEVICE)
    args = (x, w, residual if has_residual else none, gate if has_gate else none, relu_x)
    check_modes(linear_fused.linear_fused, args, linear_fused.reference)


@pytest.mark.parametrize("m,n", [(0, 7), (5, 0), (1, 1), (33, 70)])
def test_rms_norm_backward_sums_the_weight_gradient_in_the_kernel(m: int, n: int) -> None:
    """Its second loop sums the rows' terms: zeros for no rows, NaN from a NaN row."""
    import rms_norm_backward

    grad_out, x, weight = rms_norm_backward.inputs((m, n), device=DEVICE)
    if m > 1 and n > 1:
        x[1, 1] = float("nan")
    check_modes(
        rms_norm_backward.rms_norm_backward, (grad_out, x, weight), rms_norm_backward.reference
    )


@tc.kernel
def reciprocal_matmul(a: torch.Tensor, b: torch.Tensor, right: bool) -> torch.Tensor:
    """(1 / a) @ b, or a @ (1 / b) with `right`: a computed operand, whose lanes past a
    ragged K hold 1 / 0 = inf."""
    m, k = a.size()
    n = b.size(1)
    out = torch.empty([m, n], dtype=torch.float32, device=a.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            x, y = a[tile_m, tile_k], b[tile_k, tile_n]
            acc = acc + torch.matmul(x, 1.0 / y) if right else acc + torch.matmul(1.0 / x, y)
        out[tile_m, tile_n] = acc
    return out


def _reciprocal_reference(a: torch.Tensor, b: torch.Tensor, right: bool) -> torch.Tensor:
    return a @ (1.0 / b) if right else (1.0 / a) @ b


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("k", [20, 16, 1, 0])
def test_products_zero_computed_operands_past_a_ragged_k(k: int, right: bool) -> None:
    """Lanes past K's end are 0 in a loaded operand but not in a computed one (inf here):
    the product zeroes them, or inf * 0 would make every output NaN in the compiled modes
    (an attention row masked by a huge bias did so). Loads alone get no extra select."""
    a = torch.rand(19, k, device=DEVICE) + 0.5
    b = torch.rand(k, 21, device=DEVICE) + 0.5
    config = tc.Config(block_sizes=[16, 16, 16])
    check_modes(reciprocal_matmul, (a, b, right), _reciprocal_reference, config=config)
    code = reciprocal_matmul.bind((a, b, right)).to_triton_code(config)
    ragged = k % 16 != 0 or k == 0  # an empty K's one tile is all past the end
    assert code.count("tl.where(mask_2") == ragged  # the computed operand only
