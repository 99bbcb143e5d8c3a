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


def test_a_tensor_whose_shape_changes_between_trips_is_refused() -> None:
    with pytest.raises(exc.UnsupportedSyntax, match="`part` is not the same") as info:
        shrinking.bind((torch.randn(9),))
    assert "for t in tc.tile(part.size(0)):" in str(info.value)
    eager = run_mode(shrinking, (torch.randn(9),), "eager")  # eager mode runs it as Python
    assert eager.shape == (9,)


@tc.kernel
def zeros_of_layer(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for k in range(2):
        for t in tc.tile(x.size(0)):
            out[t] = out[t] + tc.zeros([k + 1])[0]
    return out


def test_an_int_that_changes_is_not_a_constant_and_the_error_says_so() -> None:
    with pytest.raises(exc.TilecraftError, match="`k` changes each time host code reaches"):
        zeros_of_layer.bind((torch.randn(5),))


@tc.kernel
def halves_by_launch_tiles(x: torch.Tensor) -> torch.Tensor:
    buf = x.clone()
    n = x.size(0)
    while n > 1:
        half = n // 2
        for t in tc.tile(half):  # the grid would change with each launch
            buf[t] = buf[t] + buf[t.index + (n - half)]
        n = n - half
    return buf[:1]


def test_a_launch_tiled_by_an_int_that_changes_is_refused() -> None:
    """Its grid is sized when compiled: a wrong answer past that size, so refused."""
    with pytest.raises(exc.UnsupportedOperation, match="need bounds known on the host") as info:
        halves_by_launch_tiles.bind((torch.randn(13),))
    assert "`half`, `n` change each time" in str(info.value)
    assert "for t in tc.tile(half):" in str(info.value)


SETTINGS = {"second": False}


@tc.kernel
def second_if_flag(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for t in tc.tile(x.size(0)):
        out[t] = out[t] + 1
    if SETTINGS["second"]:  # not something the kernel is specialized on
        for t in tc.tile(x.size(0)):
            out[t] = out[t] * 3
    return out


def test_a_loop_not_reached_when_compiled_raises_if_reached_later() -> None:
    x = torch.randn(6)
    torch.testing.assert_close(run_mode(second_if_flag, (x,), "triton"), x + 1)
    SETTINGS["second"] = True
    try:
        with pytest.raises(exc.HostCodeError, match="did not reach") as info:
            run_mode(second_if_flag, (x,), "triton")
        assert "for t in tc.tile(x.size(0)):" in str(info.value)
        torch.testing.assert_close(run_mode(second_if_flag, (x,), "eager"), (x + 1) * 3)
    finally:
        SETTINGS["second"] = False


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
