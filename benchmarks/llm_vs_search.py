"""LLM-guided, hybrid and classifier-guided search compared on example kernels: configs
tried, tuning wall time and the resulting kernel time. Needs a model endpoint, so it is
not run in CI (no model is reachable from the project's machines).

Usage::

    TILECRAFT_LLM_PROVIDER=openai TILECRAFT_LLM_MODEL=gpt-4o OPENAI_API_KEY=... \\
        python benchmarks/llm_vs_search.py [--max-configs 200] [--budget-s 300]

A local OpenAI-compatible server (vLLM, Ollama, ...): also set TILECRAFT_LLM_BASE_URL,
e.g. http://localhost:8000/v1. Writes $OUT/llm_vs_search.json when OUT is set.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from triton.testing import do_bench

import tilecraft as tc
from tilecraft.autotune.llm import load_provider
from tilecraft.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
SEARCHES = ("llm", "llm-hybrid", "classifier")
# example module -> (kernel name, inputs(shape=...))
CASES = {
    "matmul": ("matmul", (2048, 2048, 2048)),
    "softmax": ("softmax", (4096, 2048)),
    "layer_norm": ("layer_norm", (4096, 4096)),
    "sum": ("sum_rows", (4096, 8192)),
}


def tune_once(module: Any, kernel_name: str, shape: tuple, search: str, args: Any) -> dict:
    """Tune a fresh kernel (own cache dir: no earlier results) with `search`; time it."""
    os.environ["TILECRAFT_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"tilecraft-{search}-")
    kernel = tc.kernel(getattr(module, kernel_name).fn)
    inputs = module.inputs(shape=shape)
    started = time.perf_counter()
    kernel.autotune(inputs, search=search, max_configs=args.max_configs, budget_s=args.budget_s)
    tuning_s = time.perf_counter() - started
    bound = kernel.bind(inputs)
    kernel_ms = do_bench(lambda: kernel(*inputs)) if torch.cuda.is_available() else None
    return {
        "kernel": f"{kernel_name}{list(shape)}",
        "search": search,
        "configs": bound.tuning.get("configs"),
        "tuning_s": round(tuning_s, 2),
        "kernel_ms": kernel_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-configs", type=int, default=200)
    parser.add_argument("--budget-s", type=float, default=300.0)
    args = parser.parse_args()
    provider, reason = load_provider(Settings())
    if provider is None:
        sys.exit(f"llm_vs_search: no model to compare: {reason}")
    sys.path.insert(0, str(ROOT / "examples"))
    rows = []
    for name, (kernel_name, shape) in CASES.items():
        module = importlib.import_module(name)
        for search in SEARCHES:
            row = tune_once(module, kernel_name, shape, search, args)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "llm_vs_search.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
