"""``score()``: one scorer for every row, from the database only, to a :class:`ScoreResult`.

Flow (METHODOLOGY.md): pick the benchmark's queries (primary styles by default) and the
scope (a subset, or the gold names shared by several corpora) → resolve gold names and
every system's hits against the one chosen corpus → store positions per (system, query,
gold unit) → read them back as the only metric input → per-query arrays → macro means,
bootstrap CIs, curves, breakdowns, paired comparisons. ``ScoreResult.to_json()`` is the
``engines.score/1`` document the HTML report and the TREC export read.

A *system* is (engine configuration, epoch). Its ``id`` is the configuration's label,
suffixed with ``@e<epoch>`` when the configuration has several epochs, and with the
config hash prefix when two configurations share a label.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from scoring import aggregate as agg
from scoring.bootstrap import Bootstrap, RESAMPLES, SEED, CI
from scoring.matching import has_overlap, recompute
from scoring.mamut import MAMUT_METRICS, PROFILES as MAMUT_PROFILES, SKLEARN_METRICS, profile_query
from scoring.metrics import K_MAX, QueryMatrix, per_query_curves, reciprocal_rank
from scoring.positions import QueryRec, UnitRec, ensure_positions, load_queries, read_positions, resolvable_units
from scoring.resolve import NOT_IN_CORPUS, RESOLVED, _chunks, names_in_corpus, resolution_counts, resolve_hits
from store.benchmarks import find_benchmark
from store.corpus import pick_corpus
from store.db import Database
from store.errors import InputError
from store.models import Answer, EngineConfig, Subset, SubsetMember

SCHEMA = "engines.score/1"
PROFILES = ("main",) + MAMUT_PROFILES
BREAKDOWN_DIMS = ("style", "kind", "difficulty")
COMPARE_METRICS = ("nDCG@10", "R@1", "R@10", "MRR", "MAP")
SLICE_BANNER = "development slice — not a result"


# ------------------------------------------------------------------ naming a system

# How people write an engine's name (the README, papers): matched like engine names.
DISPLAY_NAMES = {
    "leansearch": "LeanSearch",
    "leanexplore": "LeanExplore",
    "leanfinder": "Lean Finder",
    "loogle": "Loogle",
    "leanstatesearch": "LeanStateSearch",
    "bm25": "BM25",
}


def _squash(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def match_systems(spec: str, candidates: Sequence[Any], *, sid: Any = None) -> list[Any]:
    """The candidates ``spec`` names — the one way a system is named everywhere (``score
    --system/--compare/--snapshot``, ``report``, ``plot``, ``drift``). Case-insensitive,
    first rule that matches wins:

    1. its id (``sid(c)``, e.g. ``leansearch@e1``) or its configuration label
       (``leanfinder (stand-in)``);
    2. its engine name (``leanfinder``) or display name (``Lean Finder``; spaces and
       punctuation ignored);
    3. a prefix (6 or more characters) of its config hash.

    Candidates have ``label``, ``engine`` and ``config_hash``; the epochs of one
    configuration all match. Callers decide what several configurations mean
    (:func:`ambiguous`)."""
    sid = sid or (lambda c: c.label)
    w = str(spec).strip().casefold()
    if not w:
        return []
    hits = [c for c in candidates if w in (str(sid(c)).casefold(), str(c.label).casefold())]
    if not hits:
        key = _squash(w)
        hits = [c for c in candidates if key and key in (_squash(c.engine), _squash(DISPLAY_NAMES.get(c.engine, c.engine)))]
    if not hits and len(w) >= 6:
        hits = [c for c in candidates if str(c.config_hash).casefold().startswith(w)]
    return hits


def ambiguous(option: str, spec: str, names: Sequence[str]) -> InputError:
    """The one-line error for a name that picks several systems, listing them."""
    return InputError(f"{option}: {spec!r} names {len(names)} systems ({', '.join(names)}); "
                      "give one of these ids or a config-hash prefix")


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class SystemRef:
    config_id: int
    epoch: int
    id: str
    label: str
    engine: str
    endpoint_version: str
    config_hash: str
    params: dict[str, Any]
    local: bool
    licence: str | None
    result_cap: int | None
    epoch_label: str | None = None  # store.epochs: --epoch-label, else the date of the first send
    epoch_started: str | None = None


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
            # Imported runs (engine "run", crawler.runs): where the run came from (--source).
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
        return _clean(
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
                "systems": [s.to_json() for s in self.systems],
                "queries": self.queries,
                "comparisons": self.comparisons,
            }
        )


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN → None, numpy scalars → Python."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
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


# --------------------------------------------------------------------- selection


def read_name_list(path: Path) -> set[str]:
    """Names of an engine's own corpus snapshot: a JSON list, or one name per line (# comments)."""
    from store.names import normalize_name

    if not path.exists():
        raise InputError(f"name list {path} does not exist (expected a corpus name in the database or a file)")
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{exc.lineno}: invalid JSON name list ({exc.msg})") from None
        if not isinstance(items, list):
            raise InputError(f"{path}: a JSON name list must be a list of names")
    else:
        items = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    names = {n for n in (normalize_name(x) for x in items) if n}
    if not names:
        raise InputError(f"{path}: no names in the file")
    return names


def _names_of(session: sa.orm.Session, spec: str, gold: set[str]) -> tuple[str, set[str]]:
    """Gold names present in a named corpus of the database, or in a name-list file."""
    path = Path(spec).expanduser()
    if path.suffix in (".txt", ".json", ".lst") or path.exists():
        return path.name, read_name_list(path) & gold
    corpus = pick_corpus(session, spec)
    return f"{corpus.name}@{corpus.revision}", names_in_corpus(session, corpus.id, gold)


def _find_systems(session: sa.orm.Session, shas: Sequence[str]) -> list[SystemRef]:
    a, c = Answer.__table__, EngineConfig.__table__
    pairs: set[tuple[int, int]] = set()
    for chunk in _chunks(list(shas)):
        pairs.update(
            (int(cid), int(ep))
            for cid, ep in session.execute(sa.select(a.c.config_id, a.c.epoch).where(a.c.query_sha256.in_(chunk), ~a.c.superseded).distinct())
        )
    if not pairs:
        return []
    configs = {
        row.id: row
        for row in session.execute(sa.select(c).where(c.c.id.in_(sorted({p[0] for p in pairs}))))
    }
    epochs: dict[int, int] = {}
    for cid, _ in pairs:
        epochs[cid] = epochs.get(cid, 0) + 1
    label_count: dict[str, int] = {}
    for cid in {p[0] for p in pairs}:
        label_count[configs[cid].label] = label_count.get(configs[cid].label, 0) + 1
    out = []
    for cid, epoch in sorted(pairs, key=lambda p: (configs[p[0]].label, p[0], p[1])):
        cfg = configs[cid]
        sid = cfg.label if label_count[cfg.label] == 1 else f"{cfg.label}#{cfg.config_hash[:8]}"
        if epochs[cid] > 1:
            sid += f"@e{epoch}"
        out.append(
            SystemRef(
                config_id=cid, epoch=epoch, id=sid, label=cfg.label, engine=cfg.engine,
                endpoint_version=cfg.endpoint_version, config_hash=cfg.config_hash, params=cfg.params or {},
                local=bool(cfg.local), licence=cfg.licence, result_cap=cfg.result_cap,
            )
        )
    return out


def _pick_epochs(session: sa.orm.Session, refs: list[SystemRef], spec: str | None, named: set[str]) -> list[SystemRef]:
    """Which epoch of each configuration to score, each named by its label and start."""
    from dataclasses import replace

    from store.epochs import epochs_of

    infos = {cid: {e.epoch: e for e in epochs_of(session, cid)} for cid in {r.config_id for r in refs}}
    text = None if spec is None else str(spec).strip()
    if text in (None, "", "newest"):
        newest: dict[int, int] = {}
        for r in refs:
            newest[r.config_id] = max(newest.get(r.config_id, r.epoch), r.epoch)
        keep = [r for r in refs if r.epoch == newest[r.config_id] or r.id in named]
    elif text == "all":
        keep = list(refs)
    else:
        keep = [r for r in refs if text == str(r.epoch) or (r.epoch in infos[r.config_id] and infos[r.config_id][r.epoch].label == text)]
        if refs and not keep:
            known = sorted({f"{e.epoch} ({e.label})" for i in infos.values() for e in i.values()})
            raise InputError(f"--epoch {text!r}: no system has that epoch (epochs: {', '.join(known)}); "
                             "give an epoch number, a label, 'newest' or 'all'")
    out = []
    for r in keep:
        e = infos[r.config_id].get(r.epoch)
        out.append(replace(r, epoch_label=e.label if e else None,
                           epoch_started=e.started_at.isoformat(timespec="seconds") if e and e.started_at else None))
    return out


def _select_systems(found: list[SystemRef], wanted: Sequence[str] | None) -> list[SystemRef]:
    if not wanted:
        return found
    out: list[SystemRef] = []
    for w in wanted:
        hits = match_systems(w, found, sid=lambda r: r.id)
        if not hits:
            known = ", ".join(s.id for s in found) or "none"
            raise InputError(f"--system: no system {w!r} has answers for this benchmark (systems: {known}); "
                             "give a label, engine name, display name or config-hash prefix")
        if len({h.config_id for h in hits}) > 1:  # several configurations: say which
            raise ambiguous("--system", w, [h.id for h in hits])
        out.extend(h for h in hits if h not in out)
    return out


def _one_system(option: str, w: str, refs: list[SystemRef]) -> str:
    """The id of the one scored system ``w`` names (after epoch selection)."""
    hits = match_systems(w, refs, sid=lambda r: r.id)
    if not hits:
        raise InputError(f"{option}: no system {w!r} in this scoring run (systems: {', '.join(sorted(r.id for r in refs)) or 'none'}); "
                         "give a label, engine name, display name or config-hash prefix")
    if len(hits) > 1:
        raise ambiguous(option, w, [h.id for h in hits])
    return hits[0].id


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
    """
    if profile not in PROFILES:
        raise InputError(f"unknown scoring profile {profile!r}; choose one of {', '.join(PROFILES)}")
    if subset and shared_with:
        raise InputError("--subset and --shared-with both define the query scope; pass one of them")
    # k_max is pinned (curves at two k_max are not comparable, and stored positions are
    # computed at this one), so it is not a parameter.
    k_max = K_MAX
    for dim in ([by] if isinstance(by, str) else list(by or [])):
        if dim not in BREAKDOWN_DIMS:
            raise InputError(f"unknown breakdown {dim!r}; choose one of {', '.join(BREAKDOWN_DIMS)}")
    from engines import code_version

    bench = find_benchmark(db, bench_name)
    pairs = _pairs(compare)
    with db.session() as s:
        corp = pick_corpus(s, corpus)
        all_queries = load_queries(s, bench.id)
        queries = _filter_styles(all_queries, styles, bench.name)
        gold = {nm for q in queries for u in q.units for nm in u.names}
        present = names_in_corpus(s, corp.id, gold)

        # Scope: which queries and units are in play before the corpus is consulted.
        scope_desc: dict[str, Any] = {"styles": sorted({q.style for q in queries}),
                                      "default_styles": {q.id for q in queries} == {q.id for q in all_queries if q.primary}}
        allowed: set[str] | None = None
        targets: set[str] | None = None
        shas_in: set[str] | None = None
        samples = _samples(s, bench.name)
        if slice:
            kind, _, engine = slice.partition(":")
            if kind != "engine-subset" or not engine:
                raise InputError(f"--slice {slice!r}: expected engine-subset:ENGINE (e.g. engine-subset:leansearch)")
            mine = samples.get(engine.lower())
            if not mine:
                known = ", ".join(sorted(samples)) or "none"
                raise InputError(f"--slice {slice}: engine {engine!r} has no sampled crawl (sampled engines: {known}); "
                                 f"crawl one with `engines crawl {engine} --bench {bench_name} --sample N`")
            name, members = mine[-1]
            shas_in = set(members)
            scope_desc["slice"] = {"name": slice, "subset": name, "members": len(members)}
        if subset:
            sub = s.execute(sa.select(Subset).where(Subset.name == subset)).scalar_one_or_none()
            if sub is None:
                names = ", ".join(s.execute(sa.select(Subset.name).order_by(Subset.name)).scalars()) or "none"
                raise InputError(f"no subset named {subset!r} (loaded: {names}); load it with `engines bench load --shipped`")
            members = set(s.execute(sa.select(SubsetMember.member).where(SubsetMember.subset_id == sub.id)).scalars())
            if sub.member_kind == "target_id":
                targets = members
            elif sub.member_kind == "query_sha256":  # a sampled crawl's texts
                shas_in = members if shas_in is None else shas_in & members
            else:
                allowed = members
            scope_desc["subset"] = {"name": subset, "member_kind": sub.member_kind, "members": len(members)}
        if shared_with:
            allowed = set(present)
            sources = [f"{corp.name}@{corp.revision}"]
            for spec in shared_with:
                label, names = _names_of(s, spec, gold)
                allowed &= names
                sources.append(label)
            scope_desc["shared_with"] = sources
            scope_desc["shared_gold_names"] = len(allowed)
            subset = "shared(" + ", ".join(sources) + ")"

        in_scope: list[tuple[QueryRec, list[UnitRec]]] = []
        for q in queries:
            if targets is not None and q.target_id not in targets:
                continue
            if shas_in is not None and q.sha not in shas_in:
                continue
            units = [u for u in q.units if allowed is None or any(nm in allowed for nm in u.names)]
            if units:
                in_scope.append((q, units))

        scored: list[tuple[QueryRec, list[tuple[UnitRec, tuple[str, ...]]]]] = []
        dropped_qids: list[str] = []
        unresolved_units = 0
        # Queries whose positions cannot come from the stored table: a shared name makes
        # precision-type figures need the matching, and --shared-with narrows a group to
        # its shared names (stored positions were computed with all of them).
        affected: list[tuple[int, str, list[tuple[str, ...]]]] = []
        overlapping = 0
        for q, units in in_scope:
            keep = [(u, names) for u, names in resolvable_units(q, present) if u in units]
            narrowed = False
            if shared_with:
                kept = [(u, tuple(nm for nm in names if nm in allowed)) for u, names in keep]
                narrowed = any(len(a[1]) != len(b[1]) for a, b in zip(kept, keep))
                keep = [(u, names) for u, names in kept if names]
            unresolved_units += len(units) - len(keep)
            if keep:
                scored.append((q, keep))
                overlap = has_overlap([names for _, names in keep])
                overlapping += overlap
                if overlap or narrowed:
                    affected.append((q.id, q.sha, [names for _, names in keep]))
            else:
                dropped_qids.append(q.qid)
        n, dropped = len(scored), len(dropped_qids)
        scope_desc.update({"in_scope": len(in_scope), "dropped_qids": dropped_qids, "unresolved_units": unresolved_units,
                           "overlapping_units": overlapping})

        scope_shas = sorted({q.sha for q, _ in in_scope})
        found = _find_systems(s, scope_shas)
        refs = _select_systems(found, systems)
        # A name that picks one epoch (an ``@eN`` id) keeps that epoch whatever --epoch says.
        named = {h[0].id for w in [*(systems or ()), *(x for pair in pairs for x in pair)]
                 for h in [match_systems(w, found, sid=lambda r: r.id)] if len(h) == 1}
        refs = _pick_epochs(s, refs, epochs, named=named)
        snap_names = _snapshot_names(s, snapshots or {}, refs, gold)
        sample_of = {ref.id: _sample_of(s, ref, samples, scope_shas) for ref in refs}
        pairs = [(_one_system("--compare", a_, refs), _one_system("--compare", b_, refs)) for a_, b_ in pairs]

    boot = Bootstrap.draw(n, resamples=resamples, seed=seed)
    # Resolve and store positions per system (one transaction each), then read them back.
    system_scores: list[SystemScore] = []
    for ref in refs:
        # A row crawled on a sample only is scored on its own sample: its own n and intervals.
        mine, mine_boot, mine_dropped = scored, boot, dropped
        if sample_of[ref.id] is not None:
            members = dict(samples.get(ref.engine, []))[sample_of[ref.id]]
            mine = [(q, u) for q, u in scored if q.sha in members]
            mine_dropped = sum(1 for q, _ in in_scope if q.sha in members) - len(mine)
            mine_boot = Bootstrap.draw(len(mine), resamples=resamples, seed=seed)
        try:
            with db.session() as s, s.begin():
                changed = resolve_hits(s, corp.id, ref.config_id, ref.epoch, scope_shas)
                ensure_positions(
                    s, corpus_id=corp.id, config_id=ref.config_id, epoch=ref.epoch,
                    queries=[q for q, _ in in_scope], present=present, k_max=k_max, force=changed > 0,
                )
        except IntegrityError:
            # A concurrent scorer stored this system's positions first (unique key); they are
            # derived from the same hits, so read theirs.
            pass
        with db.session() as s:
            stored = read_positions(s, corpus_id=corp.id, config_id=ref.config_id, epoch=ref.epoch,
                                    query_ids=[q.id for q, _ in mine])
            res_counts = resolution_counts(s, corp.id, ref.config_id, ref.epoch, sorted({q.sha for q, _ in mine}), k_max)
            latencies = _latencies(s, ref, sorted({q.sha for q, _ in mine}))
            res_counts = {**res_counts, "dropped_items": _dropped_items(s, ref, sorted({q.sha for q, _ in mine}))}
            extra = recompute(s, config_id=ref.config_id, epoch=ref.epoch, affected=affected, k_max=k_max)
        system_scores.append(
            _score_system(ref, mine, stored, mine_boot, profile, k_max, mine_dropped, res_counts, latencies,
                          snap_names.get(ref.id), gold, present, bench.task,
                          recomputed=extra, affected={qid for qid, _, _ in affected}, pool_size=corp.row_count,
                          sample=sample_of[ref.id])
        )

    comparisons = []
    for a_id, b_id in pairs:  # ids were checked against refs before scoring
        sa_, sb_ = (next(x for x in system_scores if x.ref.id == w) for w in (a_id, b_id))
        # The queries both rows are scored on (a sampled row: its own sample), aligned.
        ia = {qid: i for i, qid in enumerate(sa_.qids)}
        ib = {qid: i for i, qid in enumerate(sb_.qids)}
        common = [qid for qid in sa_.qids if qid in ib]
        idx_a = np.asarray([ia[q] for q in common], dtype=np.int64)
        idx_b = np.asarray([ib[q] for q in common], dtype=np.int64)
        pboot = boot if len(common) == n and len(sa_.qids) == len(sb_.qids) == n else Bootstrap.draw(
            len(common), resamples=resamples, seed=seed)
        for metric in sa_.arrays:
            if metric not in sb_.arrays or not len(common):
                continue
            pr = pboot.paired(sa_.arrays[metric][idx_a], sb_.arrays[metric][idx_b])
            comparisons.append({"a": a_id, "b": b_id, "metric": metric, "diff": pr.diff, "ci": list(pr.ci), "p": pr.p,
                                "n": len(common)})

    multi = any(len(u) > 1 for _, u in scored) or bench.task != "theorem-search"
    if profile == "main":
        table = agg.TABLE_METRICS + ((("P@10", "Covered@10", "covered_paper@10")) if multi else ())
    else:
        table = MAMUT_METRICS if profile == "mamut" else SKLEARN_METRICS
    is_slice = "slice" in corp.name.lower() or bool((corp.meta or {}).get("slice")) or bool((corp.meta or {}).get("development"))
    return ScoreResult(
        generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        code_version=code_version(),
        k_max=k_max,
        bootstrap={"resamples": resamples, "seed": seed, "ci": CI, "method": "percentile"},
        profile=profile,
        benchmark={"name": bench.name, "task": bench.task, "sha256": bench.sha256, "n_queries": len(in_scope),
                   "modified": bench.modified},
        corpus={"name": corp.name, "revision": corp.revision, "sha256": corp.sha256, "row_count": corp.row_count,
                "slice": is_slice},
        subset=subset,
        banner=SLICE_BANNER if is_slice else None,
        systems=system_scores,
        queries=[
            {"qid": q.qid, "text": q.text, "style": q.style, "kind": q.kind, "difficulty": q.difficulty,
             "target_id": q.target_id, "gold": [list(names) for _, names in units],
             "gold_kinds": [u.kind for u, _ in units], "gold_ordinals": [u.ordinal for u, _ in units]}
            for q, units in scored
        ],
        comparisons=comparisons,
        scope=scope_desc,
        table_metrics=tuple(table),
        overlapping_units=overlapping,
    )


def _samples(session: sa.orm.Session, bench: str) -> dict[str, list[tuple[str, set[str]]]]:
    """engine → its sampled-crawl subsets of this benchmark (name, query sha256s), smallest first."""
    from crawler.plan import SAMPLE_PREFIX, parse_sample_name

    out: dict[str, list[tuple[int, str, set[str]]]] = {}
    for sub in session.execute(
        sa.select(Subset).where(Subset.name.like(SAMPLE_PREFIX + "%"), Subset.member_kind == "query_sha256")
    ).scalars():
        parsed = parse_sample_name(sub.name)
        if parsed is None or (sub.meta or {}).get("bench", bench) != bench:
            continue
        members = set(session.execute(sa.select(SubsetMember.member).where(SubsetMember.subset_id == sub.id)).scalars())
        out.setdefault(parsed[0], []).append((len(members), sub.name, members))
    return {eng: [(name, m) for _, name, m in sorted(v, key=lambda t: (t[0], t[1]))] for eng, v in out.items()}


def _sample_of(
    session: sa.orm.Session, ref: SystemRef, samples: dict[str, list[tuple[str, set[str]]]], scope_shas: Sequence[str]
) -> str | None:
    """The smallest sample of the row's engine holding every in-scope text it answered, when
    the row answered nothing outside its samples (a full crawl is not a sampled row)."""
    mine = samples.get(ref.engine)
    if not mine:
        return None
    a = Answer.__table__
    answered: set[str] = set()
    for chunk in _chunks(list(scope_shas)):
        answered.update(session.execute(
            sa.select(a.c.query_sha256).where(a.c.config_id == ref.config_id, a.c.epoch == ref.epoch,
                                              a.c.query_sha256.in_(chunk), ~a.c.superseded)
        ).scalars())
    if not answered:
        return None
    for name, members in mine:
        if answered <= members:
            return name
    return None


def _pairs(compare: Any) -> list[tuple[str, str]]:
    if not compare:
        return []
    if len(compare) == 2 and all(isinstance(x, str) for x in compare):
        return [(compare[0], compare[1])]
    out = []
    for pair in compare:
        if len(pair) != 2:
            raise InputError(f"--compare takes two system ids, got {list(pair)}")
        out.append((pair[0], pair[1]))
    return out


def _filter_styles(queries: list[QueryRec], styles: Sequence[str] | None, bench: str) -> list[QueryRec]:
    if not styles:
        return [q for q in queries if q.primary]
    if list(styles) == ["all"]:
        return queries
    known = sorted({q.style for q in queries})
    bad = [st for st in styles if st not in known]
    if bad:
        raise InputError(f"benchmark {bench} has no style {bad[0]!r} (styles: {', '.join(known)})")
    return [q for q in queries if q.style in set(styles)]


def _snapshot_names(
    session: sa.orm.Session, snapshots: dict[str, str], refs: list[SystemRef], gold: set[str]
) -> dict[str, set[str]]:
    out = {}
    for sid, spec in snapshots.items():
        hits = match_systems(sid, refs, sid=lambda r: r.id)
        if not hits:
            raise InputError(f"--snapshot {sid}=...: no such system (systems: {', '.join(sorted(r.id for r in refs))})")
        if len({r.config_id for r in hits}) > 1:
            raise ambiguous(f"--snapshot {sid}=...", sid, [r.id for r in hits])
        _, names = _names_of(session, spec, gold)
        for r in hits:
            out[r.id] = names
    return out


def _latencies(session: sa.orm.Session, ref: SystemRef, shas: Sequence[str]) -> list[float]:
    a = Answer.__table__
    out: list[float] = []
    for chunk in _chunks(list(shas)):
        out.extend(
            v for v in session.execute(
                sa.select(a.c.latency_ms).where(a.c.config_id == ref.config_id, a.c.epoch == ref.epoch, a.c.query_sha256.in_(chunk), ~a.c.superseded)
            ).scalars() if v is not None
        )
    return out


def _dropped_items(session: sa.orm.Session, ref: SystemRef, shas: Sequence[str]) -> int:
    """Items a tolerant parse dropped from this system's current answers (issue 11)."""
    a = Answer.__table__
    return sum(
        session.scalar(
            sa.select(sa.func.coalesce(sa.func.sum(a.c.dropped_items), 0)).where(
                a.c.config_id == ref.config_id, a.c.epoch == ref.epoch, a.c.query_sha256.in_(chunk), ~a.c.superseded)
        ) or 0
        for chunk in _chunks(list(shas))
    )


def _score_system(
    ref: SystemRef,
    scored: list[tuple[QueryRec, list[tuple[UnitRec, tuple[str, ...]]]]],
    stored: dict[int, tuple[dict[int, int | None], int]],
    boot: Bootstrap,
    profile: str,
    k_max: int,
    dropped: int,
    res_counts: dict[str, int],
    latencies: list[float],
    snapshot: set[str] | None,
    gold: set[str],
    present: set[str],
    task: str,
    recomputed: dict[int, tuple[list[int | None], list[int]]] | None = None,
    affected: set[int] | None = None,
    pool_size: int | None = None,
    sample: str | None = None,
) -> SystemScore:
    positions: list[list[int | None]] = []
    kinds: list[list[str]] = []
    n_ret: list[int] = []
    answered: list[bool] = []
    credits: list[list[int] | None] = []
    recomputed, affected = recomputed or {}, affected or set()
    for q, units in scored:
        entry = stored.get(q.id)
        nr = entry[1] if entry is not None else 0
        if q.id in affected:
            # Recomputed from the answer's hits (scoring.matching); n_retrieved is still stored.
            got = recomputed.get(q.id)
            answered.append(got is not None)
            positions.append(list(got[0]) if got is not None else [None] * len(units))
            credits.append(list(got[1]) if got is not None else [])
        else:
            answered.append(entry is not None)
            upos = entry[0] if entry is not None else {}
            positions.append([upos.get(u.id) for u, _ in units])
            credits.append(None)
        kinds.append([u.kind for u, _ in units])
        n_ret.append(nr)
    unanswered = answered.count(False)
    cap = ref.result_cap
    badges = []
    if unanswered:
        badges.append("incomplete")
    if cap is not None and cap < k_max:
        badges.append(f"k≤{cap}")
    if snapshot is not None:
        badges.append("different corpus")
    if ref.engine == "run":  # an imported run file (crawler.runs), not measured by us
        badges.append("imported")
    if sample is not None:
        badges.append(f"n={len(scored)} sampled")
    coverage = (len(snapshot) if snapshot is not None else len(present)) / len(gold) if gold else None
    lat = float(np.percentile(latencies, 95)) if latencies else None
    resolution = {"resolved": res_counts.get(RESOLVED, 0), "not_in_corpus": res_counts.get(NOT_IN_CORPUS, 0),
                  "dropped_items": res_counts.get("dropped_items", 0)}
    groups = {dim: [getattr(q, dim) for q, _ in scored] for dim in BREAKDOWN_DIMS}
    multi = any(len(u) > 1 for _, u in scored) or task != "theorem-search"

    if profile == "main":
        curves = per_query_curves(QueryMatrix.from_lists(positions, kinds, credits), k_max) if scored else None
        names = list(agg.TABLE_METRICS) + list(agg.MULTI_GOLD_EXTRA if multi else agg.SINGLE_GOLD_EXTRA)
        names = [nm for nm in dict.fromkeys(names) if agg.canonical(nm)[1] is None or agg.canonical(nm)[1] <= k_max]
        if curves is None:
            metrics = {nm: {"value": None, "ci": None} for nm in names}
            curve_json, pr_json, arrays = None, None, {}
            bd_values: dict[str, np.ndarray] = {}
        else:
            metrics = agg.summarize(curves, boot, names, cap)
            curve_json = agg.curve_block(curves, boot, cap, multi)
            pr_json = agg.pr_block(curves)
            arrays = {nm: agg.per_query(curves, nm) for nm in COMPARE_METRICS if agg.defined(nm, cap)}
            bd_values = {nm: agg.per_query(curves, nm) for nm in ("nDCG@10", "R@10") if 10 <= k_max}
        per_query = {
            q.qid: {"positions": ps, "rr": float(curves.rr[i]) if curves is not None else 0.0, "answered": answered[i],
                    **({"credited": credits[i]} if credits[i] is not None else {})}
            for i, ((q, _), ps) in enumerate(zip(scored, positions))
        }
    else:
        rows = [profile_query(profile, ps, nr, answered=ok, pool_size=pool_size)
                for ps, nr, ok in zip(positions, n_ret, answered)]
        keys = MAMUT_METRICS if profile == "mamut" else SKLEARN_METRICS
        arrays = {key: np.asarray([r[key] for r in rows], dtype=np.float64) for key in keys}
        metrics = {}
        for key, arr in arrays.items():
            lo, hi = boot.interval(arr) if len(arr) else (np.nan, np.nan)
            metrics[key] = {"value": float(arr.mean()) if len(arr) else None, "ci": [lo, hi] if len(arr) else None}
        curve_json, pr_json = None, None
        bd_values = {key: arrays[key] for key in ("nDCG", "AP")}
        per_query = {
            q.qid: {"positions": ps, "rr": reciprocal_rank(ps), "answered": answered[i], **rows[i]}
            for i, ((q, _), ps) in enumerate(zip(scored, positions))
        }
    breakdowns = {}
    for dim in BREAKDOWN_DIMS:
        if any(g is not None for g in groups[dim]):
            breakdowns[dim] = agg.breakdown(bd_values, groups[dim], cap) if bd_values else {}
    return SystemScore(
        ref=ref, n=len(scored), dropped=dropped, unanswered=unanswered, badges=badges, latency_p95_ms=lat,
        resolution=resolution, coverage=coverage, metrics=metrics, curves=curve_json, pr=pr_json,
        breakdowns=breakdowns, per_query=per_query, arrays=arrays, qids=[q.qid for q, _ in scored], sample=sample,
    )


