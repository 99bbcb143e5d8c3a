"""Probe: what the attention backward's single pass (`atomic_dq`) pays for its dQ adds.

Times, on a GPU, the two-pass default and single-pass configs, and the single pass with
dQ's relaxed atomic add replaced by a plain store (wrong dQ, same products: the time
without the reduction) and with no dQ write at all (the products dK and dV need only).
Key tiles of 128 halve dQ's additions; they fit shared memory with fewer stages.

    python benchmarks/attention_single_pass_probe.py --out $OUT/single_pass.json
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import tilecraft as tc  # noqa: E402
from tilecraft.nn import attention_tiles  # noqa: E402
from tilecraft.nn.attention import attention_backward, attention_forward  # noqa: E402

SHAPES = [(4, 16, 4096, 128), (8, 32, 2048, 64)]
TMA = "tensor_descriptor"
# (dK/dV key tile, its query tile, warps, stages, indexing)
SINGLE = [(64, 64, 4, 3, TMA), (128, 64, 8, 1, TMA), (128, 32, 4, 2, TMA), (128, 32, 8, 2, TMA)]
SINGLE += [(128, 64, 8, 1, None), (128, 32, 4, 1, TMA), (128, 64, 4, 1, TMA)]
REAL = attention_tiles._sink_grads


def _stored(sink, ds, key, row, tile_m, tile_n):  # type: ignore[no-untyped-def]
    dq_rows, dq_row, grad_bias, scale = sink
    part = torch.mm(ds.to(key.dtype).T, key, torch.float32) * scale
    dq_rows[dq_row, tile_m, :] = part[None, :, :]


def _dropped(sink, ds, key, row, tile_m, tile_n):  # type: ignore[no-untyped-def]
    pass


def config(entry: tuple, count: int, causal: bool) -> tc.Config:
    kv_n, kv_m, warps, stages, indexing = entry
    # the single pass has no dQ key loops: its blocks are the delta pass's query tile, then
    # dK/dV's key tile and query tiles (`count` is the two passes' block count)
    loops = 2 if causal else 1
    blocks = ([64, kv_n] + [kv_m] * count)[: count - loops]
    extra = {"indexing": indexing} if indexing else {}
    return tc.Config(block_sizes=blocks, num_warps=warps, num_stages=stages, atomic_dq=True,
                     l2_groupings=[4, 4], **extra)  # fmt: skip


def time_variant(bargs: tuple, entry: tuple | None, causal: bool, want: tuple) -> dict:
    """One variant's errors against the two passes and its median time; compiled afresh
    (the kernel's bound copies forgotten: `_sink_grads` may have changed)."""
    attention_backward._bound.clear()
    bound = attention_backward.bind(bargs)
    count = len(bound.spec.blocks)
    cfg = bound.default_config if entry is None else config(entry, count, causal)
    launcher = bound.compile(cfg)
    got = launcher(*bargs)
    errors = [
        (a.float() - b.float()).abs().max().item() for a, b in zip(got[:2], want[:2], strict=True)
    ]
    ms = triton.testing.do_bench(lambda: launcher(*bargs), warmup=10, rep=40, return_mode="median")
    return dict(dq_err=errors[0], dk_err=errors[1], ms=ms)


def case(shape: tuple, causal: bool) -> list[dict]:
    batch, heads, seq, dim = shape
    q, k, v, grad = (torch.randn(shape, dtype=torch.bfloat16, device="cuda") for _ in range(4))
    args = (q, k, v, q.new_empty(0), causal, dim**-0.5, 0, False)
    out, stats = attention_forward(*args)
    bargs = (grad, q, k, v, q.new_empty(0), out, stats, causal, dim**-0.5, 0, False)
    rows = []
    want = attention_backward(*bargs)
    flop = 2.5 * 4.0 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
    variants = [("two passes (default)", None, REAL)]
    variants += [(f"single {e}", e, REAL) for e in SINGLE]
    variants += [(f"stored {e}", e, _stored) for e in SINGLE[:3]]
    variants += [(f"no dQ {e}", e, _dropped) for e in SINGLE[:3]]
    for name, entry, sink in variants:
        attention_tiles._sink_grads = sink
        row = dict(shape=list(shape), causal=causal, variant=name)
        try:
            row.update(time_variant(bargs, entry, causal, want))
            row["tflops"] = flop / row["ms"] * 1e-9
        except Exception as e:  # noqa: BLE001 - recorded
            row["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        finally:
            attention_tiles._sink_grads = REAL
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for shape in SHAPES:
        for causal in (False, True):
            rows += case(shape, causal)
            if args.out:
                args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
