"""Sweep rows-per-program and warps for the row-reduction examples at 8192x8192 bf16.

Shows how far the default config is from the best hand-picked one (a check on the
default heuristics, not a tuner). Usage: python benchmarks/sweep_rows.py
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from triton.testing import do_bench

import tilecraft as tc

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("softmax", "softmax"),
    ("rms_norm", "rms_norm"),
    ("layer_norm", "layer_norm"),
    ("cross_entropy", "cross_entropy"),
]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    for name, kernel_name in CASES:
        sweep(load(name), kernel_name)


def sweep(module, kernel_name: str) -> None:
    kernel = getattr(module, kernel_name)
    args = module.inputs(shape=(8192, 8192), dtype=torch.bfloat16, device="cuda")
    bound = kernel.bind(args)
    default = do_bench(lambda: bound.compile()(*args), return_mode="median")
    print(f"{kernel_name}: default {bound.default_config} {default * 1e3:.1f} us", flush=True)
    for rows in (1, 2, 4):
        for warps in (4, 8, 16, 32):
            launcher = bound.compile(tc.Config(block_sizes=[rows], num_warps=warps))
            ms = do_bench(lambda launcher=launcher: launcher(*args), return_mode="median")
            print(f"  rows={rows} warps={warps}: {ms * 1e3:.1f} us", flush=True)


if __name__ == "__main__":
    main()
