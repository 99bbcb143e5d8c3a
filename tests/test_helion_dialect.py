"""Helion-dialect kernels (tests/helion_dialect.py) run unchanged in both CPU modes, or
fail with a tilecraft error that names the missing feature."""

from __future__ import annotations

import helion_dialect
import pytest
import torch

from tilecraft import exc

CASES = helion_dialect.CASES()
# Cases whose features have not landed yet: each must fail with a clear tilecraft error
# (never a wrong answer); remove an entry as its feature lands (strict xfail says when).
MISSING: dict[str, str] = {}
# Eager mode slices a tile short at a tensor's end, where compiled code masks the lanes:
# a register_block_size accumulator then has more lanes than the last chunk (known bug).
EAGER_SHORT_TILES: set[str] = set()


@pytest.mark.parametrize("name", sorted(CASES))
def test_helion_kernel_ports_by_imports_alone(mode, name: str) -> None:
    kernel, args, reference = CASES[name]
    if mode.name == "eager" and name in EAGER_SHORT_TILES:
        with pytest.raises(RuntimeError, match="must match the size"):  # a known bug
            mode(kernel)(*args)
        return
    if name in MISSING and mode.name == "triton":  # eager mode runs PyTorch itself
        with pytest.raises(exc.TilecraftError, match=MISSING[name]):
            mode(kernel)(*args)
        return
    actual = mode(kernel)(*args)
    expected = reference(*args)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
