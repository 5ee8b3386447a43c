"""One view of a score document: the leaderboard order, the system labels, the colours
and the slice banner, as every output shows them.

The score table (``engines score``), the HTML report (:mod:`scoring.report`), the
figures (``engines plot``, :mod:`scoring.plot`) and the demo's printed leaderboard all
take these four things from here, so a row sits at the same place, under the same name
and in the same colour everywhere. The rules are the score table's:

- order: by the document's headline metric (its first table metric, nDCG@10 for the
  main profile), descending; a row whose value is 0 comes next, a row where it is
  undefined (a depth below its k; the row's ``order_note`` says why) last, and rows that
  tie keep the document's order;
- label: the row's id exactly as the scorer wrote it (``leanfinder (stand-in)`` keeps
  its ``(stand-in)``);
- colour: the row's place in that order picks from :data:`PALETTE`;
- banner: the document's own banner text, in capitals.

No I/O and no imports beyond the standard library: rendering needs no scorer.
"""

from __future__ import annotations

from typing import Any, Sequence

HEADLINE = "nDCG@10"
# Okabe-Ito, then Tableau: distinguishable for colour-blind readers first.
PALETTE = (
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
    "#8c564b", "#7f7f7f", "#bcbd22", "#17becf", "#9467bd",
)


def headline(doc: dict[str, Any]) -> str:
    """The metric the leaderboard is ordered by: the document's first table metric."""
    metrics = doc.get("table_metrics") or ()
    return str(metrics[0]) if metrics else HEADLINE


def value(system: dict[str, Any], name: str) -> float | None:
    """A row's value of metric ``name`` (a ``{"value", "ci"}`` entry or a bare number)."""
    m = (system.get("metrics") or {}).get(name)
    return m.get("value") if isinstance(m, dict) else m


def ranked(systems: Sequence[dict[str, Any]], metric: str = HEADLINE) -> list[dict[str, Any]]:
    """The rows in leaderboard order: ``metric`` descending, then 0, then undefined, each
    in the given order (a stable sort)."""
    def key(s: dict[str, Any]) -> float:
        v = value(s, metric)
        return 2.0 if v is None else (1.0 if v == 0 else -v)

    return sorted(systems, key=key)


def label(system: dict[str, Any]) -> str:
    """A row's name: its id as the scorer wrote it."""
    return str(system.get("id") or system.get("engine") or "?")


def colour(place: int) -> str:
    """The colour of the row at 0-based ``place`` in leaderboard order."""
    return PALETTE[place % len(PALETTE)]


def colours(systems: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Label -> colour for rows already in leaderboard order (:func:`ranked`)."""
    return {label(s): colour(i) for i, s in enumerate(systems)}


def banner(doc: dict[str, Any]) -> str | None:
    """The slice banner as shown (``DEVELOPMENT SLICE — NOT A RESULT``), or None."""
    text = doc.get("banner")
    return str(text).upper() if text else None
