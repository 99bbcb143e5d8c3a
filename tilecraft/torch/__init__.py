"""PyTorch integration: tilecraft kernels as `torch.library` custom operators."""

from __future__ import annotations

from tilecraft.torch.ops import OpRegistrationError, TorchOp, as_torch_op

__all__ = ["OpRegistrationError", "TorchOp", "as_torch_op"]
