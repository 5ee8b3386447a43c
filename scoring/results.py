"""``score()``: one scorer for every row, from the database only, to a :class:`ScoreResult`.

Flow (METHODOLOGY.md): pick the benchmark's queries (primary styles by default) and the
scope (a subset, or the gold names shared by several corpora) → resolve gold names and
every system's hits against the one chosen corpus → store positions per (system, query,
gold unit) → read them back as the only metric input → per-query arrays → macro means,
bootstrap CIs, curves, breakdowns, paired comparisons. ``ScoreResult.to_json()`` is the
``engines.score/1`` document the HTML report and the TREC export read.

The parts: :mod:`scoring.scope` (queries and gold units in play), :mod:`scoring.systems`
(which rows are scored, and how a system is named), :mod:`scoring.profiles` (a row's
positions → its metrics, one :class:`~scoring.profiles.Profile` per profile name) and
:mod:`scoring.compare` (paired bootstrap). This module orchestrates them, stores and reads
each row's positions, and holds the result types.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from sqlalchemy.exc import IntegrityError

from scoring import aggregate as agg
from scoring.bootstrap import Bootstrap, RESAMPLES, SEED, CI
from scoring.compare import paired_comparisons, parse_pairs
from scoring.matching import recompute
from scoring.metrics import K_MAX
from scoring.positions import derive_positions, ensure_positions, read_positions
from scoring.profiles import COMPARE_METRICS, PROFILES, Profile, Ranks, RunContext, SystemContext, get_profile
from scoring.resolve import NOT_IN_CORPUS, RESOLVED, resolution_counts, resolve_hits
from scoring.scope import Scope, build_scope, read_name_list
from scoring.systems import DISPLAY_NAMES, Selection, SystemRef, dropped_item_count, answer_latencies, ambiguous, match_systems, select
from store.benchmarks import find_benchmark
from store.corpus import pick_corpus
from store.db import Database
from store.errors import InputError

SCHEMA = "engines.score/1"
BREAKDOWN_DIMS = ("style", "kind", "difficulty")
SLICE_BANNER = "development slice — not a result"
__all__ = ["SCHEMA", "PROFILES", "BREAKDOWN_DIMS", "COMPARE_METRICS", "SLICE_BANNER", "DISPLAY_NAMES",
           "match_systems", "ambiguous", "read_name_list", "SystemRef", "SystemScore", "ScoreResult",
           "score", "write_json"]


# --------------------------------------------------------------------------- records


@dataclass
class SystemScore:
    ref: SystemRef
    n: int
    dropped: int
    unanswered: int
    badges: list[str]
    latency_p95_ms: float | None
    resolution: dict[str, int]
    coverage: float | None
    metrics: dict[str, dict[str, Any]]
    curves: dict[str, Any] | None
    pr: dict[str, Any] | None
    breakdowns: dict[str, dict[str, Any]]
    per_query: dict[str, dict[str, Any]]
    arrays: dict[str, np.ndarray] = field(repr=False, default_factory=dict)  # per-query, for comparisons
    qids: list[str] = field(repr=False, default_factory=list)  # the queries ``arrays`` are aligned to
    sample: str | None = None  # the sample subset this row was crawled on, if any
    uncovered: int = 0  # --uncovered zero: queries kept in n with no gold in the corpus, scored 0

    def to_json(self) -> dict[str, Any]:
        r = self.ref
        return {
            "id": r.id,
            "label": r.label,
            "engine": r.engine,
            "endpoint_version": r.endpoint_version,
            "config_hash": r.config_hash,
            "params": r.params,
            "epoch": r.epoch,
            "epoch_label": r.epoch_label,
            "epoch_started": r.epoch_started,
            "local": r.local,
            "licence": r.licence,
            "result_cap": r.result_cap,
            "n": self.n,
            "dropped": self.dropped,
            "unanswered": self.unanswered,
            "badges": self.badges,
            "latency_p95_ms": self.latency_p95_ms,
            "resolution": self.resolution,
            "coverage": self.coverage,
            "metrics": self.metrics,
            "curves": self.curves,
            "pr": self.pr,
            "breakdowns": self.breakdowns,
            "per_query": self.per_query,
            "sample": self.sample,
            **({"uncovered": self.uncovered} if self.uncovered else {}),
            # Imported runs (engine "run", archive.runs): where the run came from (--source).
            "source": r.params.get("source") if r.engine == "run" else None,
        }


@dataclass
class ScoreResult:
    generated_at: str
    code_version: str
    k_max: int
    bootstrap: dict[str, Any]
    profile: str
    benchmark: dict[str, Any]
    corpus: dict[str, Any]
    subset: str | None
    banner: str | None
    systems: list[SystemScore]
    queries: list[dict[str, Any]]
    comparisons: list[dict[str, Any]]
    scope: dict[str, Any]
    table_metrics: tuple[str, ...]
    # Scored queries whose units share a name (METHODOLOGY.md "Units that share a returned row").
    overlapping_units: int = 0

    def system(self, sid: str) -> SystemScore:
        for s in self.systems:
            if s.ref.id == sid:
                return s
        raise KeyError(sid)

    def to_json(self) -> dict[str, Any]:
        head = self.table_metrics[0] if self.table_metrics else None
        return json_safe(
            {
                "schema": SCHEMA,
                "generated_at": self.generated_at,
                "code_version": self.code_version,
                "k_max": self.k_max,
                "bootstrap": self.bootstrap,
                "profile": self.profile,
                "benchmark": self.benchmark,
                "corpus": self.corpus,
                "subset": self.subset,
                "banner": self.banner,
                "scope": self.scope,
                "table_metrics": list(self.table_metrics),
                "overlapping_units": self.overlapping_units,
                "systems": order_undefined_last([s.to_json() for s in self.systems], head),
                "queries": self.queries,
                "comparisons": self.comparisons,
            }
        )


def order_undefined_last(systems: list[dict[str, Any]], metric: str | None) -> list[dict[str, Any]]:
    """The rows with ``metric`` undefined (a depth below its k) after the others, each with
    ``order_note`` saying why (the table, the JSON and the report show it)."""
    if metric is None:
        return systems
    from scoring.aggregate import canonical

    try:
        _, k = canonical(metric)
    except ValueError:  # a profile's own metric (MAMUT): no k
        k = None
    defined, undefined = [], []
    for s in systems:
        m = (s.get("metrics") or {}).get(metric)
        if isinstance(m, dict) and m.get("value") is None and s.get("n"):
            cap = s.get("result_cap")
            why = (f"its lists go to depth {cap} (k≤{cap}), below k = {k}" if cap is not None and k is not None
                   else "it has no value")
            fix = (f" (an imported run: engines run import --depth {k} or more, if it was asked for that many)"
                   if s.get("engine") == "run" and k is not None else "")
            s["order_note"] = f"listed after the ranked rows: {metric} is undefined, {why}{fix}"
            undefined.append(s)
        else:
            defined.append(s)
    return defined + undefined


def json_safe(obj: Any) -> Any:
    """JSON-safe: NaN → None, numpy scalars → Python."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return None if math.isnan(f) or math.isinf(f) else f
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def write_json(result: ScoreResult, path: str | Path) -> Path:
    """Write ``result.to_json()`` atomically (temp file, then rename)."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        raise InputError(f"directory {path.parent} for --json {path} does not exist; create it first")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result.to_json(), ensure_ascii=False, allow_nan=False), encoding="utf-8")
    tmp.replace(path)
    return path


# ------------------------------------------------------------------------ scoring


def score(
    db: Database,
    bench_name: str,
    corpus: str | None = None,
    subset: str | None = None,
    systems: Sequence[str] | None = None,
    by: Sequence[str] | str | None = None,
    compare: Sequence[Sequence[str]] | Sequence[str] | None = None,
    profile: str = "main",
    *,
    shared_with: Sequence[str] | None = None,
    snapshots: dict[str, str] | None = None,
    styles: Sequence[str] | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    slice: str | None = None,
    epochs: str | None = None,
    uncovered: str = "drop",
    answered_by: str | None = None,
) -> ScoreResult:
    """Score every system (or the named ones) on a benchmark against one corpus.

    ``styles``: None = the benchmark's primary styles, ``["all"]`` = every style, or a list.
    ``subset``: a loaded subset name (gold names, e.g. ``shared171``, or target ids).
    ``shared_with``: corpora (``NAME[@REV]``) or name-list files; the scope becomes the gold
    names present in the scoring corpus and every one of these. ``snapshots``: system id →
    corpus or name-list file of the snapshot that engine searches (coverage column and
    "different corpus" badge). ``compare``: one pair ``(A, B)`` or a list of pairs.
    ``by`` only selects which breakdowns a table prints; the JSON carries all of them.
    ``slice``: ``engine-subset:E`` scores every row on engine E's sampled queries (its
    largest ``sample:E:*`` subset). A row crawled on a sample only is scored on its own
    sample (its own n and intervals, badge ``n=N sampled``); paired comparisons use the
    queries both rows are scored on and report that n.
    ``epochs``: None = each configuration's newest epoch (plus systems named with an
    ``@e<N>`` id in ``systems`` or ``compare``), ``"all"``, or an epoch number or label.
    ``uncovered``: "drop" (METHODOLOGY.md: a query whose gold is not in the corpus leaves n)
    or "zero" (it stays in n, scored 0 by every row; the rows say how many).
    ``answered_by``: a system; only the queries whose text it answered are scored.
    No query left to score is an error (one line: what would fix it).
    """
    prof = get_profile(profile)
    if subset and shared_with:
        raise InputError("--subset and --shared-with both define the query scope; pass one of them")
    # k_max is pinned (curves at two k_max are not comparable, and stored positions are
    # computed at this one), so it is not a parameter.
    k_max = K_MAX
    for dim in ([by] if isinstance(by, str) else list(by or [])):
        if dim not in BREAKDOWN_DIMS:
            raise InputError(f"unknown breakdown {dim!r}; choose one of {', '.join(BREAKDOWN_DIMS)}")

    bench = find_benchmark(db, bench_name)
    pairs = parse_pairs(compare)
    with db.session() as s:
        corp = pick_corpus(s, corpus)
        kw = dict(bench_name=bench_name, styles=styles, subset=subset, shared_with=shared_with, slice=slice,
                  uncovered=uncovered)
        scope = build_scope(s, bench, corp, **kw)
        if answered_by is not None:
            scope = build_scope(s, bench, corp, answered=answered_texts(s, scope, answered_by, epochs), **kw)
        sel = select(s, scope, systems, pairs, epochs, snapshots)

    if not sel.refs:  # nothing to score: no resampling matrix (resamples × queries) to draw
        return _result(bench, corp, scope, prof, [], [], resamples=resamples, seed=seed)
    n = len(scope.scored)
    if n == 0 and scope.in_scope:
        raise InputError(_nothing_to_score(bench.name, corp, scope))
    boot = Bootstrap.draw(n, resamples=resamples, seed=seed)
    run = RunContext(k_max=k_max, task=bench.task, gold=scope.gold, present=scope.present,
                     pool_size=corp.row_count, affected=frozenset(qid for qid, _, _ in scope.affected),
                     uncovered=frozenset(scope.uncovered))
    # Resolve and store positions per system (one transaction each), then read them back.
    system_scores = [_score_system(_system_context(db, corp, scope, sel, ref, run, boot, resamples, seed), prof)
                     for ref in sel.refs]
    comparisons = paired_comparisons(sel.pairs, system_scores, boot, n, resamples=resamples, seed=seed)
    return _result(bench, corp, scope, prof, system_scores, comparisons, resamples=resamples, seed=seed)


def _nothing_to_score(bench: str, corp: Any, scope: Scope) -> str:
    """The one line for a scope whose queries all lost their gold to the corpus."""
    return (f"{bench}: none of its {len(scope.in_scope)} queries in scope has a gold name in corpus "
            f"{corp.name}@{corp.revision} (n = 0, {scope.dropped} dropped); score against the corpus the "
            "benchmark names (--corpus), load a corpus that holds its gold, or, for a BEIR folder whose "
            "corpus-ids are not declaration names, load it again with a corpus.jsonl whose titles give the names")


def answered_texts(session: Any, scope: Scope, spec: str, epochs: str | None) -> tuple[str, set[str]]:
    """``--answered-by SYSTEM``: (its id, the in-scope texts it answered in its scored epoch)."""
    import sqlalchemy as sa

    from store.models import Answer

    found = select(session, scope, [spec], [], epochs, None).refs
    if len({r.config_id for r in found}) != 1 or len(found) != 1:
        raise ambiguous("--answered-by", spec, [r.id for r in found])
    ref = found[0]
    a = Answer.__table__
    shas = set(scope.shas)
    texts = {sha for sha in session.execute(sa.select(a.c.query_sha256).where(
        a.c.config_id == ref.config_id, a.c.epoch == ref.epoch, ~a.c.superseded)).scalars() if sha in shas}
    if not texts:
        raise InputError(f"--answered-by {spec}: {ref.id} answered none of the queries in scope; "
                         "name a system that has answers here")
    return ref.id, texts


def _system_context(
    db: Database, corp: Any, scope: Scope, sel: Selection, ref: SystemRef, run: RunContext,
    boot: Bootstrap, resamples: int, seed: int,
) -> SystemContext:
    """One row's positions resolved and stored (one transaction), then read back with its
    resolution counts, latencies and the matching's recomputed positions. On a read-only
    database they are derived in memory, every hit resolved in the query: nothing is written."""
    # A row crawled on a sample only is scored on its own sample: its own n and intervals.
    mine, mine_boot, mine_dropped = scope.scored, boot, scope.dropped
    sample = sel.sample_of[ref.id]
    if sample is not None:
        members = dict(scope.samples.get(ref.engine, []))[sample]
        mine = [(q, u) for q, u in scope.scored if q.sha in members]
        mine_dropped = sum(1 for q, _ in scope.in_scope if q.sha in members) - len(mine)
        mine_boot = Bootstrap.draw(len(mine), resamples=resamples, seed=seed)
    live = corp.id if getattr(db, "read_only", False) else None  # read-only: derived in memory, nothing stored
    if live is None:
        try:
            with db.session() as s, s.begin():
                changed = resolve_hits(s, corp.id, ref.config_id, ref.epoch, scope.shas)
                ensure_positions(
                    s, corpus_id=corp.id, config_id=ref.config_id, epoch=ref.epoch,
                    queries=[q for q, _ in scope.in_scope], present=scope.present, k_max=run.k_max, force=changed > 0,
                )
        except IntegrityError:
            # A concurrent scorer stored this system's positions first (unique key); they are
            # derived from the same hits, so read theirs.
            pass
    mine_shas = sorted({q.sha for q, _ in mine})
    with db.session() as s:
        if live is None:
            stored = read_positions(s, corpus_id=corp.id, config_id=ref.config_id, epoch=ref.epoch,
                                    query_ids=[q.id for q, _ in mine])
        else:
            stored = derive_positions(s, corpus_id=corp.id, config_id=ref.config_id, epoch=ref.epoch,
                                      queries=[q for q, _ in mine], present=scope.present, k_max=run.k_max)
        res_counts = resolution_counts(s, corp.id, ref.config_id, ref.epoch, mine_shas, run.k_max, live=live is not None)
        latencies = answer_latencies(s, ref, mine_shas)
        res_counts = {**res_counts, "dropped_items": dropped_item_count(s, ref, mine_shas)}
        extra = recompute(s, config_id=ref.config_id, epoch=ref.epoch, affected=scope.affected, k_max=run.k_max,
                          live_corpus_id=live)
    return SystemContext(run=run, ref=ref, scored=mine, stored=stored, boot=mine_boot, dropped=mine_dropped,
                         res_counts=res_counts, latencies=latencies, snapshot=sel.snap_names.get(ref.id),
                         recomputed=extra or {}, sample=sample)


def _score_system(ctx: SystemContext, profile: Profile) -> SystemScore:
    """One row's :class:`SystemScore`: what every profile reports (badges, coverage,
    latency, resolution, breakdowns) around the profile's metrics."""
    ranks = Ranks.gather(ctx)
    ref, scored, k_max = ctx.ref, ctx.scored, ctx.run.k_max
    unanswered = ranks.answered.count(False)
    cap = ref.result_cap
    uncovered = sum(1 for q, _ in scored if q.id in ctx.run.uncovered)
    badges = []
    if unanswered:
        badges.append("incomplete")
    if cap is not None and cap < k_max:
        badges.append(f"k≤{cap}")
    if ctx.snapshot is not None:
        badges.append("different corpus")
    if ref.engine == "run":  # an imported run file (archive.runs), not measured by us
        badges.append("imported")
    if ctx.sample is not None:
        badges.append(f"n={len(scored)} sampled")
    if uncovered:
        badges.append(f"uncovered scored 0 ({uncovered})")
    gold, present = ctx.run.gold, ctx.run.present
    coverage = (len(ctx.snapshot) if ctx.snapshot is not None else len(present)) / len(gold) if gold else None
    lat = float(np.percentile(ctx.latencies, 95)) if ctx.latencies else None
    rc = ctx.res_counts
    resolution = {"resolved": rc.get(RESOLVED, 0), "not_in_corpus": rc.get(NOT_IN_CORPUS, 0),
                  "dropped_items": rc.get("dropped_items", 0)}
    groups = {dim: [getattr(q, dim) for q, _ in scored] for dim in BREAKDOWN_DIMS}
    m = profile.measure(ctx, ranks)
    breakdowns = {}
    for dim in BREAKDOWN_DIMS:
        if any(g is not None for g in groups[dim]):
            breakdowns[dim] = agg.breakdown(m.bd_values, groups[dim], cap) if m.bd_values else {}
    return SystemScore(
        ref=ref, n=len(scored), dropped=ctx.dropped, unanswered=unanswered, badges=badges, latency_p95_ms=lat,
        resolution=resolution, coverage=coverage, metrics=m.metrics, curves=m.curves, pr=m.pr,
        breakdowns=breakdowns, per_query=m.per_query, arrays=m.arrays, qids=[q.qid for q, _ in scored],
        sample=ctx.sample, uncovered=uncovered,
    )


def _result(
    bench: Any, corp: Any, scope: Scope, profile: Profile, system_scores: list[SystemScore],
    comparisons: list[dict[str, Any]], *, resamples: int, seed: int,
) -> ScoreResult:
    """The run's :class:`ScoreResult` from its scope, rows and comparisons."""
    from engines import code_version

    multi = any(len(u) > 1 for _, u in scope.scored) or bench.task != "theorem-search"
    is_slice = "slice" in corp.name.lower() or bool((corp.meta or {}).get("slice")) or bool((corp.meta or {}).get("development"))
    return ScoreResult(
        generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        code_version=code_version(),
        k_max=K_MAX,
        bootstrap={"resamples": resamples, "seed": seed, "ci": CI, "method": "percentile"},
        profile=profile.name,
        benchmark={"name": bench.name, "task": bench.task, "sha256": bench.sha256, "n_queries": len(scope.in_scope),
                   "modified": bench.modified},
        corpus={"name": corp.name, "revision": corp.revision, "sha256": corp.sha256, "row_count": corp.row_count,
                "slice": is_slice},
        subset=scope.subset,
        banner=SLICE_BANNER if is_slice else None,
        systems=system_scores,
        queries=[
            {"qid": q.qid, "text": q.text, "style": q.style, "kind": q.kind, "difficulty": q.difficulty,
             "target_id": q.target_id, "gold": [list(names) for _, names in units],
             "gold_kinds": [u.kind for u, _ in units], "gold_ordinals": [u.ordinal for u, _ in units]}
            for q, units in scope.scored
        ],
        comparisons=comparisons,
        scope=scope.desc,
        table_metrics=profile.table_metrics(multi),
        overlapping_units=scope.overlapping,
    )
