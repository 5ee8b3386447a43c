"""Drift: what changed between two epochs of one engine configuration.

Compared on the benchmark's scored queries answered in *both* epochs (current answers
only; superseded ones are history):

- per query: extrapolated RBO (p = 0.9, :mod:`scoring.rbo`) of the two returned name
  lists, Jaccard of the top 10, whether the top 1 changed, the first gold position
  before and after;
- overall: mean RBO with its bootstrap interval, the share of queries whose top 1 /
  top 10 (the ordered list) changed, and the paired difference (to − from) of nDCG@10,
  R@10 and MRR with a 95 % interval and p-value — the scorer's own per-query arrays
  and paired bootstrap (:class:`scoring.bootstrap.Bootstrap`, same seed), over the
  common queries;
- the queries that changed most (lowest RBO, then the largest move of the first gold
  position), with both lists' top 5 — only queries whose list did change.

Names are compared after the project's name normalisation (``hits.normalized_name``),
so a list that only changed its spelling of a name has not drifted.

Lists are compared over *first occurrences*, the scorer's rule (:mod:`scoring.positions`):
a name counts at the rank where it first appears, and a later copy keeps its slot as an
empty one (:class:`Repeat`) — it neither shortens the list nor renumbers what follows.
So a server that starts repeating hits has changed its list (what followed moved down),
and two lists that repeat the same way are the same list. Identical lists have RBO
exactly 1 (not the float sum's 0.9999999999999997), and a paired difference that is zero
on every query is reported as 0 with p = 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

import numpy as np
import sqlalchemy as sa

from scoring.bootstrap import RESAMPLES, SEED, Bootstrap
from scoring.rbo import rbo_ext
from scoring.resolve import chunked
from store.epochs import EpochInfo, epochs_of, pick_epoch
from store.errors import InputError
from store.models import Answer, EngineConfig, Hit

SCHEMA = "engines.drift/1"
P = 0.9
METRICS = ("nDCG@10", "R@10", "MRR")
TOP_SHOWN = 5
ZERO = 1e-12  # a per-query metric difference this small is no difference


@dataclass(frozen=True)
class Repeat:
    """The slot of a repeated name: it matches no name, only a repeat in the same slot."""

    slot: int


def first_occurrences(names: Sequence[Hashable]) -> list[Hashable]:
    """Each name at the rank of its first occurrence; later copies become :class:`Repeat`."""
    seen: set[Hashable] = set()
    out: list[Hashable] = []
    for i, n in enumerate(names, 1):
        if n in seen:
            out.append(Repeat(i))
        else:
            seen.add(n)
            out.append(n)
    return out


def compare_lists(before: Sequence[Hashable], after: Sequence[Hashable]) -> dict[str, Any]:
    """RBO, Jaccard@10 and the changed flags of two returned lists, over first occurrences."""
    a, b = first_occurrences(before), first_occurrences(after)
    names10 = lambda x: {n for n in x[:10] if not isinstance(n, Repeat)}  # noqa: E731
    sa_, sb_ = names10(a), names10(b)
    return {
        "rbo": 1.0 if a == b else rbo_ext(a, b, P),
        "jaccard@10": (len(sa_ & sb_) / len(sa_ | sb_)) if sa_ | sb_ else 1.0,
        "top1_changed": a[:1] != b[:1],
        "top10_changed": a[:10] != b[:10],
        "changed": a != b,
    }


def gold_move(row: dict[str, Any]) -> float:
    """How far the first gold position moved (found ↔ lost counts as the largest move)."""
    g0, g1 = row.get("gold_before"), row.get("gold_after")
    if g0 is None and g1 is None:
        return 0.0
    if g0 is None or g1 is None:
        return float("inf")
    return float(abs(g1 - g0))


def rank_changed(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The changed queries, most changed first: lowest RBO, then largest gold move, then id."""
    return sorted((r for r in rows if r.get("changed")),
                  key=lambda r: (r["rbo"], -gold_move(r), str(r["qid"])))


def find_config(session, spec: str, bench_shas: Sequence[str] | None = None) -> EngineConfig:
    """The one configuration ``spec`` names (:func:`scoring.results.match_systems`: label,
    engine name, display name or config-hash prefix; case-insensitive)."""
    from scoring.results import ambiguous, match_systems

    rows = list(session.execute(sa.select(EngineConfig).order_by(EngineConfig.id)).scalars())
    hits = match_systems(spec, rows)
    if len(hits) > 1 and bench_shas is not None:
        answered = {
            cid for chunk in chunked(list(bench_shas))
            for cid in session.execute(sa.select(Answer.config_id).where(Answer.query_sha256.in_(chunk)).distinct()).scalars()
        }
        hits = [c for c in hits if c.id in answered] or hits
    if not hits:
        known = ", ".join(sorted({c.engine for c in rows})) or "none"
        raise InputError(f"no engine configuration {spec!r} (engines in this database: {known}); "
                         "give a label, engine name, display name or config-hash prefix")
    if len(hits) > 1:
        raise ambiguous("drift", spec, [f"{c.label} = {c.config_hash[:12]}" for c in hits])
    return hits[0]


def _lists(session, config_id: int, epoch: int, shas: Sequence[str]) -> dict[str, list[str]]:
    """sha → the current answer's names in rank order (normalised when resolvable)."""
    a, h = Answer.__table__, Hit.__table__
    out: dict[str, list[str]] = {}
    for chunk in chunked(list(shas)):
        q = (
            sa.select(a.c.query_sha256, h.c.rank, sa.func.coalesce(h.c.normalized_name, h.c.name))
            .select_from(a.outerjoin(h, h.c.answer_id == a.c.id))
            .where(a.c.config_id == config_id, a.c.epoch == epoch, a.c.query_sha256.in_(chunk), ~a.c.superseded)
            .order_by(a.c.query_sha256, h.c.rank)
        )
        for sha, rank, name in session.execute(q):
            lst = out.setdefault(sha, [])
            if rank is not None:
                lst.append(name)
    return out


def _first_gold(positions: list[Any] | None) -> int | None:
    ps = [p for p in positions or [] if p is not None]
    return min(ps) if ps else None


def _epoch_json(e: EpochInfo) -> dict[str, Any]:
    return {"epoch": e.epoch, "label": e.label,
            "started_at": e.started_at.isoformat(timespec="seconds") if e.started_at else None}


def drift(
    db,
    engine: str,
    bench: str,
    *,
    from_epoch: str | int | None = None,
    to_epoch: str | int | None = None,
    corpus: str | None = None,
    most_changed: int = 10,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> dict[str, Any]:
    """The ``engines.drift/1`` document for one configuration between two epochs."""
    from scoring.positions import load_queries
    from scoring.results import json_safe, score
    from store.benchmarks import find_benchmark

    b = find_benchmark(db, bench)
    cfg, e_from, e_to = _epochs(db, b.id, engine, from_epoch, to_epoch)
    result = score(db, bench, corpus=corpus, systems=[cfg.config_hash], epochs="all", resamples=resamples, seed=seed)
    sys_from = next((x for x in result.systems if x.ref.config_id == cfg.id and x.ref.epoch == e_from.epoch), None)
    sys_to = next((x for x in result.systems if x.ref.config_id == cfg.id and x.ref.epoch == e_to.epoch), None)
    with db.session() as s:
        queries = [q for q in load_queries(s, b.id) if q.primary]
        need = sorted({q.sha for q in queries})
        before, after = _lists(s, cfg.id, e_from.epoch, need), _lists(s, cfg.id, e_to.epoch, need)
    scored_idx = {q["qid"]: i for i, q in enumerate(result.queries)}
    rows = _rows(queries, before, after, scored_idx, sys_from, sys_to)
    n = len(rows)
    boot = Bootstrap.draw(n, resamples=resamples, seed=seed)
    rbo_arr = np.asarray([r["rbo"] for r in rows], dtype=np.float64)
    lo, hi = boot.interval(rbo_arr) if n else (np.nan, np.nan)
    metric_idx = np.asarray([scored_idx[r["qid"]] for r in rows if r["scored"]], dtype=np.int64)
    diffs = _paired(sys_from, sys_to, metric_idx, resamples=resamples, seed=seed)
    ranked = rank_changed(rows)
    doc = {
        "schema": SCHEMA,
        "engine": cfg.engine,
        "label": cfg.label,
        "config_hash": cfg.config_hash,
        "benchmark": result.benchmark,
        "corpus": result.corpus,
        "from": _epoch_json(e_from),
        "to": _epoch_json(e_to),
        "p": P,
        "bootstrap": {"resamples": resamples, "seed": seed, "ci": boot.ci, "method": "percentile"},
        "n_queries": len(queries),
        "n_common": n,
        "n_scored": int(len(metric_idx)),
        "only_from": sum(1 for q in queries if q.sha in before and q.sha not in after),
        "only_to": sum(1 for q in queries if q.sha in after and q.sha not in before),
        "overall": {
            "rbo": {"value": float(rbo_arr.mean()) if n else None, "ci": [lo, hi] if n else None},
            "top1_changed": (sum(r["top1_changed"] for r in rows) / n) if n else None,
            "top10_changed": (sum(r["top10_changed"] for r in rows) / n) if n else None,
            "jaccard@10": float(np.mean([r["jaccard@10"] for r in rows])) if n else None,
            "changed": (sum(r["changed"] for r in rows) / n) if n else None,
            "paired": diffs,
        },
        "most_changed": [r["qid"] for r in ranked[:most_changed]],
        "per_query": rows,
    }
    return json_safe(doc)


@dataclass(frozen=True)
class _Config:
    """The compared configuration, read while its session was open."""

    id: int
    label: str
    config_hash: str
    engine: str


def _epochs(
    db, bench_id: int, engine: str, from_epoch: str | int | None, to_epoch: str | int | None
) -> tuple[_Config, EpochInfo, EpochInfo]:
    """The configuration ``engine`` names and the two epochs to compare (``--to``: the
    newest with answers by default; ``--from``: the one before it)."""
    from store.models import Query

    with db.session() as s:
        shas = sorted(set(s.execute(sa.select(Query.query_sha256).where(Query.benchmark_id == bench_id)).scalars()))
        cfg = find_config(s, engine, shas)
        infos = [e for e in epochs_of(s, cfg.id)
                 if s.scalar(sa.select(sa.func.count()).select_from(Answer).where(
                     Answer.config_id == cfg.id, Answer.epoch == e.epoch, ~Answer.superseded)) ]
        conf = _Config(id=cfg.id, label=cfg.label, config_hash=cfg.config_hash, engine=cfg.engine)
    label = conf.label
    if len(infos) < 2 and (from_epoch is None or to_epoch is None):
        have = ", ".join(f"{e.epoch} ({e.label})" for e in infos) or "none"
        raise InputError(f"{label} has answers in {len(infos)} epoch(s) ({have}); drift needs two "
                         "(open one with `engines crawl ENGINE --bench B --refresh`)")
    e_to = pick_epoch(infos, to_epoch, "--to") if to_epoch is not None else infos[-1]
    if from_epoch is not None:
        e_from = pick_epoch(infos, from_epoch, "--from")
    else:
        older = [e for e in infos if e.epoch < e_to.epoch]
        if not older:
            raise InputError(f"--to {e_to.epoch}: no earlier epoch of {label} to compare with; pass --from")
        e_from = older[-1]
    if e_from.epoch == e_to.epoch:
        raise InputError(f"--from and --to name the same epoch ({e_from.epoch}); pick two different epochs")
    return conf, e_from, e_to


def _rows(queries, before: dict[str, list[str]], after: dict[str, list[str]], scored_idx: dict[str, int],
          sys_from, sys_to) -> list[dict[str, Any]]:
    """One row per primary query answered in both epochs."""
    # Rank similarity needs no gold: every primary query answered in both epochs. The
    # metric differences need gold in the corpus: the scored ones among them.
    common = [q for q in queries if q.sha in before and q.sha in after]

    def gold(system, qid: str) -> int | None:
        if system is None or qid not in scored_idx:
            return None
        return _first_gold(system.per_query[qid]["positions"])

    rows: list[dict[str, Any]] = []
    for q in common:
        a, bl = before[q.sha], after[q.sha]
        rows.append({
            "qid": q.qid,
            "text": q.text,
            **compare_lists(a, bl),
            "scored": q.qid in scored_idx,
            "gold_before": gold(sys_from, q.qid),
            "gold_after": gold(sys_to, q.qid),
            "top_before": a[:TOP_SHOWN],
            "top_after": bl[:TOP_SHOWN],
            "n_before": len(a),
            "n_after": len(bl),
        })
    return rows


def _paired(sys_from, sys_to, metric_idx: np.ndarray, *, resamples: int, seed: int) -> dict[str, Any]:
    """The paired difference (to − from) of each of :data:`METRICS` over the scored rows."""
    diffs: dict[str, Any] = {}
    if sys_from is not None and sys_to is not None and len(metric_idx):
        mboot = Bootstrap.draw(len(metric_idx), resamples=resamples, seed=seed)
        for m in METRICS:
            if m in sys_from.arrays and m in sys_to.arrays:
                x_from, x_to = sys_from.arrays[m][metric_idx], sys_to.arrays[m][metric_idx]
                if np.all(np.abs(x_to - x_from) <= ZERO):  # the same on every query
                    diffs[m] = {"from": float(x_from.mean()), "to": float(x_to.mean()),
                                "diff": 0.0, "ci": [0.0, 0.0], "p": 1.0}
                    continue
                pr = mboot.paired(x_to, x_from)
                diffs[m] = {"from": float(x_from.mean()), "to": float(x_to.mean()),
                            "diff": pr.diff, "ci": list(pr.ci), "p": pr.p}
    return diffs


def write_json(doc: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    if not path.parent.exists():
        raise InputError(f"directory {path.parent} for --json {path} does not exist; create it first")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, ensure_ascii=False, allow_nan=False, indent=1), encoding="utf-8")
    tmp.replace(path)
    return path
