"""What a Helion kernel's port touches beyond the language: the decorator's settings,
`helion.Config` fields, `helion.exc` names and the autotuner's fragments; and Helion's
causal attention kernel, ported by the imports alone."""

from __future__ import annotations

import math

import pytest
import torch

import tilecraft as helion
import tilecraft.language as hl
from tilecraft import exc
from tilecraft.autotuner import BooleanFragment, EnumFragment, IntegerFragment, PowerOfTwoFragment
from tilecraft.testing import check_modes


@helion.kernel(static_shapes=True)
def causal_attention(q_in: torch.Tensor, k_in: torch.Tensor, v_in: torch.Tensor) -> torch.Tensor:
    m_dim, n_dim = q_in.size(-2), k_in.size(-2)
    head_dim = hl.specialize(q_in.size(-1))
    q_view = q_in.reshape([-1, m_dim, head_dim])
    k_view = k_in.reshape([-1, n_dim, head_dim])
    v_view = v_in.reshape([-1, n_dim, head_dim])
    out = torch.empty_like(q_view)
    qk_scale = 1.0 / math.sqrt(head_dim) * 1.44269504
    for tile_b, tile_m in hl.tile([q_view.size(0), m_dim]):
        m_i = hl.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
        l_i = torch.full_like(m_i, 1.0)
        acc = hl.zeros([tile_b, tile_m, head_dim], dtype=torch.float32)
        q = q_view[tile_b, tile_m, :]
        for tile_n in hl.tile(v_view.size(1)):
            k = k_view[tile_b, tile_n, :]
            qk = torch.bmm(q * qk_scale, k.transpose(1, 2), torch.float32)
            qk = torch.where(
                tile_m.index[None, :, None] >= tile_n.index[None, None, :], qk, float("-inf")
            )
            m_ij_keepdim = torch.maximum(m_i[:, :, None], torch.amax(qk, -1, keepdim=True))
            qk = qk - m_ij_keepdim
            m_ij = m_ij_keepdim.squeeze(-1)
            p = torch.exp2(qk)
            alpha = torch.exp2(m_i - m_ij)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc = acc * alpha[:, :, None]
            v = v_view[tile_b, tile_n, :]
            acc = torch.baddbmm(acc, p.to(v.dtype), v)
            m_i = m_ij
        out[tile_b, tile_m, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out.view(q_in.size())


def _sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    out = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=True
    )
    return out.to(q.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_causal_attention_ports_by_imports(dtype: torch.dtype) -> None:
    q, k, v = (torch.randn(1, 2, 37, 16, dtype=dtype) for _ in range(3))
    check_modes(causal_attention, (q, k, v), _sdpa_causal, dtype=dtype)


# -- decorator settings ---------------------------------------------------------------------
def _double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


def test_helion_settings_are_translated() -> None:
    kernel = helion.kernel(
        _double,
        print_output_code=False,
        autotune_effort="none",
        dot_precision="tf32",
        autotune_progress_bar=False,
        ignore_warnings=[],
        autotune_baseline_fn=lambda x: x * 2,
        autotune_baseline_atol=1e-2,
    )
    assert kernel.settings.allow_tf32 and kernel.settings.autotune_quiet
    assert kernel.settings.autotune_effort == "none" and not kernel.settings.print_code
    x = torch.randn(9)
    torch.testing.assert_close(kernel(x), x * 2)
    untuned = helion.kernel(_double, use_default_config=True)
    assert untuned.settings.autotune_effort == "none"


def test_a_config_given_as_a_dict() -> None:
    """Helion takes `config={"block_sizes": [...]}` too: the same as a Config."""
    kernel = helion.kernel(_double, config={"block_sizes": [4]}, autotune_effort="none")
    assert kernel.config == helion.Config(block_sizes=[4])
    x = torch.randn(9)
    torch.testing.assert_close(kernel(x), x * 2)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"force_autotune": True}, "force_autotune"),
        ({"autotune_efort": "full"}, "autotune_efort"),
        ({"backend": "cute"}, "backend='cute'"),
        ({"dot_precision": "fast"}, "dot_precision='fast'"),
    ],
)
def test_other_settings_are_rejected_by_name(options: dict, named: str) -> None:
    with pytest.raises(exc.SettingsError, match=named):
        helion.kernel(_double, **options)


# -- Config fields ---------------------------------------------------------------------------
def test_helion_config_fields_are_accepted() -> None:
    config = helion.Config(
        block_sizes=[16],
        num_warps=4,
        num_stages=2,
        indexing="pointer",
        pid_type="flat",
        flatten_loops=[False],
        static_ranges=[],
        range_warp_specializes=[],
        load_eviction_policies=[""],
        maxnreg=128,
    )
    kernel = helion.kernel(_double, config=config)
    x = torch.randn(21)
    torch.testing.assert_close(kernel(x), x * 2)


def test_unknown_config_fields_are_rejected_by_name() -> None:
    kernel = helion.kernel(_double, config=helion.Config(block_size=[16]))
    with pytest.raises(exc.InvalidConfig, match="unknown field.*block_size"):
        kernel(torch.randn(4))
    with pytest.raises(exc.InvalidConfig, match="num_warps"):
        helion.Config(num_warps="4")


# -- autotuner fragments ---------------------------------------------------------------------
@helion.kernel()
def tunable_scale(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    block = hl.register_tunable("block", PowerOfTwoFragment(16, 64, 32))
    factor = hl.register_tunable("factor", IntegerFragment(1, 4, 3))
    offset = hl.register_tunable("offset", EnumFragment((0.5, 1.5)))
    negate = hl.register_tunable("negate", BooleanFragment())
    for tile in hl.tile(x.size(0), block_size=block):
        y = x[tile] * factor + offset
        out[tile] = -y if negate else y
    return out


def test_autotuner_fragments() -> None:
    x = torch.randn(45)
    check_modes(tunable_scale, (x,), lambda x: x * 3 + 0.5)
    config = helion.Config(block=16, factor=2, offset=1.5, negate=True)
    check_modes(tunable_scale, (x,), lambda x: -(x * 2 + 1.5), config=config, modes=("triton",))


def test_helion_exc_names() -> None:
    assert helion.exc.BaseError is helion.exc.Base is exc.TilecraftError
    assert issubclass(helion.exc.NotInsideKernel, helion.exc.BaseError)
    assert helion.exc.ShapeMismatch is exc.ShapeMismatch
    assert helion.exc.InvalidConfig is exc.InvalidConfig
    # warnings a port silences by name (`ignore_warnings=[...]`); tilecraft raises none
    assert issubclass(helion.exc.TensorOperationsInHostCall, helion.exc.TensorOperationInWrapper)
    assert issubclass(helion.exc.TensorOperationInWrapper, helion.exc.BaseWarning)
    helion.kernel(_double, ignore_warnings=[helion.exc.TensorOperationInWrapper])
    with pytest.raises(helion.exc.NotInsideKernel):
        hl.zeros([4])
