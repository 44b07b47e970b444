"""A serve run's request lengths without numpy (the declaration checks them where a command must start light; `load`
draws them)."""

from __future__ import annotations

from typing import Any, Mapping


def span(mean: int, spread: float) -> tuple[int, int]:
    """The shortest and the longest length drawn: mean x (1 +- spread), at least 1."""
    return max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))


def longest(p: Mapping[str, Any]) -> int:
    """The most tokens one request may hold: its longest prompt and its longest output."""
    return sum(span(int(p[k]), float(p["length_spread"]))[1] for k in ("prompt_tokens", "output_tokens"))
