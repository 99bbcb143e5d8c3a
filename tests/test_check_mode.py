"""The bounds-check mode (TILECRAFT_CHECK=1): a computed index outside its tensor raises
IndexOutOfBounds naming the user's line, instead of reading 0 silently."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft import exc

THIS_FILE = Path(__file__)


@tc.kernel
def lookup(table: torch.Tensor, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    out = torch.zeros([ids.size(0), table.size(1)], dtype=table.dtype, device=table.device)
    for tile_b, tile_e in tc.tile([ids.size(0), table.size(1)]):
        rows = ids[tile_b]
        out[tile_b, tile_e] = tc.load(table, [rows, tile_e], extra_mask=keep[tile_b][:, None])
    return out


def checked(kernel: tc.Kernel, monkeypatch: pytest.MonkeyPatch, eager: bool = False) -> tc.Kernel:
    fresh = tc.kernel(kernel.fn)
    monkeypatch.setattr(fresh.settings, "check", True)
    monkeypatch.setattr(fresh.settings, "interpret", eager)
    return fresh


def test_an_id_past_the_table_raises_naming_the_line(monkeypatch) -> None:
    table = torch.randn(10, 7, device=DEVICE)
    ids = torch.tensor([1, 9, 10, 3], device=DEVICE)  # 10 is one past the end
    keep = torch.ones(4, dtype=torch.bool, device=DEVICE)
    with pytest.raises(exc.IndexOutOfBounds) as info:
        checked(lookup, monkeypatch)(table, ids, keep)
    assert isinstance(info.value, IndexError) and "`table[...]`" in str(info.value)
    assert info.value.loc is not None and info.value.loc.filename == str(THIS_FILE)
    assert "tc.load(table, [rows, tile_e]" in info.value.loc.text


def test_masked_off_or_valid_ids_pass_and_match_the_unchecked_kernel(monkeypatch) -> None:
    table = torch.randn(10, 7, device=DEVICE)
    ids = torch.tensor([1, 9, -4, 3], device=DEVICE)
    keep = torch.tensor([True, True, False, True], device=DEVICE)  # the bad id is masked
    out = checked(lookup, monkeypatch)(table, ids, keep)
    expected = torch.where(keep[:, None], table[ids.clamp(0, 9)], 0)
    torch.testing.assert_close(out, expected)
    code = checked(lookup, monkeypatch).bind((table, ids, keep)).to_triton_code()
    assert (
        "tl.atomic_max(_tc_check" in code
        and "_tc_check" not in lookup.bind((table, ids, keep)).to_triton_code()
    )


def test_eager_mode_checks_too(monkeypatch) -> None:
    table = torch.randn(10, 7, device=DEVICE)
    keep = torch.ones(3, dtype=torch.bool, device=DEVICE)
    ids = torch.tensor([0, -1, 2], device=DEVICE)
    with pytest.raises(exc.IndexOutOfBounds):
        checked(lookup, monkeypatch, eager=True)(table, ids, keep)
    ids = torch.tensor([0, 12, 2], device=DEVICE)
    keep = torch.tensor([True, False, True], device=DEVICE)
    out = checked(lookup, monkeypatch, eager=True)(table, ids, keep)
    torch.testing.assert_close(out[1], torch.zeros(7, device=DEVICE))


def test_eager_mode_names_the_line_and_tensor_as_compiled_code_does() -> None:
    """CPU tensors on a GPU machine run eagerly: the check's error must read the same."""
    ids, weight = torch.tensor([0, 3, 4]), torch.randn(4, 8)
    checked = tc.kernel(_embedding_fn(), check=True, interpret=True)
    with pytest.raises(tc.exc.IndexOutOfBounds) as caught:
        checked(ids, weight)
    assert "is outside the tensor in `weight[...]`" in str(caught.value)
    assert "weight[ids[tile_t], :]" in str(caught.value)


def _embedding_fn():
    def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        out = torch.empty(ids.size(0), weight.size(1), dtype=weight.dtype)
        for tile_t in tc.tile(ids.size(0)):
            out[tile_t, :] = weight[ids[tile_t], :]
        return out

    return embedding
