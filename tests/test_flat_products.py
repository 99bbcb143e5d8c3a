"""Batched products over a batch tile of one are written as 2-D Triton (codegen/flat.py),
which Hopper runs on wgmma; larger batch tiles keep the 3-D `tl.dot`."""

from __future__ import annotations

import bmm
import pytest
import torch

import tilecraft as tc
from tilecraft.testing import check_modes

ONE = tc.Config(block_sizes=[1, 16, 16, 16])
TWO = tc.Config(block_sizes=[2, 16, 32, 16])


def _code(kernel: object, args: tuple, config: tc.Config) -> str:
    return kernel.bind(args).to_triton_code(config)  # type: ignore[attr-defined]


def test_batch_tile_of_one_is_a_2d_product() -> None:
    args = bmm.inputs((3, 65, 70, 33), device="cpu")
    code = _code(bmm.bmm, args, ONE)
    # the accumulator, the operands' loads and the store are 2-D: no leading dim anywhere
    assert "acc_0 = tl.full([_BLOCK_SIZE_1, _BLOCK_SIZE_2], 0, tl.float32)" in code
    assert "[:, None, None]" not in code and "tl.reshape" not in code
    assert "offset_0 * 4550 + indices_1[:, None] * 70 + indices_3[None, :]" in code
    assert "tl.dot(load, load_2" in code
    batched = _code(bmm.bmm, args, TWO)
    assert "indices_0[:, None, None]" in batched and "tl.full([_BLOCK_SIZE_0, " in batched


@pytest.mark.parametrize(
    "shape", [(3, 37, 70, 21), (1, 17, 16, 9), (2, 1, 1, 1), (0, 5, 6, 7), (2, 0, 5, 3)]
)
@pytest.mark.parametrize("config", [ONE, TWO], ids=["tile1", "tile2"])
def test_bmm_both_batch_tiles(shape: tuple, config: tc.Config) -> None:
    dtype = torch.float16 if shape[0] == 1 else torch.float32
    args = bmm.inputs(shape, dtype=dtype, device="cpu")
    check_modes(bmm.bmm, args, bmm.reference, dtype=dtype, config=config)


@pytest.mark.parametrize("config", [ONE, TWO], ids=["tile1", "tile2"])
def test_bmm_bfloat16(config: tc.Config) -> None:
    args = bmm.inputs((2, 19, 33, 21), dtype=torch.bfloat16, device="cpu")
    check_modes(bmm.bmm, args, bmm.reference, dtype=torch.bfloat16, config=config)


@tc.kernel
def scaled_baddbmm(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    batch, m, k = a.size()
    n = b.size(2)
    out = torch.empty([batch, m, n], dtype=c.dtype, device=c.device)
    for tile_b, tile_m, tile_n in tc.tile([batch, m, n]):
        acc = c[tile_b, tile_m, tile_n].float()
        prod = torch.bmm(a[tile_b, tile_m, :], b[tile_b, :, tile_n], out_dtype=torch.float32)
        acc = torch.baddbmm(acc, a[tile_b, tile_m, :], b[tile_b, :, tile_n], beta=0.5, alpha=2)
        out[tile_b, tile_m, tile_n] = (acc - prod).to(out.dtype)
    return out


def _baddbmm_reference(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    prod = torch.bmm(a.float(), b.float())
    return (torch.baddbmm(c.float(), a.float(), b.float(), beta=0.5, alpha=2) - prod).to(c.dtype)


@pytest.mark.parametrize("batch_tile", [1, 2])
def test_baddbmm_with_scales(batch_tile: int) -> None:
    a, b = torch.randn(3, 19, 16), torch.randn(3, 16, 21)
    args = (torch.randn(3, 19, 21), a, b)
    config = tc.Config(block_sizes=[batch_tile, 16, 16])
    check_modes(scaled_baddbmm, args, _baddbmm_reference, config=config)
    code = _code(scaled_baddbmm, args, config)
    assert ("[:, None, None]" not in code) == (batch_tile == 1)  # `c` is read flat too


@tc.kernel
def batched_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
) -> torch.Tensor:
    batch, m, d = q.size()
    n = k.size(1)
    out = torch.empty_like(q)
    for tile_b, tile_m in tc.tile([batch, m]):
        m_i = tc.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
        l_i = tc.zeros([tile_b, tile_m], dtype=torch.float32)
        acc = tc.zeros([tile_b, tile_m, d], dtype=torch.float32)
        query = q[tile_b, tile_m, :]
        for tile_n in tc.tile(n):
            scores = torch.bmm(query, k[tile_b, tile_n, :].transpose(1, 2), torch.float32)
            if causal:  # Helion's example's mask: 3-D views of the tiles' indices
                seen = tile_m.index[None, :, None] >= tile_n.index[None, None, :]
                scores = torch.where(seen, scores, float("-inf"))
            m_new = torch.maximum(m_i, scores.amax(-1))
            p = torch.exp(scores - m_new[:, :, None])
            alpha = torch.exp(m_i - m_new)
            l_i = l_i * alpha + p.sum(-1)
            acc = torch.baddbmm(acc * alpha[:, :, None], p.to(v.dtype), v[tile_b, tile_n, :])
            m_i = m_new
        out[tile_b, tile_m, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
) -> torch.Tensor:
    scores = torch.bmm(q.float(), k.float().transpose(1, 2))
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores).triu(1).bool(), float("-inf"))
    return torch.bmm(torch.softmax(scores, -1), v.float()).to(q.dtype)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("batch_tile", [1, 2])
def test_attention_style_products(dtype: torch.dtype, batch_tile: int, causal: bool) -> None:
    """Helion-style attention (3-D tiles over a batch tile): with a batch tile of one all
    2-D, the causal mask's `index[None, :, None]` views too (kept 3-D, they made every
    value after the mask 3-D: 20x slower on the H200)."""
    config = tc.Config(block_sizes=[batch_tile, 16, 16])
    for batch, size in [(3, 1), (0, 5), (2, 0)]:  # one key each, no batch, no rows
        q, k, v = (torch.randn(batch, size, 16, dtype=dtype) for _ in range(3))
        check_modes(batched_attention, (q, k, v, causal), _attention, dtype=dtype, config=config)
    q, k, v = (torch.randn(3, 37, 16, dtype=dtype) for _ in range(3))
    k[1, 20, 3] = float("nan")  # rows that see key 20 are NaN, causal rows before it are not
    k[2, 30, :] = 1e4  # huge scores, which overflow exp without the running maximum
    args = (q, k, v, causal)
    check_modes(batched_attention, args, _attention, dtype=dtype, config=config)
    code = _code(batched_attention, args, config)
    # a batch of one: all 2-D (the key tile read flat and transposed, row statistics 1-D)
    flat = "tl.trans(" in code and "m_i = tl.full([_BLOCK_SIZE_1], " in code
    assert flat == (batch_tile == 1)
    assert ("[:, None, None]" in code or "tl.reshape" in code) == (batch_tile > 1)


@tc.kernel
def product_stats(a: torch.Tensor, b: torch.Tensor) -> tuple:
    batch, m, _ = a.size()
    n = b.size(2)
    top = torch.empty([batch, m], dtype=torch.float32, device=a.device)
    first = torch.empty([batch, m], dtype=torch.int64, device=a.device)
    out = torch.empty([batch, m, n], dtype=torch.float32, device=a.device)
    for tile_b, tile_m in tc.tile([batch, m]):
        s = torch.bmm(a[tile_b, tile_m, :], b[tile_b, :, :], out_dtype=torch.float32)
        big = s.amax(-1, keepdim=True)
        top[tile_b, tile_m] = big.squeeze(-1)
        first[tile_b, tile_m] = s.argmax(-1)
        total = s.sum(-1)
        out[tile_b, tile_m, :] = torch.where(s > 0, s - big, total[:, :, None].expand_as(s))
    return top, first, out


def _stats(a: torch.Tensor, b: torch.Tensor) -> tuple:
    s = torch.bmm(a, b)
    big = s.amax(-1, keepdim=True)
    out = torch.where(s > 0, s - big, s.sum(-1, keepdim=True).expand_as(s))
    return big.squeeze(-1), s.argmax(-1), out


@pytest.mark.parametrize("batch_tile", [1, 2])
def test_reductions_and_views_of_flat_products(batch_tile: int) -> None:
    """Row maxima (NaN first, as PyTorch), argmax, sums, squeezes and broadcasts of a
    product over a batch of one stay 2-D, and agree with PyTorch either way."""
    a, b = torch.randn(3, 19, 16), torch.randn(3, 16, 20)
    a[0, 3, 5] = float("nan")
    config = tc.Config(block_sizes=[batch_tile, 16])
    check_modes(product_stats, (a, b), _stats, config=config)
    code = _code(product_stats, (a, b), config)
    assert ("[:, None, None]" in code) == (batch_tile > 1)


@tc.kernel
def bmm_branch_cumsum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    batch, m, k = a.size()
    n = b.size(2)
    out = torch.empty([batch, m, n], dtype=torch.float32, device=a.device)
    for tile_b, tile_m in tc.tile([batch, m]):
        acc = tc.zeros([tile_b, tile_m, n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            left, right = a[tile_b, tile_m, tile_k], b[tile_b, tile_k, :]
            prod = torch.bmm(left, right, out_dtype=torch.float32)
            if tile_k.begin > 0:  # noqa: SIM108 (a branch on the device is the point)
                acc = acc + prod
            else:
                acc = prod * 1.0
        out[tile_b, tile_m, :] = torch.cumsum(acc, -1)
    return out


@pytest.mark.parametrize("batch_tile", [1, 2])
def test_flat_products_meet_branches_and_scans(batch_tile: int) -> None:
    """A flat product read by a branch arm and a scan, which see it with its batch dim."""
    a, b = torch.randn(2, 19, 40), torch.randn(2, 40, 12)
    config = tc.Config(block_sizes=[batch_tile, 16, 16])
    ref = lambda a, b: torch.cumsum(torch.bmm(a, b), -1)  # noqa: E731
    check_modes(bmm_branch_cumsum, (a, b), ref, config=config)
    code = _code(bmm_branch_cumsum, (a, b), config)
    assert ("prod_3d_1 = prod[None, :, :]" in code) == (batch_tile == 1)


@tc.kernel
def shared_weight(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    batch, m, k = x.size()
    n = w.size(1)
    out = torch.empty([batch, m, n], dtype=torch.float32, device=x.device)
    for tile_b, tile_m, tile_n in tc.tile([batch, m, n]):
        acc = tc.zeros([tile_b, tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            acc = acc + x[tile_b, tile_m, tile_k] @ w[None, tile_k, tile_n]
        out[tile_b, tile_m, tile_n] = acc
    return out


@pytest.mark.parametrize("batch_tile", [1, 2])
def test_products_with_a_broadcast_batch(batch_tile: int) -> None:
    """`x @ w[None]`: one operand's batch of one broadcasts (as torch.matmul does), flat
    or as a 3-D `tl.dot` (which needs equal batches: the operand is broadcast first)."""
    x, w = torch.randn(3, 19, 40), torch.randn(40, 21)
    config = tc.Config(block_sizes=[batch_tile, 16, 16, 16])
    check_modes(shared_weight, (x, w), lambda x, w: x @ w, config=config)
    code = _code(shared_weight, (x, w), config)
    assert ("tl.broadcast_to(load_2, [_BLOCK_SIZE_0, " in code) == (batch_tile > 1)


@tc.kernel
def squeezed_rows(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A key tile's sum over query tiles of (q k^T * w)^T q: the query tile, a squeezed row
    of a batch tile of one, feeds two products (as the left operand, then the right one), as
    in an attention backward's dK."""
    batch, m, d = q.size()
    n = k.size(1)
    out = torch.empty([batch, n, d], dtype=torch.float32, device=q.device)
    for tile_b, tile_n in tc.tile([batch, n], block_size=[1, None]):
        key = k[tile_b, tile_n, :].squeeze(0)
        acc = tc.zeros([tile_n, d], dtype=torch.float32)
        for tile_m in tc.tile(m):
            query = q[tile_b, tile_m, :].squeeze(0)
            scores = torch.matmul(query, key.T) * w[tile_b, tile_m].squeeze(0)[:, None]
            acc = acc + torch.matmul(scores.T.to(query.dtype), query)
        out[tile_b, tile_n, :] = acc[None, :, :]
    return out


def _squeezed_rows_reference(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    scores = torch.matmul(q, k.transpose(1, 2)) * w[:, :, None]  # rounded as the kernel's
    return scores.transpose(1, 2).float() @ q.float()


def test_squeezed_rows_are_2d_loads() -> None:
    """Rows of a batch tile of one, squeezed, are loaded as 2-D tiles (no reshape), through
    pointers at any stage count; tensor descriptors keep their 3-D blocks."""
    q, k, w = torch.randn(2, 40, 16), torch.randn(2, 24, 16), torch.randn(2, 40)
    config = tc.Config(block_sizes=[16, 16], num_stages=3)
    code = _code(squeezed_rows, (q, k, w), config)
    assert "tl.reshape" not in code and "query = load_" in code
    assert "tl.load(q + (offset_0 * 640 + indices_3[:, None] * 16 + indices_2[None, :])" in code
    described = _code(squeezed_rows, (q, k, w), tc.Config(**config.to_dict(),
                      indexing="tensor_descriptor"))  # fmt: skip
    assert "tl.reshape" in described


@pytest.mark.parametrize("shape", [(2, 40, 24, 16), (1, 1, 1, 16), (3, 0, 5, 16), (2, 7, 0, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_squeezed_rows_match_pytorch(shape: tuple, dtype: torch.dtype) -> None:
    batch, m, n, d = shape
    small = lambda *size: torch.randint(-2, 3, size).to(dtype)  # noqa: E731  (sums exact in bf16)
    q, k, w = small(batch, m, d), small(batch, n, d), small(batch, m) / 2
    if m > 2:
        q[0, 1, 3] = float("nan")  # spreads to the keys' whole rows, in every mode alike
    config = tc.Config(block_sizes=[16, 16], num_stages=3)
    check_modes(squeezed_rows, (q, k, w), _squeezed_rows_reference, dtype=dtype, config=config)


def test_descriptor_launches_give_triton_an_allocator_in_their_thread(on_test_device: None) -> None:
    """Triton keeps its scratch allocator per context: a module loaded in one thread (a
    tuning worker) left launches in another without one ("no allocator was set"). Its
    scratch lies beside the tensors: host memory for the interpreter on a GPU machine.
    One stage: Triton 3.6 pipelines this kernel's descriptor loads (a loaded row broadcast
    into a product) at 3 or 4 stages to a "misaligned address" fault on the H200
    (triton-lang/triton#7386)."""
    import threading

    from triton.runtime import _allocation  # the context variable the launches read

    q, k, w = torch.randn(2, 40, 16), torch.randn(2, 24, 16), torch.randn(2, 40)
    config = tc.Config(block_sizes=[16, 16], indexing="tensor_descriptor", num_stages=1)
    launcher = squeezed_rows.bind((q, k, w)).compile(config)
    seen = []

    def launch() -> None:  # a fresh thread starts from an empty context
        before = _allocation._allocator.get()
        out = launcher(q, k, w)
        seen.append((before, _allocation._allocator.get(), out))

    thread = threading.Thread(target=launch)
    thread.start()
    thread.join()
    [(before, after, out)] = seen
    assert isinstance(before, _allocation.NullAllocator)
    assert after(64, 16, None).device == q.device
    torch.testing.assert_close(out, _squeezed_rows_reference(q, k, w), atol=1e-4, rtol=1e-4)


@tc.kernel
def _product_with_a_new_axis(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    batch, m, _ = a.size()
    out = torch.empty([batch, m, b.size(2)], dtype=torch.float32, device=a.device)
    for tile_b, tile_m, tile_n in tc.tile([batch, m, b.size(2)]):
        s = torch.bmm(a[tile_b, tile_m, :], b[tile_b, :, tile_n], torch.float32)
        out[tile_b, tile_m, tile_n] = s[None, :, :, :].sum(0) * 2.0
    return out


def test_a_new_axis_on_a_flat_product_puts_its_batch_dim_back() -> None:
    """A view putting a new axis before a flat value (2-D in the code) is written from its
    full-rank copy, not flat as a view of a tile's indices is."""
    a, b = torch.randn(3, 20, 16), torch.randn(3, 16, 24)
    config = tc.Config(block_sizes=[1, 16, 16])
    check_modes(_product_with_a_new_axis, (a, b), lambda a, b: 2 * torch.bmm(a, b), config=config)
