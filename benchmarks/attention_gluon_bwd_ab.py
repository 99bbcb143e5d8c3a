"""A/B of attention's backward on an sm_90 GPU: cuDNN, the `tl` backward, the FA3-style probe
(`attention_gluon_bwd_fa3.py`) and tilecraft's Gluon backward (`attention_sm90.backward`, FMA
contraction off and on), all from the same inputs in one process, with each one's largest
gradient error against cuDNN's; and what the Gluon backward spends outside its main kernel
(the row-terms pre-pass, dQ's zeroing, the descriptors, dQ's cast).

GPU:  cd benchmarks && python attention_gluon_bwd_ab.py [--quick] --out $OUT/ab.json
"""

import argparse
import importlib
from collections import defaultdict
from types import SimpleNamespace

import torch
import triton
from attention_gluon_bwd_fa3 import Config, _dump, _print_case, attention_bwd
from attention_gluon_bwd_probe import logsumexp_rows, sdpa_grads, tflops
from attention_gluon_probe import SHAPES


def bench_integrated(shape, causal: bool, quick: bool = False) -> list[dict]:
    """tilecraft's Gluon backward (`attention_sm90.backward`, from the tl forward's output and
    statistics) with FMA contraction off and on, the probe's best, and cuDNN, one process."""
    from torch.nn.attention import SDPBackend

    sm90 = importlib.import_module("tilecraft.nn.attention_sm90")
    nn_attention = importlib.import_module("tilecraft.nn.attention")
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    scale = shape[3] ** -0.5
    out, stats = nn_attention.attention_forward(q, k, v, q.new_empty(0), causal, scale, 0, False)
    case = dict(shape=list(shape), causal=causal)
    _, grads = sdpa_grads(q, k, v, do, causal, SDPBackend.CUDNN_ATTENTION)
    ms = triton.testing.do_bench(grads, warmup=25, rep=100)
    rows = [dict(case, impl="cudnn", ms=ms, tflops=tflops(shape, causal, ms))]
    refs = [r.float() for r in grads()]

    def err(got) -> float:
        pairs = zip(got, refs, strict=True)
        return max(((g.float() - r).abs().max() / r.abs().max()).item() for g, r in pairs)

    bias = q.new_empty(0)
    tl_args = (do, q, k, v, bias, out, stats, causal, scale, 0, False)
    ms = triton.testing.do_bench(lambda: nn_attention.attention_backward(*tl_args), rep=100)
    tl_err = err(nn_attention.attention_backward(*tl_args)[:3])
    rows.append(dict(case, impl="tl", ms=ms, tflops=tflops(shape, causal, ms), err=tl_err))
    lse = logsumexp_rows(q, k, causal)
    cfg = Config(64, 2, 2 if shape[3] == 64 else 1)
    _, launch = attention_bwd(q, k, v, out, do, lse, causal, cfg)
    ms = triton.testing.do_bench(launch, warmup=25, rep=100)
    rows.append(dict(case, impl="probe", ms=ms, tflops=tflops(shape, causal, ms)))
    for fusion in (False,) if quick else (False, True):
        sm90.BACKWARD_FP_FUSION = fusion
        ms = triton.testing.do_bench(
            lambda: sm90.backward(do, q, k, v, out, stats, causal, scale), warmup=25, rep=100
        )
        got = err(sm90.backward(do, q, k, v, out, stats, causal, scale))
        name = f"tc_fusion{int(fusion)}"
        rows.append(dict(case, impl=name, ms=ms, tflops=tflops(shape, causal, ms), err=got))
    sm90.BACKWARD_FP_FUSION = False
    ms = triton.testing.do_bench(lambda: _overhead(sm90, do, q, k, v, out, stats, causal, scale))
    return [*rows, dict(case, impl="tc_overhead", ms=ms, tflops=tflops(shape, causal, ms))]


def _overhead(sm90, *args) -> None:
    """`sm90.backward` with its main kernel not launched: the pre-pass, dQ's zeroing, the
    descriptors and dQ's cast."""
    real = sm90._gluon_backward
    nothing = defaultdict(lambda: lambda *args, **options: None)  # [grid](...): no launch
    sm90._gluon_backward = lambda: SimpleNamespace(row_terms=real().row_terms,
                                                   attention_backward_sm90=nothing)  # fmt: skip
    try:
        sm90.backward(*args)
    finally:
        sm90._gluon_backward = real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out")
    parser.add_argument("--quick", action="store_true", help="tilecraft without FMA contraction")
    args = parser.parse_args()
    rows = []
    for shape, causal in [(s, c) for s in SHAPES for c in (False, True)]:
        case_rows = bench_integrated(shape, causal, args.quick)
        _print_case(case_rows)
        rows += case_rows
    _dump(args.out, rows)


if __name__ == "__main__":
    main()
