"""Random configs of the tilecraft.nn kernels, each checked against the kernel's eager mode.

Tuning compares every candidate with the default config's outputs, so a compiler that
miscompiles the default config (Triton 3.6 did, at small convolution shapes) or a few
candidates goes unseen there. This runs the attention and convolution kernels at small,
ragged shapes with their default config and random ones, compares each with the kernel
run eagerly (PyTorch ops, no Triton), and writes every disagreement to a JSON file:

    PYTHONPATH=$PWD python benchmarks/check_configs.py [--configs 20] [--dtype bfloat16]
    TRITON_INTERPRET=1 PYTHONPATH=$PWD python benchmarks/check_configs.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

import tilecraft as tc  # noqa: E402
from tilecraft.autotune.runner import fresh, mismatch, outputs  # noqa: E402
from tilecraft.autotune.space import space_of  # noqa: E402
from tilecraft.nn.attention import attention_backward, attention_forward  # noqa: E402
from tilecraft.nn.conv2d import bwd, plan  # noqa: E402

Case = tuple[str, tc.Kernel, tuple]


def attention_cases(seq: int, head_dim: int, randn: Any) -> list[Case]:
    """Forward and backward, causal and not, of one ragged sequence of two heads."""
    found: list[Case] = []
    q, k, v = (randn(1, 2, seq, head_dim) for _ in range(3))
    scale = head_dim**-0.5
    for causal in (False, True):
        args = (q, k, v, q.new_empty(0), causal, scale, 0, False)
        out, stats = attention_forward.run_eagerly(args)
        backward = (randn(*out.shape), q, k, v, q.new_empty(0), out, stats, *args[4:])
        found.append((f"attention_forward causal={causal}", attention_forward, args))
        found.append((f"attention_backward causal={causal}", attention_backward, backward))
    return found


def conv_cases(randn: Any) -> list[Case]:
    """Forward kernels of each kind, and a grouped convolution's two gradients (a one-image
    3x3 forward and this weight gradient were the ones Triton 3.6 got wrong)."""
    found: list[Case] = []
    layers = (
        ("conv2d one small image", (1, 3, 6, 5), (4, 3, 3, 3), False, {"padding": 1}),
        ("conv2d strided", (2, 8, 9, 7), (6, 8, 3, 3), True, {"stride": 2, "padding": 1}),
        ("conv2d depthwise", (2, 6, 7, 5), (6, 1, 3, 3), True, {"padding": 1, "groups": 6}),
        ("conv2d 1x1", (2, 8, 5, 5), (4, 8, 1, 1), True, {}),
    )
    for name, x_shape, w_shape, channels_last, options in layers:
        op, args = plan(randn(*x_shape, channels_last=channels_last), randn(*w_shape), **options)
        found.append((name, op.kernel, args))
    _, args = plan(randn(1, 4, 5, 4, channels_last=True), randn(6, 2, 3, 3), padding=1, groups=2)
    x, w, shape, groups = args[0], args[1], args[4:10], args[10]
    grad = randn(1, 6, 5, 4, channels_last=True)
    found.append(("conv2d input grad", bwd.conv2d_input_grad, (grad, w, x, *shape, groups, True)))
    found.append(("conv2d weight grad", bwd.conv2d_weight_grad, (grad, x, w, *shape, groups)))
    return found


def check(kernel: tc.Kernel, args: tuple, count: int, seed: int = 0) -> dict[str, Any]:
    """The default config and `count` random ones of `kernel` on `args`, each compared with
    the eager run: how many agreed, which disagreed (config and why), how many failed to
    compile or run and why (configs the kernel refuses among them)."""
    bound = kernel.bind(args)
    eager_args = fresh(args)
    want = outputs(kernel.run_eagerly(eager_args), eager_args)
    space = space_of(bound, torch.cuda.is_available())
    rng = random.Random(seed)
    configs = [bound.default_config] + [space.random(rng) for _ in range(count)]
    agreed, wrong, failed = 0, [], []
    for config in configs:
        run_args = fresh(args)
        try:
            got = outputs(bound.compile(config)(*run_args), run_args)
        except Exception as e:  # noqa: BLE001 - a config that does not compile or run
            error = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
            failed.append({"config": config.to_dict(), "error": error[:300]})
            continue
        why = mismatch(got, want)
        if why:
            wrong.append({"config": config.to_dict(), "why": why})
        else:
            agreed += 1
    return {"agreed": agreed, "wrong": wrong, "failed": failed}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="smaller shapes, on the CPU")
    p.add_argument("--configs", type=int, default=20, help="random configs per kernel")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    p.add_argument("--seed", type=int, default=0)
    default_out = ROOT / "benchmarks" / "results" / "check_configs.json"
    p.add_argument("--out", type=Path, default=default_out, help="where the JSON goes")
    args = p.parse_args(argv)
    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read when generated code is loaded
    dtype = getattr(torch, args.dtype)

    def randn(*shape: int, channels_last: bool = False) -> torch.Tensor:
        t = torch.randn(*shape, device=device, dtype=dtype)
        return t.to(memory_format=torch.channels_last) if channels_last else t

    torch.manual_seed(args.seed)
    seq, head_dim = (9, 16) if args.smoke else (37, 64)
    results = []
    for name, kernel, kernel_args in attention_cases(seq, head_dim, randn) + conv_cases(randn):
        found = {"case": name, **check(kernel, kernel_args, args.configs, args.seed)}
        print(f"{name}: {found['agreed']} agreed, {len(found['wrong'])} wrong, "
              f"{len(found['failed'])} failed", flush=True)  # fmt: skip
        for bad in found["wrong"]:
            print(f"    {bad['why']}: {bad['config']}", flush=True)
        for error in sorted({bad["error"] for bad in found["failed"]}):
            print(f"    failed: {error}", flush=True)
        results.append(found)
        data = {"device": device, "dtype": args.dtype, "configs": args.configs, "results": results}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1) + "\n")  # each case: a cut run keeps it
    print(f"wrote {args.out}")
    return data


if __name__ == "__main__":
    main()
