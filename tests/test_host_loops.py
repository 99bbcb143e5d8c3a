"""Device loops inside host `for`, `while`, `if` and `with`: a launch each time host code
reaches one, compiled once, with the ints that change between launches (a layer index)
passed to each launch. Eager mode, compiled code and PyTorch agree."""

from __future__ import annotations

import pytest
import torch

import tilecraft as tc
from tilecraft import exc
from tilecraft.testing import check_modes, run_mode


@tc.kernel
def layer_stack(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = x.clone()
    for layer in range(w.size(0)):
        for t in tc.tile(h.size(0)):
            h[t, :] = torch.relu(h[t, :] * w[layer, :] + b[layer, :])
        if layer % 2 == 1:  # on the host: a launch every other layer
            for t in tc.tile(h.size(0)):
                h[t, :] = h[t, :] * 0.5
    return h


def _layer_stack(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = x.clone()
    for layer in range(w.size(0)):
        h = torch.relu(h * w[layer] + b[layer])
        h = h * 0.5 if layer % 2 == 1 else h
    return h


@pytest.mark.parametrize("rows", [37, 1, 0])
@pytest.mark.parametrize("layers", [5, 1, 0])
def test_a_layer_index_reaches_each_launch(rows: int, layers: int) -> None:
    x, w, b = torch.randn(rows, 11), torch.randn(layers, 11), torch.randn(layers, 11)
    check_modes(layer_stack, (x, w, b), _layer_stack)


@tc.kernel
def layer_views(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.clone()
    for layer in range(w.size(0)):
        weights = w[layer]  # views at offsets of 44 bytes: most not 16-byte aligned
        for t in tc.tile(h.size(0)):
            h[t, :] = h[t, :] * weights[None, :] + 1.0
    return h


def test_views_of_each_layer_share_one_kernel() -> None:
    x, w = torch.randn(21, 11), torch.randn(4, 11)
    reference = x.clone()
    for layer in range(4):
        reference = reference * w[layer] + 1.0
    check_modes(layer_views, (x, w), lambda x, w: reference)
    code = layer_views.bind((x, w)).to_triton_code()
    assert code.count("def _layer_views_kernel") == 1


@tc.kernel
def halving_sum(x: torch.Tensor) -> torch.Tensor:
    """A pairwise tree sum in passes: each launch adds the upper half onto the lower."""
    buf = x.clone()
    n = x.size(0)
    while n > 1:
        half = n // 2
        for t in tc.tile(x.size(0)):
            upper = t.index + (n - half)
            keep = t.index < half
            moved = torch.where(keep, buf[upper.clamp(max=x.size(0) - 1)], 0.0)
            buf[t] = buf[t] + moved
        n = n - half
    return buf[:1]


def _pairwise(x: torch.Tensor) -> torch.Tensor:
    buf, n = x.clone(), x.size(0)
    while n > 1:
        half = n // 2
        buf[: n - half] = torch.cat([buf[:half] + buf[n - half : n][:half], buf[half : n - half]])
        n -= half
    return buf[:1]


@pytest.mark.parametrize("size", [13, 64, 1])
def test_a_host_while_launches_until_done(size: int) -> None:
    x = torch.randn(size)
    results = check_modes(halving_sum, (x,), lambda x: x.sum().reshape(1))
    assert results["triton"].shape == (1,)


def test_the_host_while_tree_matches_its_own_reference() -> None:
    x = torch.randn(29)
    torch.testing.assert_close(_pairwise(x), x.sum().reshape(1))


@tc.kernel
def periods(x: torch.Tensor, scale: torch.Tensor, period: int) -> torch.Tensor:
    """Helion's decoder-stack shape: a host loop over periods, `tc.static_range` over the
    layers of one, and device code that picks its arm by the layer (`r == period - 1`)."""
    h = x.clone()
    for p in range(scale.size(0) // period):
        for r in tc.static_range(period):
            with torch.no_grad():
                for t in tc.tile(h.size(0)):
                    row = h[t, :] * scale[period * p + r, :]
                    if r == period - 1:
                        row = torch.tanh(row)
                    h[t, :] = row + r
    return h


def _periods(x: torch.Tensor, scale: torch.Tensor, period: int) -> torch.Tensor:
    h = x.clone()
    for layer in range(scale.size(0) // period * period):
        r = layer % period
        h = h * scale[layer]
        h = (torch.tanh(h) if r == period - 1 else h) + r
    return h


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_static_range_in_host_code_and_a_branch_on_the_layer(dtype: torch.dtype) -> None:
    x, scale = torch.randn(19, 6, dtype=dtype), torch.randn(7, 6, dtype=dtype)
    check_modes(periods, (x, scale, 3), _periods, dtype=dtype)
    code = periods.bind((x, scale, 3)).to_triton_code()
    assert code.count("def _periods_kernel") == 1


@tc.kernel
def shrinking(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for k in range(2):
        part = out[: x.size(0) - k]  # another shape on each trip
        for t in tc.tile(part.size(0)):
            part[t] = part[t] * 2
    return out


def test_a_view_whose_shape_changes_gets_a_kernel_for_each_shape() -> None:
    def reference(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x[:-1] * 4, x[-1:] * 2])

    check_modes(shrinking, (torch.randn(9),), reference)
    code = shrinking.bind((torch.randn(9),)).to_triton_code()
    assert code.count("def _shrinking_kernel_v") == 2
    assert "tuple(part.shape), part.stride()) == (torch.float32, (8,), (1,))" in code


@tc.kernel
def zeros_of_layer(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for k in range(3):
        for t in tc.tile(x.size(0)):
            out[t] = out[t] + tc.zeros([k + 1]).sum() + k
    return out


def test_an_int_that_sizes_a_tile_gets_a_kernel_for_each_value() -> None:
    check_modes(zeros_of_layer, (torch.randn(5),), lambda x: x + 3)
    code = zeros_of_layer.bind((torch.randn(5),)).to_triton_code()
    assert "if k == 0:" in code and "elif k == 2:" in code


@tc.kernel
def halves_by_launch_tiles(x: torch.Tensor) -> torch.Tensor:
    buf = x.clone()
    n = x.size(0)
    while n > 1:
        half = n // 2
        for t in tc.tile(half):  # a launch grid of its own each pass
            buf[t] = buf[t] + buf[t.index + (n - half)]
        n = n - half
    return buf[:1]


@pytest.mark.parametrize("size", [13, 64, 1, 2])
def test_a_launch_tiled_by_an_int_that_changes_gets_a_kernel_for_each_value(size: int) -> None:
    check_modes(halves_by_launch_tiles, (torch.randn(size),), lambda x: x.sum().reshape(1))


@tc.kernel
def pyramid(x: torch.Tensor, levels: int) -> torch.Tensor:
    """Each level the pairwise mean of the one before, all in one buffer: views of a new
    length and offset on each trip, and a launch grid that halves."""
    buf = torch.zeros(2 * x.size(0), dtype=x.dtype, device=x.device)
    buf[: x.size(0)] = x
    start, size = 0, x.size(0)
    for _ in range(levels):
        src = buf[start : start + size]
        dst = buf[start + size : start + size + size // 2]
        for t in tc.tile(size // 2):
            dst[t] = (src[t.index * 2] + src[t.index * 2 + 1]) * 0.5
        start, size = start + size, size // 2
    return buf


def _pyramid(x: torch.Tensor, levels: int) -> torch.Tensor:
    buf = torch.zeros(2 * x.size(0), dtype=x.dtype)
    buf[: x.size(0)] = x
    start, size = 0, x.size(0)
    for _ in range(levels):
        pairs = buf[start : start + size // 2 * 2].reshape(-1, 2)
        buf[start + size : start + size + size // 2] = pairs.mean(-1)
        start, size = start + size, size // 2
    return buf


@pytest.mark.parametrize(("size", "levels"), [(37, 4), (64, 6), (1, 2), (0, 1), (5, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_pyramid_of_levels_that_halve(size: int, levels: int, dtype: torch.dtype) -> None:
    x = torch.randn(size).to(dtype)
    if size == 37:
        x[3], x[20] = float("nan"), float("inf")
    check_modes(pyramid, (x, levels), _pyramid, dtype=dtype)


@tc.kernel
def every_length(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for k in range(x.size(0)):
        for t in tc.tile(k + 1):
            out[t] = out[t] + 1
    return out


def test_a_kernel_for_each_of_too_many_values_is_refused() -> None:
    every_length.bind((torch.randn(32),))  # 32 kernels
    with pytest.raises(exc.UnsupportedOperation, match="need bounds known on the host") as info:
        every_length.bind((torch.randn(33),))
    assert "`k` changes each time" in str(info.value)
    assert "each of their 33 versions would be over 32" in str(info.value)
    assert "for t in tc.tile(k + 1):" in str(info.value)
    eager = run_mode(every_length, (torch.zeros(33),), "eager")
    torch.testing.assert_close(eager[:3], torch.tensor([33.0, 32.0, 31.0]))


class _Setting:
    """A host value the kernel is not specialized on: a method's result (a module's
    numbers, lists, dicts and objects' attributes are keyed: changed, they compile again)."""

    def __init__(self, value: object) -> None:
        self.value = value

    def get(self) -> object:
        return self.value


SHIFT = _Setting(0)


@tc.kernel
def shifted_lengths(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for k in range(2):
        rows = x.size(0) - k - SHIFT.get()  # not what the kernel is specialized on
        for t in tc.tile(rows):
            out[t] = out[t] * 2
    return out


def test_a_loop_reached_with_other_values_than_compiled_raises() -> None:
    x = torch.randn(6)
    expected = torch.cat([x[:5] * 4, x[5:] * 2])
    torch.testing.assert_close(run_mode(shifted_lengths, (x,), "triton"), expected)
    SHIFT.value = 1
    try:
        with pytest.raises(exc.HostCodeError, match="with host values it did not have"):
            run_mode(shifted_lengths, (x,), "triton")
    finally:
        SHIFT.value = 0


SECOND = _Setting(False)


@tc.kernel
def second_if_flag(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for t in tc.tile(x.size(0)):
        out[t] = out[t] + 1
    if SECOND.get():  # not something the kernel is specialized on
        for t in tc.tile(x.size(0)):
            out[t] = out[t] * 3
    return out


def test_a_loop_not_reached_when_compiled_raises_if_reached_later() -> None:
    x = torch.randn(6)
    torch.testing.assert_close(run_mode(second_if_flag, (x,), "triton"), x + 1)
    SECOND.value = True
    try:
        with pytest.raises(exc.HostCodeError, match="did not reach") as info:
            run_mode(second_if_flag, (x,), "triton")
        assert "for t in tc.tile(x.size(0)):" in str(info.value)
        torch.testing.assert_close(run_mode(second_if_flag, (x,), "eager"), (x + 1) * 3)
    finally:
        SECOND.value = False


@tc.kernel
def reads_a_tile_later(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for _ in range(2):
        for t in tc.tile(x.size(0)):
            out[t] = out[t] + 1
        print(t)
    return out


def test_host_code_in_a_loop_cannot_read_a_device_name() -> None:
    with pytest.raises(exc.UnsupportedSyntax, match="`t` is computed inside a device loop"):
        reads_a_tile_later.bind((torch.randn(4),))


def test_tuning_a_kernel_with_host_loops() -> None:
    args = (torch.randn(37, 11), torch.randn(3, 11), torch.randn(3, 11))
    config = layer_stack.autotune(args, search="random", max_configs=3)
    out = run_mode(layer_stack, args, "triton", config)
    torch.testing.assert_close(out, _layer_stack(*args))
