"""Errors point at the user's expression: columns with a caret, failures inside generated
code mapped back through its `# file:line` comments, dims named by the user's variables,
and unsupported ops that say what to use instead."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft import exc
from tilecraft.ir import ops as optable

THIS_FILE = Path(__file__)
LINES = THIS_FILE.read_text().splitlines()


def line_of(source: str) -> int:
    (number,) = [i + 1 for i, line in enumerate(LINES) if line.strip() == source]
    return number


def raised(kernel: tc.Kernel, *args: object) -> exc.TilecraftError:
    kernel.settings.interpret = False
    with pytest.raises(exc.TilecraftError) as info:
        kernel(*args)
    return info.value


@tc.kernel
def mismatched(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_rows in tc.tile(x.size(0)):
        out[tile_rows] = x[tile_rows] + torch.sum(y[tile_rows, :], dim=-1, keepdim=True)
    return out


def test_shape_errors_name_the_users_loop_variable_and_point_at_the_expression() -> None:
    x, y = torch.randn(10, device=DEVICE), torch.randn(10, 7, device=DEVICE)
    error = raised(mismatched, x, y)
    message = str(error)
    assert "`tile_rows`" in message and "block over" not in message
    source = "out[tile_rows] = x[tile_rows] + torch.sum(y[tile_rows, :], dim=-1, keepdim=True)"
    assert f"line {line_of(source)}, column" in message
    assert error.loc is not None and error.loc.col is not None
    caret_line = message.splitlines()[-1]
    assert caret_line.strip() == "^"
    assert message.splitlines()[-2].strip() == source


@tc.kernel
def uses_einsum(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile, :] = torch.einsum("ij->ij", x[tile, :])
    return out


@tc.kernel
def misspelled(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile].sigmod()
    return out


@tc.kernel
def in_place(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        v = x[tile]
        v.clamp_(0.0, 1.0)
        out[tile] = v
    return out


@tc.kernel
def in_place_keyword(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.nn.functional.relu(x[tile], inplace=True)
    return out


@tc.kernel
def in_place_by_position(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.nn.functional.elu(x[tile], 1.0, True)
    return out


@tc.kernel
def training_dropout(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.nn.functional.dropout(x[tile], 0.1)
    return out


def test_unsupported_ops_say_what_to_use_instead() -> None:
    assert "use `@` / torch.matmul" in str(raised(uses_einsum, torch.randn(4, 4)))
    assert "did you mean `sigmoid`?" in str(raised(misspelled, torch.randn(4)))
    # an in-place method of an op tiles have (was "did you mean `clamp`?")
    assert "use `x = x.clamp(...)` (tiles are values)" in str(raised(in_place, torch.randn(4)))
    # inplace=False is taken (the value is the same), inplace=True refused
    assert "tiles are values; write `x = relu(x)`" in str(raised(in_place_keyword, torch.randn(4)))
    assert "tiles are values; write `x = elu(x)`" in str(
        raised(in_place_by_position, torch.randn(4))
    )
    # dropout in eval mode is x (the mode tests); in training it needs a seed
    assert "use `torch.where(tc.rand(" in str(raised(training_dropout, torch.randn(4)))


@tc.kernel
def exp_kernel(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        doubled = x[tile] * 2
        out[tile] = torch.exp(doubled)
    return out


def test_generated_code_carries_user_line_comments() -> None:
    code = exp_kernel.bind((torch.randn(8),)).to_triton_code()
    assert f"# {THIS_FILE}:{line_of('out[tile] = torch.exp(doubled)')}" in code


def test_a_failure_inside_generated_code_names_the_users_line(monkeypatch) -> None:
    broken = dataclasses.replace(optable.OPDEFS["exp"], emit=lambda d, a: f"tl.no_such_op({a})")
    monkeypatch.setitem(optable.OPDEFS, "exp", broken)
    fresh = tc.kernel(exp_kernel.fn)
    error = raised(fresh, torch.randn(8, device=DEVICE))
    assert isinstance(error, exc.LoweringError)
    assert error.loc is not None and error.loc.filename == str(THIS_FILE)
    assert error.loc.lineno == line_of("out[tile] = torch.exp(doubled)")
