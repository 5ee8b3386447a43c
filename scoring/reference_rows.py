"""Published reference rows (BENCHMARKS.md §9): shipped data, and where each applies.

``benchmarks/published.json`` holds the numbers with their provenance (source, arXiv id or
URL, table, date transcribed, the corpus and slice they were computed on). They are shown
only where they were computed on the same query set as the measured rows:

- LeanSearch v2 paper Table 1: MathlibQR with ``--subset shared171`` (the fair 810 slice);
- LeanSearch v2 paper Table 2: MathlibMPR, all items;
- Legendre leaderboard run m1: full MathlibQR.

They are reference rows: labelled "published", never ranked with measured rows, never a
hosted API's current result. A metric a source does not report is absent (blank), never 0.
A source computed on another corpus than the scored one (``corpus_ref``: the corpus it
names, null for each system's own index) carries the badge "different corpus" on every
row, in every output (METHODOLOGY.md §7).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import benchmarks

PUBLISHED_FILE = Path(benchmarks.SHIPPED_DIR) / "published.json"
LABEL = "published"
DIFFERENT_CORPUS = "different corpus"


def load(path: str | Path = PUBLISHED_FILE) -> list[dict[str, Any]]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return list(data["sources"])


def applicable(doc: dict[str, Any], sources: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The sources that were computed on this score document's query set (main profile,
    the benchmark's primary styles, same benchmark, same subset; nothing for shared-with or
    slice scopes)."""
    if doc.get("profile", "main") != "main":
        return []
    scope = doc.get("scope") or {}
    if scope.get("shared_with") or scope.get("slice") or not scope.get("default_styles", True):
        return []
    if scope.get("answered_by") or scope.get("uncovered", "drop") != "drop":  # another query set, or n
        return []
    bench = (doc.get("benchmark") or {}).get("name")
    subset = doc.get("subset")
    out = []
    for src in load() if sources is None else sources:
        if src["benchmark"] == bench and (src.get("applies") or {}).get("subset") == subset:
            out.append(src)
    return out


def same_corpus(doc: dict[str, Any], src: dict[str, Any]) -> bool:
    """Was ``src`` computed on the corpus this document scores against (same revision, or
    the same file)? A source with no ``corpus_ref`` (each system's own index) never was."""
    ref = src.get("corpus_ref")
    corp = doc.get("corpus") or {}
    if not ref:
        return False
    if ref.get("sha256") and ref["sha256"] == corp.get("sha256"):
        return True
    return bool(ref.get("revision")) and str(ref["revision"]).lower() == str(corp.get("revision") or "").lower()


def attach(doc: dict[str, Any]) -> dict[str, Any]:
    """Add ``published`` (the applicable sources, each row labelled, and badged "different
    corpus" when its source's corpus is not the scored one) to a score document."""
    out = []
    for src in applicable(doc):
        badges = [] if same_corpus(doc, src) else [DIFFERENT_CORPUS]
        out.append({**{k: v for k, v in src.items() if k != "rows"}, "different_corpus": bool(badges),
                    "rows": [{**row, "label": LABEL, "badges": list(badges)} for row in src["rows"]]})
    doc["published"] = out
    return doc


def row_name(row: dict[str, Any]) -> str:
    """A published row's name with its badges, as every output shows it."""
    badges = row.get("badges") or []
    return str(row.get("system")) + (f" ({', '.join(badges)})" if badges else "")


def curve_points(row: dict[str, Any], family: str) -> list[tuple[int, float]]:
    """(k, value) of a published row for one metric family (``R``, ``nDCG``, ``P``), at the
    k values it reports only."""
    out = []
    for name, value in (row.get("metrics") or {}).items():
        fam, _, k = name.partition("@")
        if fam == family and k.isdigit() and value is not None:
            out.append((int(k), float(value)))
    return sorted(out)
