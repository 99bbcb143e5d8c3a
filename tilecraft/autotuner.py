"""Helion's `helion.autotuner` names a port touches: the tunable fragments.

`from tilecraft.autotuner import PowerOfTwoFragment` (or `helion.autotuner.X` with
`import tilecraft as helion`) gives tilecraft's fragment for Helion's name; use them with
`hl.register_tunable(name, fragment)`.
"""

from __future__ import annotations

from tilecraft.language.tunables import (
    BooleanFragment,
    EnumFragment,
    IntegerFragment,
    PowerOfTwoFragment,
)
from tilecraft.runtime.config import Config

__all__ = ["BooleanFragment", "Config", "EnumFragment", "IntegerFragment", "PowerOfTwoFragment"]
