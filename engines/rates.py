"""Courtesy rates: :class:`Rate` (at most N requests per window) and :func:`parse_rate`."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rate:
    """A courtesy limit: at most ``n`` requests in any window of ``period`` seconds."""

    n: int
    period: float

    def __str__(self) -> str:
        return f"{self.n}/{self.period:g}s"


_RATE_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_rate(text: str) -> Rate:
    """Parse ``"3/30s"``, ``"20/2s"``, ``"1/s"``, ``"24/60s"``, ``"5/1m"`` into a :class:`Rate`.

    Raises :class:`store.errors.InputError` (one clear line) for anything else.
    """
    from store.errors import InputError

    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]*)\s*", str(text).lower())
    if not m or m.group(3) not in _RATE_UNITS or not (m.group(2) or m.group(3)):
        raise InputError(
            f"invalid rate {text!r}: expected N/PERIOD like '3/30s', '1/s', '24/60s' or '5/1m'"
        )
    n = int(m.group(1))
    period = float(m.group(2) or 1) * _RATE_UNITS[m.group(3)]
    if n < 1 or period <= 0:
        raise InputError(f"invalid rate {text!r}: need at least 1 request per positive period")
    return Rate(n, period)
