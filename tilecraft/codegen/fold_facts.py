"""What host-code folding knows at a point of the host code (`fold.py`): the tensors
whose metadata a specialization fixes, the values it fixes, and tuples of such tensors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeGuard

import torch

CONSTANT_TYPES = (int, bool, str, float, type(None))


@dataclass(eq=False)
class TensorFact:
    """A tensor whose metadata the specialization fixes (`meta` has it; and its device)."""

    meta: torch.Tensor
    device: torch.device


@dataclass(eq=False)
class Const:
    """A value the specialization fixes."""

    value: Any


@dataclass(eq=False)
class Many:
    """A tuple of tensors the specialization fixes the metadata of."""

    items: tuple[TensorFact, ...]


Fact = TensorFact | Const | Many


@dataclass
class Facts:
    """What the specialization fixes, by local name, at one point of the host code."""

    names: dict[str, Fact] = field(default_factory=dict)

    def copy(self) -> Facts:
        return Facts(dict(self.names))

    def forget_tensors(self) -> None:
        self.names = {k: v for k, v in self.names.items() if isinstance(v, Const)}

    def merge(self, other: Facts) -> None:
        """Keep what holds after either branch."""
        self.names = {k: v for k, v in self.names.items() if other.names.get(k) is v}


def is_int(fact: Fact | None) -> TypeGuard[Const]:
    return isinstance(fact, Const) and type(fact.value) in (int, bool)


def is_value(value: Any) -> bool:
    """A plain value whose comparisons and truth mean what they say (ints, tuples of ints)."""
    if isinstance(value, (tuple, list)):
        return all(is_value(v) for v in value)
    return isinstance(value, (*CONSTANT_TYPES, torch.dtype))


def truthy(fact: Fact | None) -> bool:
    return isinstance(fact, Const) and is_value(fact.value) and bool(fact.value)
