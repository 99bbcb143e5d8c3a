"""Errors are tilecraft errors that name the user's file, line and source text."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft import exc

THIS_FILE = Path(__file__)
LINES = THIS_FILE.read_text().splitlines()


def raised(error: type[exc.TilecraftError], kernel: tc.Kernel, *args: object) -> str:
    """Call a kernel in Triton mode and return the message of the `error` it raises."""
    kernel.settings.interpret = False
    with pytest.raises(exc.TilecraftError) as info:
        kernel(*args)
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    return str(info.value)


def assert_names_line(message: str, source: str) -> None:
    """`message` names this file, the line number of `source` in it, and its text."""
    matches = [i + 1 for i, line in enumerate(LINES) if line.strip() == source]
    assert len(matches) == 1, f"the source line must be unique in this file: {source}"
    assert f'File "{THIS_FILE}", line {matches[0]}' in message
    assert source in message


def vector(n: int = 5) -> torch.Tensor:
    return torch.randn(n, device=DEVICE)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(shape, device=DEVICE)


# -- unsupported code in a device loop -----------------------------------------------------


@tc.kernel
def uses_with(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        with torch.no_grad():
            out[tile] = x[tile]
    return out


@tc.kernel
def uses_try(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        try:
            out[tile] = x[tile]
        finally:
            pass
    return out


@tc.kernel
def merges_a_tensor_and_a_tile(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        v = x
        if x[tile] > 0:
            v = x[tile]
        out[tile] = v
    return out


@pytest.mark.parametrize(
    ("kernel", "source"),
    [
        (uses_with, "with torch.no_grad():"),
        (uses_try, "try:"),
        (merges_a_tensor_and_a_tile, "if x[tile] > 0:"),
    ],
    ids=["with", "try", "if"],
)
def test_unsupported_syntax(kernel, source) -> None:
    assert_names_line(raised(exc.UnsupportedSyntax, kernel, vector()), source)


@tc.kernel
def uses_histc(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.histc(x[tile])
    return out


@tc.kernel
def uses_fft(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.fft.fft(x[tile]).real
    return out


@pytest.mark.parametrize(
    ("kernel", "source"),
    [
        (uses_histc, "out[tile] = torch.histc(x[tile])"),
        (uses_fft, "out[tile] = torch.fft.fft(x[tile]).real"),
    ],
    ids=["histc", "fft"],
)
def test_unsupported_torch_op(kernel, source) -> None:
    message = raised(exc.UnsupportedOperation, kernel, vector())
    assert_names_line(message, source)
    assert "histc" in message or "fft" in message


@tc.kernel
def uses_rand_like(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.rand_like(x[tile])
    return out


def test_unseeded_random_numbers_point_to_the_seeded_ones() -> None:
    """PyTorch's global generator cannot give eager mode's numbers on the device."""
    message = raised(exc.UnsupportedOperation, uses_rand_like, vector())
    assert_names_line(message, "out[tile] = torch.rand_like(x[tile])")
    assert "tc.rand([tile, ...], seed)" in message


@tc.kernel
def number_for_a_tile(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.logsumexp(2.0, -1) + x[tile]
    return out


def test_a_number_where_an_op_takes_a_tile() -> None:
    """Was `LoweringError: AttributeError: 'float' object has no attribute 'type'` (found by
    the expression fuzzer)."""
    message = raised(exc.UnsupportedOperation, number_for_a_tile, vector())
    assert_names_line(message, "out[tile] = torch.logsumexp(2.0, -1) + x[tile]")
    assert "`logsumexp` takes a tile as its `x`, not float 2.0" in message


# -- tile ops outside device loops ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "call"),
    [("zeros", lambda: tc.zeros([4])), ("full", lambda: tc.full([4], 1.0))],
    ids=["zeros", "full"],
)
def test_tile_op_outside_a_kernel(name, call) -> None:
    with pytest.raises(exc.NotInKernel) as info:
        call()
    assert f"tc.{name}()" in str(info.value)


@tc.kernel
def zeros_in_host_code(x: torch.Tensor) -> torch.Tensor:
    out = tc.zeros([4])
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile]
    return out


def test_tile_op_in_host_code_raises_at_bind() -> None:
    with pytest.raises(exc.NotInKernel) as info:
        zeros_in_host_code.bind((vector(),))
    assert_names_line(str(info.value), "out = tc.zeros([4])")


@tc.kernel
def doubles_in_a_host_try(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    try:  # around a device loop
        for twice in tc.tile(x.size(0)):
            out[twice] = out[twice] * 2
    finally:
        pass
    return out


@pytest.mark.parametrize("mode", ["bind", "eager"])
def test_a_device_loop_inside_host_try_is_refused_at_its_line(mode: str) -> None:
    """Host `for`, `while`, `if` and `with` may hold device loops (tests/test_host_loops.py);
    a `try` may not: a launch's errors are not the host code's to catch."""
    with pytest.raises(exc.UnsupportedSyntax, match="not in a `try`") as info:
        if mode == "bind":
            doubles_in_a_host_try.bind((vector(),))
        else:
            doubles_in_a_host_try.run_eagerly(doubles_in_a_host_try.normalize((vector(),), {}))
    assert_names_line(str(info.value), "for twice in tc.tile(x.size(0)):")


# -- shapes --------------------------------------------------------------------------------


@tc.kernel
def adds_row_and_column(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in tc.tile(m):
        out[tile_m, :] = x[tile_m, :] + w[tile_m]
    return out


def test_tiles_that_do_not_broadcast() -> None:
    message = raised(exc.ShapeMismatch, adds_row_and_column, randn(5, 7), vector())
    assert_names_line(message, "out[tile_m, :] = x[tile_m, :] + w[tile_m]")


@tc.kernel
def indexes_a_vector_twice(v: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(v)
    for tile_m, tile_n in tc.tile([v.size(0), v.size(0)]):
        out[tile_m] = v[tile_m, tile_n]
    return out


def test_too_many_indices() -> None:
    message = raised(exc.ShapeMismatch, indexes_a_vector_twice, vector())
    assert_names_line(message, "out[tile_m] = v[tile_m, tile_n]")


@tc.kernel
def stores_a_matrix_into_a_vector(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty(m, device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        out[tile_m] = x[tile_m, tile_n] * 2
    return out


def test_store_of_the_wrong_shape() -> None:
    message = raised(exc.ShapeMismatch, stores_a_matrix_into_a_vector, randn(5, 3))
    assert_names_line(message, "out[tile_m] = x[tile_m, tile_n] * 2")


# -- host code and arguments ---------------------------------------------------------------


@tc.kernel
def needs_a_matrix(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.size()
    out = torch.empty_like(x)
    for tile in tc.tile(rows):
        out[tile, :] = x[tile, :]
    return out


@pytest.mark.parametrize("shape", [(5, 7, 2), (5,)], ids=["3d", "1d"])
def test_host_code_failure_names_the_line(shape) -> None:
    message = raised(exc.HostCodeError, needs_a_matrix, randn(*shape))
    assert_names_line(message, "rows, cols = x.size()")
    assert "ValueError" in message


@tc.kernel
def adds(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] + y[tile]
    return out


def test_tensors_on_different_devices() -> None:
    message = raised(exc.BadArgument, adds, vector(), torch.randn(5, device="meta"))
    assert torch.device(DEVICE).type in message and "meta" in message
    assert_names_line(message, "def adds(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:")


def test_tensors_on_different_devices_in_eager_mode() -> None:
    """Eager mode refuses mixed devices as compiled runs do, rather than failing inside the
    body with PyTorch's message."""
    eager = tc.kernel(adds.fn)
    eager.settings.interpret = True
    with pytest.raises(exc.BadArgument, match="different devices") as info:
        eager(vector(), torch.randn(5, device="meta"))
    assert_names_line(
        str(info.value), "def adds(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:"
    )


# -- configs -------------------------------------------------------------------------------


def test_invalid_config() -> None:
    with pytest.raises(exc.InvalidConfig, match="num_warps"):
        tc.kernel(adds.fn, config=tc.Config(num_warps=3))
    with pytest.raises(exc.InvalidConfig, match="block_sizes"):
        adds.bind((vector(), vector())).to_triton_code(tc.Config(block_sizes=[48]))


@tc.kernel
def odd_block_size(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0), block_size=48):
        out[tile] = x[tile]
    return out


def test_explicit_block_size_not_a_power_of_two() -> None:
    message = raised(exc.InvalidConfig, odd_block_size, vector(50))
    assert_names_line(message, "for tile in tc.tile(x.size(0), block_size=48):")


def test_config_that_does_not_fit_the_kernel() -> None:
    kernel = tc.kernel(needs_a_matrix.fn, config=tc.Config(reduction_loops=[4, 4]))
    raised(exc.InvalidConfig, kernel, randn(4, 9))


def test_a_config_past_the_gpus_shared_memory_is_a_tilecraft_error(monkeypatch) -> None:
    """A config run as given (`BoundKernel.run_config`, what `tilecraft.testing` runs) whose
    tiles need more shared memory than the GPU has raises a LoweringError naming the
    kernel and the amounts at its source, as a first call would: it was Triton's raw
    OutOfResources (a view fuzzer's [6, 16, 32, 16] tiles on an H100)."""
    from triton.runtime.errors import OutOfResources

    def launcher(*args: object) -> None:
        raise OutOfResources(2097152, 232448, "shared memory")

    x, y = vector(37), vector(37)
    bound = adds.bind((x, y))
    monkeypatch.setattr(bound, "compile", lambda config=None: launcher)
    with pytest.raises(exc.LoweringError) as info:
        bound.run_config(tc.Config(block_sizes=[16]), (x, y))
    message = str(info.value)
    assert "`adds`" in message and "2097152" in message and "232448" in message
    assert str(THIS_FILE) in message
    monkeypatch.undo()  # the real launcher
    assert torch.equal(bound.run_config(None, (x, y)), x + y)
