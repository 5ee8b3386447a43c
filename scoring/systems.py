"""Which systems a scoring run scores (METHODOLOGY.md; :func:`scoring.results.score`).

A *system* is (engine configuration, epoch). Its ``id`` is the configuration's label,
suffixed with ``@e<epoch>`` when the configuration has several epochs, and with the
config hash prefix when two configurations share a label. :func:`match_systems` is the one
way a system is named everywhere; :func:`select` picks the scored rows of a scope (``--system``,
``--epoch``, ``--snapshot``, ``--compare``, sampled rows), and the per-row reads
(latencies, dropped items) live here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import sqlalchemy as sa

from engines.registry import ENGINES
from scoring.resolve import chunked
from scoring.scope import Scope, names_of
from store.errors import InputError
from store.models import Answer, EngineConfig

# How people write an engine's name (the README, papers): matched like engine names. Each
# remote engine declares its own (engines.registry); local rows are named here.
DISPLAY_NAMES = {**{name: cls.display_name for name, cls in ENGINES.items()}, "bm25": "BM25"}


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


# --------------------------------------------------------------------- selection


@dataclass
class Selection:
    """The scored rows of a scope: refs in scoring order, each row's snapshot names and
    sample (None: a full crawl), and the ``--compare`` pairs as scored ids."""

    refs: list[SystemRef]
    snap_names: dict[str, set[str]]
    sample_of: dict[str, str | None]
    pairs: list[tuple[str, str]]


def select(
    session: sa.orm.Session,
    scope: Scope,
    systems: Sequence[str] | None,
    pairs: list[tuple[str, str]],
    epochs: str | None,
    snapshots: dict[str, str] | None,
) -> Selection:
    """The systems to score in ``scope``: those with answers, narrowed by ``systems``, then
    by ``epochs``; the errors a bad name gets, in the order ``score`` has always raised them."""
    found = _find_systems(session, scope.shas, bench=scope.bench)
    refs = _select_systems(found, systems)
    # A name that picks one epoch (an ``@eN`` id) keeps that epoch whatever --epoch says.
    named = {h[0].id for w in [*(systems or ()), *(x for pair in pairs for x in pair)]
             for h in [match_systems(w, found, sid=lambda r: r.id)] if len(h) == 1}
    refs = _pick_epochs(session, refs, epochs, named=named)
    snap_names = _snapshot_names(session, snapshots or {}, refs, scope.gold)
    sample_of = {ref.id: _sample_of(session, ref, scope.samples, scope.shas) for ref in refs}
    pairs = [(_one_system("--compare", a_, refs), _one_system("--compare", b_, refs)) for a_, b_ in pairs]
    return Selection(refs=refs, snap_names=snap_names, sample_of=sample_of, pairs=pairs)


def depth(engine: str, params: dict[str, Any], result_cap: int | None, local: bool = False) -> int | None:
    """How deep a configuration's lists go (METHODOLOGY.md "Aggregation", result caps): what it asked for
    (a crawled configuration's ``num_results``), capped by what the service returns at most
    (``result_cap``); an imported or local row's stored cap. None: complete to k_max."""
    asked = params.get("num_results") if engine != "run" and not local else None
    if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
        return asked if result_cap is None else min(asked, result_cap)
    return result_cap


def _find_systems(session: sa.orm.Session, shas: Sequence[str], bench: str | None = None) -> list[SystemRef]:
    """The (configuration, epoch) pairs with current answers to these texts; an imported
    run only on the benchmark it was imported for (texts two benchmarks share are not enough)."""
    a, c = Answer.__table__, EngineConfig.__table__
    pairs: set[tuple[int, int]] = set()
    for chunk in chunked(list(shas)):
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
    if bench is not None:  # a run file answers the benchmark it was imported for, only
        other = {cid for cid, row in configs.items()
                 if row.engine == "run" and (row.params or {}).get("benchmark") not in (None, bench)}
        pairs = {p for p in pairs if p[0] not in other}
        if not pairs:
            return []
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
                local=bool(cfg.local), licence=cfg.licence,
                result_cap=depth(cfg.engine, cfg.params or {}, cfg.result_cap, bool(cfg.local)),
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
    for chunk in chunked(list(scope_shas)):
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
        _, names = names_of(session, spec, gold)
        for r in hits:
            out[r.id] = names
    return out


def answer_latencies(session: sa.orm.Session, ref: SystemRef, shas: Sequence[str]) -> list[float]:
    """The latencies (ms) of this system's current answers to these texts."""
    a = Answer.__table__
    out: list[float] = []
    for chunk in chunked(list(shas)):
        out.extend(
            v for v in session.execute(
                sa.select(a.c.latency_ms).where(a.c.config_id == ref.config_id, a.c.epoch == ref.epoch, a.c.query_sha256.in_(chunk), ~a.c.superseded)
            ).scalars() if v is not None
        )
    return out


def dropped_item_count(session: sa.orm.Session, ref: SystemRef, shas: Sequence[str]) -> int:
    """Items a tolerant parse dropped from this system's current answers (issue 11)."""
    a = Answer.__table__
    return sum(
        session.scalar(
            sa.select(sa.func.coalesce(sa.func.sum(a.c.dropped_items), 0)).where(
                a.c.config_id == ref.config_id, a.c.epoch == ref.epoch, a.c.query_sha256.in_(chunk), ~a.c.superseded)
        ) or 0
        for chunk in chunked(list(shas))
    )
