"""ARR's entropy-trend patterns and the paper's impact score of each (ARR §4.2, eq. 8).

Torch-free, so the configs read the same table the math uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

PATTERN_SCORES: Mapping[str, float] = MappingProxyType(
    {"D": 1.0, "ID": 0.8, "F": 0.6, "DI": 0.4, "I": 0.2}
)
"""Score of each entropy pattern (read-only): decreasing, up-down, flat, down-up, increasing."""

PATTERNS: tuple[str, ...] = tuple(PATTERN_SCORES)
"""The patterns, in the paper's order."""
