"""Helpers that Helion kernels call in host code, outside their device loops."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """`a / b` rounded up: the number of blocks of size `b` covering `a` elements.

    Example::

        partials = x.new_empty([tilecraft.cdiv(m, block_m), n])
    """
    return -(a // -b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two at least `n` (1 for `n <= 1`).

    Example::

        padded = tilecraft.next_power_of_2(x.size(1))
    """
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


INT_HELPERS = (cdiv, next_power_of_2)  # arithmetic on ints, in host or device code


def register_reduction_dim(size: int) -> int:
    """Declare a dimension that device code holds whole: `tc.zeros([tile_m, n])` and
    `y[tile_k, :]` then have the same dim. Sizes used on the device are specialized on
    already, so this returns `size` (Helion's name, for ported kernels).

    Example::

        n = tc.register_reduction_dim(y.size(1))
        acc = tc.zeros([tile_m, n], dtype=torch.float32)
    """
    return size


def barrier() -> None:
    """Helion's barrier between top-level loops: everything the loop before it stored is
    visible to the loop after it. Each top-level loop is a kernel launch of its own, run
    after the one before, so there is nothing left to do.

    Example::

        for tile in tc.tile(n):
            partial[tile] = x[tile] * 2
        tc.barrier()
        for tile in tc.tile(n):
            out[tile] = partial[tile] + partial[n - 1]
    """
