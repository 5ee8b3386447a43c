"""What every part of the report page shares: escaping, number formatting, a metric's
value and interval, and a system's column header. The lowest module of
:mod:`scoring.report`: it imports none of the others."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from scoring.view import label

# The leaderboard's columns when the score document names none.
TABLE_METRICS = ("nDCG@10", "R@1", "R@5", "R@10", "R@50", "R@100", "MRR", "MAP")


def e(value: Any) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return escape("" if value is None else str(value), quote=True)


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and math.isnan(value):
        return "—"
    if isinstance(value, (int, float)):
        return f"{value:.{digits}f}"
    return str(value)


def metric(system: dict[str, Any], name: str) -> tuple[float | None, list[float | None] | None]:
    m = (system.get("metrics") or {}).get(name)
    if m is None:
        return None, None
    if isinstance(m, dict):
        return m.get("value"), m.get("ci")
    return m, None


def header(system: dict[str, Any], sort: str = "") -> str:
    """A system's column header: its label (the full id, as the score table prints it)."""
    attr = f' data-sort="{sort}"' if sort else ""
    return f'<th class="num"{attr} title="{e(label(system))}">{e(label(system))}</th>'
