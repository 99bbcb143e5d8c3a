"""Debugging calls in device code: `device_print` and `breakpoint` (Helion's names).

Both act in eager mode (TILECRAFT_INTERPRET=1), where the kernel body is PyTorch code;
compiled kernels leave them out, with a warning naming the line, as they do `print`.
"""

from __future__ import annotations

import builtins

import torch

from tilecraft.language.state import eager_context


def device_print(prefix: str, *values: torch.Tensor | float) -> None:
    """Print `prefix` and `values` (tiles or numbers) each time the line runs, in eager
    mode; compiled kernels leave the call out.

    Example::

        tc.device_print("row max:", row_max)
    """
    eager_context("device_print")
    print(prefix, *values)


def breakpoint() -> None:  # noqa: A001 (Helion's name)
    """Stop in Python's debugger here, in eager mode (the kernel's tiles are its locals);
    compiled kernels leave the call out.

    Example::

        if tc.tile_id(tile) == 3:
            tc.breakpoint()
    """
    eager_context("breakpoint")
    builtins.breakpoint()


LEFT_OUT = (builtins.print, device_print, breakpoint)  # calls compiled code leaves out
