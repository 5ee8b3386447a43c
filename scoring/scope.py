"""The scope of a scoring run (METHODOLOGY.md): which queries and gold units are in play.

The benchmark's queries (primary styles by default, ``--style``), narrowed by ``--slice``
(an engine's sampled queries), ``--subset`` (gold names, target ids or query texts) or
``--shared-with`` (the gold names present in every named corpus), then resolved against the
scoring corpus: a query whose gold units are all absent from the corpus is dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import sqlalchemy as sa

from scoring.matching import has_overlap
from scoring.positions import QueryRec, UnitRec, load_queries, resolvable_units
from scoring.resolve import names_in_corpus
from store.corpus import pick_corpus
from store.errors import InputError
from store.models import Subset, SubsetMember

UNCOVERED = ("drop", "zero")
Scored = list[tuple[QueryRec, list[tuple[UnitRec, tuple[str, ...]]]]]


@dataclass
class Scope:
    """The queries a run scores and how they were chosen.

    ``in_scope``: queries and units before the corpus is consulted; ``scored``: the queries
    with at least one resolvable unit, each unit with its names in the corpus; ``affected``:
    (query id, sha, unit names) of the queries whose positions cannot come from the stored
    table (a shared name, or ``--shared-with`` narrowed a unit). ``desc`` is the JSON
    ``scope`` block; ``subset`` the document's subset label."""

    queries: list[QueryRec]
    gold: set[str]
    present: set[str]
    samples: dict[str, list[tuple[str, set[str]]]]
    subset: str | None
    desc: dict[str, Any]
    in_scope: list[tuple[QueryRec, list[UnitRec]]] = field(default_factory=list)
    scored: Scored = field(default_factory=list)
    affected: list[tuple[int, str, list[tuple[str, ...]]]] = field(default_factory=list)
    overlapping: int = 0
    dropped: int = 0
    bench: str | None = None  # the benchmark's name (an imported run answers its own only)
    uncovered: set[int] = field(default_factory=set)  # --uncovered zero: kept, scored 0

    @cached_property
    def shas(self) -> list[str]:
        """The in-scope query texts' sha256s, sorted (read once the scope is built)."""
        return sorted({q.sha for q, _ in self.in_scope})


@dataclass
class _Filters:
    allowed: set[str] | None = None  # gold names a unit must have one of
    targets: set[str] | None = None  # target ids
    shas_in: set[str] | None = None  # query texts
    qids: set[str] | None = None  # query ids (engines bench subset --qids)


def build_scope(
    session: sa.orm.Session,
    bench: Any,
    corp: Any,
    *,
    bench_name: str,
    styles: Sequence[str] | None,
    subset: str | None,
    shared_with: Sequence[str] | None,
    slice: str | None,
    uncovered: str = "drop",
    answered: tuple[str, set[str]] | None = None,
) -> Scope:
    """The scope of ``score()`` on ``bench`` against ``corp`` (see the module docstring);
    ``bench_name`` is the benchmark as the caller named it (error messages).
    ``uncovered``: "drop" (a query with no gold in the corpus leaves n) or "zero" (it stays,
    scored 0). ``answered``: (system id, its answered texts) of ``--answered-by``."""
    if uncovered not in UNCOVERED:
        raise InputError(f"--uncovered {uncovered!r}: expected drop (the methodology's) or zero")
    all_queries = load_queries(session, bench.id)
    queries = _filter_styles(all_queries, styles, bench.name)
    gold = {nm for q in queries for u in q.units for nm in u.names}
    present = names_in_corpus(session, corp.id, gold)
    desc: dict[str, Any] = {"styles": sorted({q.style for q in queries}),
                            "default_styles": {q.id for q in queries} == {q.id for q in all_queries if q.primary}}
    scope = Scope(queries=queries, gold=gold, present=present, samples=_samples(session, bench.name),
                  subset=subset, desc=desc, bench=bench.name)
    f = _Filters()
    if slice:
        f.shas_in = _slice_members(scope, slice, bench_name)
    if answered is not None:
        f.shas_in = answered[1] if f.shas_in is None else f.shas_in & answered[1]
        scope.desc["answered_by"] = {"system": answered[0], "texts": len(answered[1])}
    if subset:
        _subset_members(session, scope, subset, f)
    if shared_with:
        f.allowed = _shared_names(session, scope, corp, shared_with)
    for q in queries:
        if f.targets is not None and q.target_id not in f.targets:
            continue
        if f.shas_in is not None and q.sha not in f.shas_in:
            continue
        if f.qids is not None and q.qid not in f.qids:
            continue
        units = [u for u in q.units if f.allowed is None or any(nm in f.allowed for nm in u.names)]
        if units:
            scope.in_scope.append((q, units))
    _resolve(scope, f.allowed if shared_with else None, keep_uncovered=uncovered == "zero")
    return scope


def _slice_members(scope: Scope, slice: str, bench_name: str) -> set[str]:
    """``--slice engine-subset:E``: the texts of engine E's largest sample."""
    kind, _, engine = slice.partition(":")
    if kind != "engine-subset" or not engine:
        raise InputError(f"--slice {slice!r}: expected engine-subset:ENGINE (e.g. engine-subset:leansearch)")
    mine = scope.samples.get(engine.lower())
    if not mine:
        known = ", ".join(sorted(scope.samples)) or "none"
        raise InputError(f"--slice {slice}: engine {engine!r} has no sampled crawl (sampled engines: {known}); "
                         f"crawl one with `engines crawl {engine} --bench {bench_name} --sample N`")
    name, members = mine[-1]
    scope.desc["slice"] = {"name": slice, "subset": name, "members": len(members)}
    return set(members)


def _subset_members(session: sa.orm.Session, scope: Scope, subset: str, f: _Filters) -> None:
    """``--subset``: target ids, query texts (a sampled crawl's) or gold names, into ``f``."""
    sub = session.execute(sa.select(Subset).where(Subset.name == subset)).scalar_one_or_none()
    if sub is None:
        names = ", ".join(session.execute(sa.select(Subset.name).order_by(Subset.name)).scalars()) or "none"
        raise InputError(f"no subset named {subset!r} (loaded: {names}); load it with `engines bench load --shipped`")
    members = set(session.execute(sa.select(SubsetMember.member).where(SubsetMember.subset_id == sub.id)).scalars())
    if sub.member_kind == "target_id":
        f.targets = members
    elif sub.member_kind == "qid":  # engines bench subset --qids
        if (sub.meta or {}).get("bench") not in (None, scope.bench):
            raise InputError(f"subset {subset!r} lists queries of benchmark {sub.meta['bench']}, not {scope.bench}; "
                             f"score it with --bench {sub.meta['bench']}")
        f.qids = members
    elif sub.member_kind == "query_sha256":  # a sampled crawl's texts
        f.shas_in = members if f.shas_in is None else f.shas_in & members
    else:
        f.allowed = members
    scope.desc["subset"] = {"name": subset, "member_kind": sub.member_kind, "members": len(members)}


def _shared_names(session: sa.orm.Session, scope: Scope, corp: Any, shared_with: Sequence[str]) -> set[str]:
    """``--shared-with``: the gold names present in the scoring corpus and every named one."""
    allowed = set(scope.present)
    sources = [f"{corp.name}@{corp.revision}"]
    for spec in shared_with:
        label, names = names_of(session, spec, scope.gold)
        allowed &= names
        sources.append(label)
    scope.desc["shared_with"] = sources
    scope.desc["shared_gold_names"] = len(allowed)
    scope.subset = "shared(" + ", ".join(sources) + ")"
    return allowed


def _resolve(scope: Scope, shared: set[str] | None, keep_uncovered: bool = False) -> None:
    """Each in-scope query's units resolved against the corpus: scored, or dropped.

    ``shared`` (``--shared-with``): narrow each unit to its shared names.
    ``keep_uncovered`` (``--uncovered zero``): a query with no unit in the corpus is scored
    anyway, with all its units and nothing that can hit them (0 on every metric)."""
    dropped_qids: list[str] = []
    uncovered_qids: list[str] = []
    unresolved_units = 0
    # Queries whose positions cannot come from the stored table: a shared name makes
    # precision-type figures need the matching, and --shared-with narrows a group to
    # its shared names (stored positions were computed with all of them).
    for q, units in scope.in_scope:
        keep = [(u, names) for u, names in resolvable_units(q, scope.present) if u in units]
        narrowed = False
        if shared is not None:
            kept = [(u, tuple(nm for nm in names if nm in shared)) for u, names in keep]
            narrowed = any(len(a[1]) != len(b[1]) for a, b in zip(kept, keep))
            keep = [(u, names) for u, names in kept if names]
        unresolved_units += len(units) - len(keep)
        if keep:
            scope.scored.append((q, keep))
            overlap = has_overlap([names for _, names in keep])
            scope.overlapping += overlap
            if overlap or narrowed:
                scope.affected.append((q.id, q.sha, [names for _, names in keep]))
        elif keep_uncovered:
            scope.scored.append((q, [(u, tuple(u.names)) for u in units]))
            scope.uncovered.add(q.id)
            uncovered_qids.append(q.qid)
        else:
            dropped_qids.append(q.qid)
    scope.dropped = len(dropped_qids)
    scope.desc.update({"in_scope": len(scope.in_scope), "dropped_qids": dropped_qids,
                       "unresolved_units": unresolved_units, "overlapping_units": scope.overlapping})
    if keep_uncovered:  # the methodology's default (drop) adds nothing to the document
        scope.desc.update({"uncovered": "zero", "uncovered_qids": uncovered_qids})


# ------------------------------------------------------------------ names and samples


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


def names_of(session: sa.orm.Session, spec: str, gold: set[str]) -> tuple[str, set[str]]:
    """Gold names present in a named corpus of the database, or in a name-list file."""
    path = Path(spec).expanduser()
    if path.suffix in (".txt", ".json", ".lst") or path.exists():
        return path.name, read_name_list(path) & gold
    corpus = pick_corpus(session, spec)
    return f"{corpus.name}@{corpus.revision}", names_in_corpus(session, corpus.id, gold)


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
