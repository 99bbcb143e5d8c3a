"""tilecraft.nn: neural-network kernels written in tilecraft (their sources read as examples).

- `attention`: flash attention forward and backward (causal or not, grouped-query and
  multi-query heads), one differentiable operator (`torch.ops.tilecraft_nn.attention`);
  `attention_varlen` over packed sequences of different lengths, differentiable too;
- `causal_conv1d`: the depthwise causal 1-D convolution of state-space models, with an
  optional fused bias and SiLU;
- `conv2d`: `F.conv2d` (NCHW or channels-last, stride, padding, dilation, groups,
  depthwise) with a fused bias, activation and residual epilogue, forward and backward;
- `conv2d_nhwc`: 2-D convolution of channels-last images as implicit GEMMs, forward and
  backward (input and weight gradients), one differentiable operator.
"""

from __future__ import annotations

from tilecraft.nn.attention import attention
from tilecraft.nn.conv import causal_conv1d, conv2d_nhwc
from tilecraft.nn.conv2d import conv2d
from tilecraft.nn.varlen import attention_varlen

__all__ = ["attention", "attention_varlen", "causal_conv1d", "conv2d", "conv2d_nhwc"]
