"""How much one micro-batch may take, in either way of reading."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """How much one micro-batch may take (from Spark's ReadLimit and the options)."""

    max_count: int
    max_bytes: int
    min_count: int = 0
