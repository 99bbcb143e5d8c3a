"""An isolated benchmarking process: reads jobs as JSON lines on stdin, answers on stdout.

Started by the Benchmarker as `python -m tilecraft.autotune.worker ARGS REF`; a candidate
that crashes or hangs takes down only this process, which the Benchmarker restarts.
"""

from __future__ import annotations

import json
import os
import sys

import torch

from tilecraft.autotune.runner import run_job
from tilecraft.runtime.cpu import runs_on_cpu


def main() -> None:
    args = torch.load(sys.argv[1], weights_only=False)
    expected = torch.load(sys.argv[2], weights_only=False)
    if runs_on_cpu(args):  # this process runs only these arguments' kernels
        os.environ["TRITON_INTERPRET"] = "1"
    out = sys.stdout
    sys.stdout = sys.stderr  # stray prints from kernels must not break the protocol
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        result = run_job(json.loads(line), args, expected)
        out.write(json.dumps(result) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
