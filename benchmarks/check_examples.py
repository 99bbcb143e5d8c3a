"""Check every example kernel on the GPU in each dtype, on ragged shapes, against PyTorch.

Usage: python benchmarks/check_examples.py [NAME ...] [--part K/N]
(writes $OUT/check_examples.json if OUT is set; `--part 2/4` checks every fourth example,
starting at the second, so four processes can share the GPU and its compile time)
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

os.environ.setdefault("TILECRAFT_AUTOTUNE_EFFORT", "none")  # check the default configs

import tilecraft as tc  # noqa: E402
from tilecraft.testing import REL_ERROR_LIMITS, relative_error  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(1, 1000), (129, 1000), (1000, 4097), (4096, 768)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# model examples whose main() trains a few steps on the device, checking losses against PyTorch
TRAINING = ["resnet_block"]


def load_examples(names: list[str] | None = None, part: str = "1/1") -> list:
    """Every example module, imported by name once (examples import each other, and a
    second copy of a module would register its PyTorch operators twice)."""
    sys.path.insert(0, str(ROOT / "examples"))
    stems = [p.stem for p in sorted((ROOT / "examples").glob("*.py"))]
    stems = [s for s in stems if not names or s in names]
    k, n = (int(v) for v in part.split("/"))
    return [importlib.import_module(s) for s in stems[k - 1 :: n]]


def _tensors(value) -> list:
    """A kernel's outputs as a list (backward kernels return several)."""
    return list(value) if isinstance(value, (tuple, list)) else [value]


def check(module, kernel, shape, dtype) -> dict:
    row = {
        "example": module.__name__,
        "kernel": kernel.__name__,
        "shape": shape,
        "dtype": str(dtype).removeprefix("torch."),
    }
    try:
        torch.manual_seed(0)
        args = module.inputs(shape=shape, dtype=dtype, device="cuda")
        start = time.perf_counter()
        out = kernel(*args)
        torch.cuda.synchronize()
        row["first_call_s"] = round(time.perf_counter() - start, 3)
        outs, refs = _tensors(out), _tensors(module.reference(*args))
        err = max(relative_error(o, r) for o, r in zip(outs, refs, strict=True))
        row["rel_err"] = err
        limit = REL_ERROR_LIMITS[dtype]
        if not all(torch.isfinite(o).all() for o in outs) or err > limit:
            raise AssertionError(f"relative error {err:.2e} > {limit:.0e}")
        row["status"] = "ok"
    except Exception as e:  # report every failure, keep going
        row["status"] = f"FAIL {type(e).__name__}: {str(e)[:300]}"
        row["trace"] = traceback.format_exc()[-2000:]
    return row


def check_training(name: str) -> dict:
    """Run a model example's main() on the device (it raises if its losses differ)."""
    row = {"example": name, "kernel": "main (training)", "shape": None, "dtype": "float32"}
    try:
        torch.manual_seed(0)
        start = time.perf_counter()
        importlib.import_module(name).main()
        row["first_call_s"] = round(time.perf_counter() - start, 3)
        row["status"] = "ok"
    except Exception as e:
        row["status"] = f"FAIL {type(e).__name__}: {str(e)[:300]}"
        row["trace"] = traceback.format_exc()[-2000:]
    return row


def main(argv: list[str]) -> int:
    part = argv[argv.index("--part") + 1] if "--part" in argv else "1/1"
    names = [a for a in argv if not a.startswith("--") and a != part]
    rows = []
    modules = load_examples(names, part)
    for module in modules:
        kernels = [v for v in vars(module).values() if isinstance(v, tc.Kernel)]
        for kernel in kernels:
            for shape in SHAPES:
                for dtype in DTYPES:
                    rows.append(check(module, kernel, shape, dtype))
                    print(
                        rows[-1]["example"],
                        rows[-1]["kernel"],
                        shape,
                        rows[-1]["dtype"],
                        rows[-1]["status"][:200],
                        flush=True,
                    )
    for name in [m.__name__ for m in modules if m.__name__ in TRAINING]:
        rows.append(check_training(name))
        print(name, "main (training)", rows[-1]["status"][:200], flush=True)
    failed = [r for r in rows if r["status"] != "ok"]
    print(f"{len(rows) - len(failed)} passed, {len(failed)} failed")
    if os.environ.get("OUT"):
        name = "check_examples" + (f"_{part.replace('/', 'of')}" if part != "1/1" else "")
        Path(os.environ["OUT"], f"{name}.json").write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
