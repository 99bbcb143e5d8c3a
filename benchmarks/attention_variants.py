"""Attention forward variants on one schedule, timed against each other in one process.

A stripped forward (no bias, window or grouped heads; heads flattened into rows) with
host switches for what each variant changes in the key loop:

- `shift`: the `-inf` guard on the row maximum (`_softmax_step`'s `where`), needed only
  where a row may see no key in a tile (a window or a bias); off is one select less per row.
- `lazy`: rescale the accumulator only when some row's maximum grew by more than 2**8
  (FlashAttention-4's trick): the exponentials are then taken against a stale maximum, at
  most 256x too large, exact after the final division.
- `fused`: FMA contraction on (`exp2(s * scale - max)` as one FMA; tilecraft's attention
  compiles with it off for huge scores' sake).

    PYTHONPATH=$PWD python benchmarks/attention_variants.py [--out PATH]
    TRITON_INTERPRET=1 PYTHONPATH=$PWD python benchmarks/attention_variants.py --smoke
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import tilecraft as tc  # noqa: E402
from tilecraft.nn.attention import attention_forward  # noqa: E402

LOG2E = 1.4426950408889634
VARIANTS = {  # name: (shift, lazy, fused)
    "base": (True, False, False),
    "no_shift": (False, False, False),
    "lazy": (False, True, False),
    "fused": (False, False, True),
}


def _body(q, k, v, causal: bool, scale: float, shift: bool, lazy: bool):  # type: ignore[no-untyped-def]
    rows, m, _ = q.size()
    n = k.size(1)
    head_dim = tc.specialize(q.size(2))
    out = torch.empty_like(q)
    qk_scale = scale * LOG2E
    for tile_bh, tile_m in tc.tile([rows, m], block_size=[1, None]):
        m_i = tc.full([tile_m], float("-inf"), dtype=torch.float32)
        l_i = tc.zeros([tile_m], dtype=torch.float32)
        acc = tc.zeros([tile_m, head_dim], dtype=torch.float32)
        query = q[tile_bh, tile_m, :].squeeze(0)
        end = min(tile_m.end, n) if causal else n
        for tile_n in tc.tile(0, end):
            key = k[tile_bh, tile_n, :].squeeze(0)
            s = torch.mm(query, key.T, torch.float32) * qk_scale
            if causal:
                keep = tile_n.index[None, :] <= tile_m.index[:, None]
                s = torch.where(keep, s, float("-inf"))
            m_ij = torch.maximum(m_i, torch.amax(s, -1))
            if lazy:
                if torch.amax(m_ij - m_i) > 8.0:
                    alpha = torch.exp2(m_i - m_ij)
                    acc = acc * alpha[:, None]
                    l_i = l_i * alpha
                    m_i = m_ij
                p = torch.exp2(s - m_i[:, None])
                l_i = l_i + torch.sum(p, -1)
            else:
                cut = torch.where(m_ij == float("-inf"), 0.0, m_ij) if shift else m_ij
                p = torch.exp2(s - cut[:, None])
                alpha = torch.exp2(m_i - cut)
                acc = acc * alpha[:, None]
                l_i = l_i * alpha + torch.sum(p, -1)
                m_i = m_ij
            value = v[tile_bh, tile_n, :].squeeze(0)
            acc = torch.addmm(acc, p.to(value.dtype), value)
        out[tile_bh, tile_m, :] = (acc / l_i[:, None]).to(out.dtype)[None, :, :]
    return out


exact = tc.kernel(fp_fusion=False)(_body)
contracted = tc.kernel(fp_fusion=True)(_body)


def _step(m_i, l_i, acc, s, value):  # type: ignore[no-untyped-def]
    m_ij = torch.maximum(m_i, torch.amax(s, -1))
    p = torch.exp2(s - m_ij[:, None])
    alpha = torch.exp2(m_i - m_ij)
    acc = torch.addmm(acc * alpha[:, None], p.to(value.dtype), value)
    return m_ij, l_i * alpha + torch.sum(p, -1), acc


@tc.kernel(fp_fusion=False)
def paired(q, k, v, scale: float):  # type: ignore[no-untyped-def]
    """Two query tiles per program (rows i and i + half), one online softmax each, over
    the same key and value tiles: two independent chains for the scheduler to interleave
    (FlashAttention-3's ping-pong, left to the compiler). Without a mask only."""
    rows, m, _ = q.size()
    n = k.size(1)
    head_dim = tc.specialize(q.size(2))
    half = (m + 1) // 2
    out = torch.empty_like(q)
    qk_scale = scale * LOG2E
    for tile_bh, tile_m in tc.tile([rows, half], block_size=[1, None]):
        second = tile_m.index + half
        qa = q[tile_bh, tile_m, :].squeeze(0)
        qb = q[tile_bh, second, :].squeeze(0)
        ma = tc.full([tile_m], float("-inf"), dtype=torch.float32)
        mb = tc.full([tile_m], float("-inf"), dtype=torch.float32)
        la = tc.zeros([tile_m], dtype=torch.float32)
        lb = tc.zeros([tile_m], dtype=torch.float32)
        acc_a = tc.zeros([tile_m, head_dim], dtype=torch.float32)
        acc_b = tc.zeros([tile_m, head_dim], dtype=torch.float32)
        for tile_n in tc.tile(n):
            key = k[tile_bh, tile_n, :].squeeze(0)
            value = v[tile_bh, tile_n, :].squeeze(0)
            sa = torch.mm(qa, key.T, torch.float32) * qk_scale
            sb = torch.mm(qb, key.T, torch.float32) * qk_scale
            ma, la, acc_a = _step(ma, la, acc_a, sa, value)
            mb, lb, acc_b = _step(mb, lb, acc_b, sb, value)
        out[tile_bh, tile_m, :] = (acc_a / la[:, None]).to(out.dtype)[None, :, :]
        out[tile_bh, second, :] = (acc_b / lb[:, None]).to(out.dtype)[None, :, :]
    return out


def run(name: str, q, k, v, causal: bool, config: tc.Config):  # type: ignore[no-untyped-def]
    if name == "production":  # tilecraft.nn.attention's forward, the same tiles
        fields = config.to_dict()
        bm, bn = fields["block_sizes"]
        rows, seq, d = q.shape
        heads = [t.view(1, rows, seq, d) for t in (q, k, v)]
        args = (*heads, q.new_empty(0), causal, 1.0 / math.sqrt(d), 0, False)
        blocks = [bm] + [bn] * (2 if causal else 1)
        launcher = attention_forward.bind(args).compile(
            tc.Config(**{**fields, "block_sizes": blocks})
        )
        return lambda: launcher(*args)[0].view(rows, seq, d)
    if name == "paired":
        fields = config.to_dict()
        bm, bn = fields["block_sizes"]
        args = (q, k, v, 1.0 / math.sqrt(q.size(2)))
        launcher = paired.bind(args).compile(tc.Config(**{**fields, "block_sizes": [bm // 2, bn]}))
        return lambda: launcher(*args)
    shift, lazy, fused = VARIANTS[name]
    kernel = contracted if fused else exact
    args = (q, k, v, causal, 1.0 / math.sqrt(q.size(2)), shift, lazy)
    launcher = kernel.bind(args).compile(config)
    return lambda: launcher(*args)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--smoke", action="store_true")
    ns = parser.parse_args()
    device = "cpu" if ns.smoke else "cuda"
    dtype = torch.float32 if ns.smoke else torch.bfloat16
    shapes = [(1, 2, 70, 16)] if ns.smoke else [(4, 16, 4096, 128), (8, 32, 2048, 64)]
    configs = [tc.Config(block_sizes=[32, 16])] if ns.smoke else None
    results = []
    for b, h, s, d in shapes:
        q, k, v = (torch.randn(b * h, s, d, device=device, dtype=dtype) for _ in range(3))
        for causal in (False, True):
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            tiles = configs or _configs(d)
            for config in tiles:
                for name in ["production", *VARIANTS, *([] if causal else ["paired"])]:
                    results.append(_measure(name, q, k, v, causal, config, ref, ns.smoke))
                    print(json.dumps(results[-1]), flush=True)
        if ns.out:
            Path(ns.out).write_text(json.dumps(results, indent=1))
    for row in results:
        speed = (
            f"{row['tflops']:6.0f} TFLOP/s {row['ms']:.3f} ms"
            if "ms" in row
            else row.get("error", "")
        )
        case = f"{row['shape']} causal={row['causal']:d} {row['config']:>60}"
        print(f"{case} {row['variant']:>10} {speed}")


def _configs(head_dim: int) -> list[tc.Config]:
    big = [(256, 64, 8, 3), (128, 128, 8, 3)]
    small = [(128, 64, 4, 3), (256, 64, 8, 3)]
    shapes = big if head_dim == 128 else small
    return [tc.Config(block_sizes=[bm, bn], num_warps=w, num_stages=st) for bm, bn, w, st in shapes]


def _measure(name, q, k, v, causal, config, ref, smoke):  # type: ignore[no-untyped-def]
    row = {"variant": name, "shape": list(q.shape), "causal": causal, "config": str(config)}
    try:
        call = run(name, q, k, v, causal, config)
        out = call()
        row["max_err"] = float((out.float() - ref.float()).abs().max())
        if not smoke:
            from triton.testing import do_bench

            ms = do_bench(call, warmup=50, rep=300)
            rows, seq, d = q.shape
            flops = 4 * rows * seq * seq * d / (2 if causal else 1)
            row.update(ms=ms, tflops=flops / ms / 1e9)
    except Exception as e:  # noqa: BLE001  (a variant that fails is recorded, not fatal)
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return row


if __name__ == "__main__":
    main()
