"""The tile IR of example kernels: its text form, and the shapes and ops it holds."""

from __future__ import annotations

import matmul
import softmax_two_pass
import torch

import tilecraft as tc
from tilecraft.ir.printer import format_kernel


def test_ir_prints_blocks_loops_and_typed_ops() -> None:
    bound = softmax_two_pass.softmax_two_pass.bind(softmax_two_pass.inputs(device="cpu"))
    (kernel,) = bound.analyze(bound.default_config).kernels
    text = format_kernel(kernel)
    assert text.startswith("kernel _softmax_two_pass_kernel(")
    assert "loop b1 carry(row_max, row_sum):" in text
    assert "reduce(" in text and "kind='max'" in text and "float32[b0, b1]" in text


def test_matmul_ir_has_a_dot_over_the_k_block() -> None:
    x, y = matmul.inputs(shape=(40, 70, 24), device="cpu")
    bound = matmul.matmul.bind((x, y))
    (kernel,) = bound.analyze(tc.Config(block_sizes=[16, 16, 32])).kernels
    ops = {op.name for op in kernel.walk()}
    assert {"load", "dot", "store", "full"} <= ops
    dot = next(op for op in kernel.walk() if op.name == "dot")
    assert dot.out is not None and dot.out.type.dtype == torch.float32
    assert [kernel.blocks[b].fixed_size for b in kernel.grid_blocks] == [16, 16]
