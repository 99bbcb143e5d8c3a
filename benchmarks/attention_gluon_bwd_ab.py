"""A/B of attention's backward on an sm_90 GPU: cuDNN, the `tl` backward, the FA3-style probe
(`attention_gluon_bwd_fa3.py`) and tilecraft's Gluon backward (`attention_sm90.backward`, as
it ships and with one knob changed each), all from the same inputs in one process, with each
one's largest gradient error against cuDNN's; and what the Gluon backward spends outside its
main kernel (the row-terms pre-pass, dQ's cast).

GPU:  cd benchmarks && python attention_gluon_bwd_ab.py [--quick] --out $OUT/ab.json
"""

import argparse
import importlib

import torch
import triton
from attention_gluon_bwd_fa3 import Config, _dump, _print_case, attention_bwd
from attention_gluon_bwd_probe import logsumexp_rows, sdpa_grads, tflops
from attention_gluon_probe import SHAPES


def bench_integrated(shape, causal: bool, quick: bool = False) -> list[dict]:
    """tilecraft's Gluon backward (`attention_sm90.backward`, from the tl forward's output and
    statistics) as it ships and with one knob changed each (the old register split at head
    dim 64; unless `quick`, FMA contraction and three stages), the probe's best, and cuDNN,
    one process."""
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
    variants: dict[str, dict] = {"tc": {}, "tc_dqbufs1": dict(DQ_BUFFERS=1)}
    if not quick:
        variants["tc_fusion1"] = dict(BACKWARD_FP_FUSION=True)
    if not quick and shape[3] == 64:  # a deeper ring where shared memory allows it
        variants["tc_stages3"] = dict(BACKWARD_STAGES=3)
    for name, knobs in variants.items():
        saved = {knob: getattr(sm90, knob) for knob in knobs}
        for knob, value in knobs.items():
            setattr(sm90, knob, value)
        got = sm90.backward(do, q, k, v, out, stats, causal, scale)
        if got is None:  # it failed (and warned): the tl backward would have run
            rows.append(dict(case, impl=name, error="failed (warned)"))
        else:
            ms = triton.testing.do_bench(
                lambda: sm90.backward(do, q, k, v, out, stats, causal, scale), warmup=25, rep=100
            )
            speed = tflops(shape, causal, ms)
            rows.append(dict(case, impl=name, ms=ms, tflops=speed, err=err(got)))
        for knob, value in saved.items():
            setattr(sm90, knob, value)
    base = next(r["ms"] for r in rows if r["impl"] == "tc")
    for name, ms in _overhead(sm90, do, out, stats):
        rows.append(dict(case, impl=f"tc_{name}", ms=ms, share=ms / base))
    return rows


def _overhead(sm90, do, out, stats) -> list[tuple[str, float]]:
    """Milliseconds of what the Gluon backward runs besides its main kernel, each alone: the
    row-terms pre-pass (which zeroes dQ) and dQ's cast."""
    batch, heads, seq_q, dim = do.shape
    rows = sm90.BACKWARD_ROWS
    padded = -(-seq_q // rows) * rows
    dq = torch.empty(batch, heads, padded, dim, device=do.device)
    terms = torch.empty(2, batch * heads, padded, device=do.device)
    strides = (*out.stride()[:3], *do.stride()[:3])
    args = (out, do, stats, terms, dq, heads, seq_q, *strides)
    pre_pass = sm90._gluon_backward().row_terms[(padded // rows, batch * heads)]
    parts = dict(
        row_terms=lambda: pre_pass(*args, DIM=dim, ROWS=rows),
        cast=lambda: dq[:, :, :seq_q].to(do.dtype, memory_format=torch.contiguous_format),
    )
    return [(name, triton.testing.do_bench(fn, warmup=10, rep=50)) for name, fn in parts.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out")
    parser.add_argument("--quick", action="store_true", help="fewer tilecraft variants")
    args = parser.parse_args()
    rows = []
    for shape, causal in [(s, c) for s in SHAPES for c in (False, True)]:
        case_rows = bench_integrated(shape, causal, args.quick)
        _print_case(case_rows)
        rows += case_rows
    _dump(args.out, rows)


if __name__ == "__main__":
    main()
