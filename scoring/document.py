"""The score document (``engines.score/1``) as the report, the demo and ``engines plot``
read it: the scorer's JSON plus the published rows that apply, the dropped queries, the
engine-subset slices and the drift between epochs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from store.errors import InputError


def build_score_json(
    db: Any,
    bench: str,
    *,
    corpus: str | None = None,
    subset: str | None = None,
    systems: list[str] | None = None,
    compare: tuple[str, str] | None = None,
    profile: str = "main",
    published: bool = True,
    uncovered: str = "drop",
    answered_by: str | None = None,
) -> dict[str, Any]:
    """Score ``bench`` with the project's one scorer and return the engines.score/1 dict
    (with the published reference rows that apply unless ``published=False``; ``engines
    report`` and the demo pass their ``--published`` choice, off by default)."""
    from scoring.results import score  # the scorer (issue 5)

    from scoring.reference_rows import attach

    result = score(db, bench, corpus=corpus, subset=subset, systems=systems or None, compare=compare,
                   profile=profile, uncovered=uncovered, answered_by=answered_by)
    doc = attach(result.to_json()) if published else {**result.to_json(), "published": []}
    doc["dropped_queries"] = dropped_queries(db, bench, doc)
    doc["slices"] = engine_slices(db, bench, corpus=corpus, subset=subset, systems=systems, profile=profile,
                                  uncovered=uncovered)
    from scoring.report import drift_docs

    drift = drift_docs(db, bench, doc, corpus=corpus)
    if drift:
        doc["drift"] = drift
    return doc


def dropped_queries(db: Any, bench: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The in-scope queries the scorer dropped (no gold name in the corpus), with their text
    and gold, so the report's explorer lists them under "dropped (gold not in corpus)"."""
    from scoring.positions import load_queries
    from store.benchmarks import find_benchmark

    want = set((doc.get("scope") or {}).get("dropped_qids") or [])
    if not want:
        return []
    b = find_benchmark(db, bench)
    with db.session() as s:
        return [{"qid": q.qid, "text": q.text, "style": q.style, "kind": q.kind, "difficulty": q.difficulty,
                 "target_id": q.target_id, "gold": [list(u.names) for u in q.units], "dropped": True}
                for q in load_queries(s, b.id) if q.qid in want]


def engine_slices(db: Any, bench: str, **kw: Any) -> list[dict[str, Any]]:
    """Every engine-subset view of this benchmark: each sampled engine's queries, every row."""
    import sqlalchemy as sa

    from crawler.plan import SAMPLE_PREFIX, parse_sample_name
    from scoring.results import score
    from store.benchmarks import find_benchmark
    from store.models import Subset

    name = find_benchmark(db, bench).name
    with db.session() as s:
        subs = [(sub.name, sub.meta or {}) for sub in s.execute(
            sa.select(Subset).where(Subset.name.like(SAMPLE_PREFIX + "%"))).scalars()]
    engines = sorted({parse_sample_name(n)[0] for n, meta in subs if parse_sample_name(n) and meta.get("bench") == name})
    out = []
    for engine in engines:
        doc = score(db, bench, corpus=kw.get("corpus"), subset=kw.get("subset"), systems=kw.get("systems") or None,
                    profile=kw.get("profile", "main"), slice=f"engine-subset:{engine}",
                    uncovered=kw.get("uncovered", "drop")).to_json()
        sl = doc["scope"]["slice"]
        out.append({"name": sl["name"], "subset": sl["subset"], "n_queries": doc["benchmark"]["n_queries"],
                    "systems": [{k: v for k, v in sys_.items() if k not in ("per_query", "curves", "pr")}
                                for sys_ in doc["systems"]]})
    return out


def read_score_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise InputError(f"score file {path} does not exist; write one with `engines score --bench B --json FILE`")
    try:
        data = json.loads(path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a JSON score file ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a score file is a JSON object, got {type(data).__name__}")
    from scoring.results import SCHEMA

    if data.get("schema") != SCHEMA:  # before anything reads its systems
        raise InputError(f"{path}: score file has schema {data.get('schema')!r}, expected {SCHEMA!r}; "
                         "re-run engines score")
    return data


def write_report(score_json: dict[str, Any], out: Path) -> Path:
    from scoring.report import render_report

    return render_report(score_json, out)
