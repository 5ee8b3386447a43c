"""Runs from elsewhere: read a TREC or JSONL run file, write it as a system row.

The reusable pieces (``engines run import``, and bundles that embed runs):

- :func:`parse_run` (in :mod:`archive.run_file`) reads a file (TREC ``qid Q0 docno rank
  score tag``, plain or ``.gz``; or JSONL ``{"qid"|"query": ..., "ranked": [names]}``) into
  :class:`ParsedRun`: one :class:`RunList` per qid or query text, names in rank order.
- :func:`match_benchmark` maps those lists onto a benchmark's query texts (all or nothing,
  one line naming the first bad line), cut at ``k_max``.
- :func:`write_run` writes the configuration (engine ``run``) and its answers through the
  one write path (:func:`store.writes.add_answers`) in the caller's transaction.
- :func:`import_run` = the three in one transaction; :func:`drop_run` removes a row.

Names are stored as returned and resolved by the scorer exactly like crawled hits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

# The reading half lives in archive.run_file; its names stay importable from here.
from archive.run_file import (  # noqa: F401
    DOCNOS_FILE, FORMATS, MAX_LINE_BYTES, ParsedRun, RunList, file_sha256, parse_run, read_docnos,
)
from store.db import Database
from store.errors import InputError
from store.text import clean_text, escaped
from store.models import Answer, Benchmark, EngineConfig, Epoch, Hit, Position, Query, WorkLease
from store.writes import AnswerRow, add_answers

ENGINE = "run"  # the engine column of every imported configuration
ENDPOINT_VERSION = "import/1"
K_MAX = 200


@dataclass
class ImportResult:
    config_id: int
    label: str
    created: bool
    answers: int
    hits: int
    unanswered: int
    cut: int  # lists longer than k_max, cut
    parsed: ParsedRun
    source_changed: bool = False
    notes: list[str] = field(default_factory=list)
    depth: int | None = None  # the depth the row is scored to (None: k_max, complete)
    depth_given: bool = False  # --depth, rather than the longest list
    depth_changed: bool = False
    queries: int = 0  # benchmark queries answered (a text shared by two queries counts twice)
    queries_total: int = 0
    texts_total: int = 0
    not_in_corpus: list[tuple[str, int, int]] = field(default_factory=list)  # (corpus, names absent, distinct names)


# ------------------------------------------------------------------ the benchmark


def benchmark_queries(session: Session, bench: str) -> tuple[Benchmark, dict[str, tuple[str, str]], dict[str, str]]:
    """(benchmark, qid → (text, sha256), text → sha256)."""
    b = session.execute(sa.select(Benchmark).where(Benchmark.name == bench)).scalar_one_or_none()
    if b is None:
        names = ", ".join(session.execute(sa.select(Benchmark.name).order_by(Benchmark.name)).scalars()) or "none"
        raise InputError(f"no benchmark named {bench!r} (loaded: {names}); load it first with engines bench load")
    by_qid: dict[str, tuple[str, str]] = {}
    by_text: dict[str, str] = {}
    for qid, text, sha in session.execute(
        sa.select(Query.qid, Query.text, Query.query_sha256).where(Query.benchmark_id == b.id).order_by(Query.id)
    ):
        by_qid[qid] = (text, sha)
        by_text[text] = sha
    return b, by_qid, by_text


def match_benchmark(
    parsed: ParsedRun, by_qid: dict[str, tuple[str, str]], by_text: dict[str, str], k_max: int = K_MAX
) -> tuple[dict[str, tuple[str, list[str]]], int]:
    """sha256 → (text, names cut at k_max); and how many lists were cut. One text given two
    different lists (under two qids) is refused, naming the text."""
    out: dict[str, tuple[str, list[str]]] = {}
    line_of: dict[str, int] = {}
    cut = 0
    for rl in sorted(parsed.lists, key=lambda r: r.line):
        if rl.by == "qid":
            text, sha = by_qid[rl.key]
        else:
            text, sha = rl.key, by_text[rl.key]
        names = rl.names[:k_max]
        cut += len(rl.names) > k_max
        seen = out.get(sha)
        if seen is not None and seen[1] != names:
            raise InputError(
                f"{parsed.path}:{rl.line}: the query text {text[:80]!r} has two different lists "
                f"(lines {line_of[sha]} and {rl.line}); a text is answered once — give both qids the same list"
            )
        out[sha] = (text, names)
        line_of.setdefault(sha, rl.line)
    return out, cut


# ---------------------------------------------------------------------- writing


class RunHit:
    """A :class:`store.writes.HitRow` as :func:`store.writes.insert_hits` reads it, for
    imported names: only rank and name vary, so the rest are class attributes. Building a
    million frozen HitRows cost a third of a 10,000 × 100 import (perf/run_import.py)."""

    __slots__ = ("rank", "name")
    raw = None
    resolved_corpus_id = None
    declaration_id = None
    resolution = None

    def __init__(self, rank: int, name: str) -> None:
        self.rank = rank
        self.name = name



def reserved_names() -> set[str]:
    """Names an imported row may not take: every engine's, remote and local."""
    from engines.registry import ENGINES

    return {*ENGINES, "bm25", "dense", ENGINE}


def run_identity(*, bench: str, name: str, sha256: str, fmt: str, order: str = "rank") -> dict[str, Any]:
    """What makes an imported row: the file's bytes, its format (and ``--order score``, which
    reads other lists from the same bytes), its name and benchmark."""
    ident = {"engine": ENGINE, "endpoint_version": ENDPOINT_VERSION, "benchmark": bench, "name": name,
             "sha256": sha256, "format": fmt}
    if order != "rank":
        ident["order"] = order
    return ident


def check_name(session: Session, name: str) -> None:
    low = name.strip().lower()
    if clean_text(name) != name:  # a lone surrogate: bytes of the command line that are not UTF-8
        raise InputError(f"--name {escaped(name)}: not UTF-8 text; give the name in UTF-8")
    if not name.strip() or name != name.strip():
        raise InputError(f"--name {name!r}: give a non-empty name without surrounding spaces")
    if low in reserved_names():
        raise InputError(f"--name {name!r} is an engine's name; pick another name for the imported run")
    other = session.execute(
        sa.select(EngineConfig.engine).where(EngineConfig.label == name, EngineConfig.engine != ENGINE).limit(1)
    ).scalar_one_or_none()
    if other is not None:
        raise InputError(f"--name {name!r} is already the label of a {other} configuration; pick another name")


def write_run(
    session: Session,
    *,
    bench: str,
    name: str,
    sha256: str,
    fmt: str,
    source: str | None,
    lists: dict[str, tuple[str, list[str]]],
    k_max: int = K_MAX,
    result_cap: int | None | str = "longest",
    order: str = "rank",
    depth: int | None = None,
) -> tuple[EngineConfig, bool, int]:
    """The configuration and answers of one run (caller's transaction): (config, created,
    hits written). An existing configuration of the same identity is left as it is (its
    ``source`` updated if a new one is given, its depth if ``depth`` is given).
    ``result_cap``: "longest" = the longest list when shorter than ``k_max`` (the ``k≤N``
    badge), else the cap to record; ``depth`` (``--depth``) overrides both."""
    from engines.base import config_hash

    check_name(session, name)
    identity = run_identity(bench=bench, name=name, sha256=sha256, fmt=fmt, order=order)
    digest = config_hash(identity)
    cap = depth_cap(depth, k_max) if depth is not None else None
    found = session.execute(sa.select(EngineConfig).where(EngineConfig.config_hash == digest)).scalar_one_or_none()
    if found is not None:
        if source is not None and (found.params or {}).get("source") != source:
            found.params = {**(found.params or {}), "source": source}
        if depth is not None and found.result_cap != cap:
            found.result_cap = cap
            found.params = {**(found.params or {}), "depth": depth}
        return found, False, 0
    longest = max((len(n) for _, n in lists.values()), default=0)
    if depth is None:
        cap = (longest if 0 < longest < k_max else None) if result_cap == "longest" else result_cap
    extra = {"depth": depth} if depth is not None else {}
    cfg = EngineConfig(
        engine=ENGINE, endpoint_version=ENDPOINT_VERSION,
        params={**identity, "source": source, "lists": len(lists), "longest": longest, **extra},
        config_hash=digest, label=name, local=False, result_cap=cap,
    )
    session.add(cfg)
    try:
        session.flush()
    except sa.exc.IntegrityError:  # the unique config_hash: another process wrote this row since our check
        raise InputError(
            f"run {name!r} of this file is being imported by another engines process at the same time (or was "
            "just imported); run the command again once that one has finished: the same file again changes nothing"
        ) from None
    rows = [
        AnswerRow(config_id=cfg.id, query_text=text, query_sha256=sha,
                  hits=[RunHit(rank, nm) for rank, nm in enumerate(names, start=1)])
        for sha, (text, names) in lists.items()
    ]
    add_answers(session, rows)
    return cfg, True, sum(len(r.hits) for r in rows)


def depth_cap(depth: int, k_max: int = K_MAX) -> int | None:
    """The result cap of a row asked for ``depth`` names (None: complete to k_max)."""
    return depth if depth < k_max else None


def import_run(
    db: Database,
    path: str | Path,
    *,
    bench: str,
    name: str,
    fmt: str | None = None,
    source: str | None = None,
    docnos: str | Path | None = None,
    k_max: int = K_MAX,
    order: str = "rank",
    depth: int | None = None,
) -> ImportResult:
    """Parse, check against the benchmark and write, in one transaction (all or nothing).

    ``order``: "rank" (the rank column) or "score" (TREC: by score, trec_eval's ties).
    ``depth``: how many names a query was asked for (metrics at k > depth are undefined);
    None = the longest list (or the cap our own export names)."""
    if depth is not None and depth < 1:
        raise InputError(f"--depth {depth}: give the number of names each query was asked for (1 or more)")
    try:
        with db.session() as s, s.begin():
            check_name(s, name)
            b, by_qid, by_text = benchmark_queries(s, bench)
            parsed = parse_run(path, fmt, docnos, qids=set(by_qid), texts=set(by_text), bench=bench, order=order)
            lists, cut = match_benchmark(parsed, by_qid, by_text, k_max)
            _check_depth(parsed, depth)
            before = None
            old_cap = _stored_cap(s, b.name, name, parsed, order)
            cfg, created, hits = write_run(s, bench=b.name, name=name, sha256=parsed.sha256, fmt=parsed.format,
                                           source=source, lists=lists, k_max=k_max,
                                           result_cap=parsed.result_cap if parsed.cap_known else "longest",
                                           order=order, depth=depth)
            if not created:
                before = s.scalar(sa.select(sa.func.count()).select_from(Answer).where(Answer.config_id == cfg.id))
            res = ImportResult(
                config_id=cfg.id, label=cfg.label, created=created,
                answers=len(lists) if created else int(before or 0), hits=hits,
                unanswered=len(set(by_text.values()) - set(lists)), cut=cut, parsed=parsed,
                source_changed=not created and s.is_modified(cfg),
                depth=cfg.result_cap, depth_given=depth is not None,
                depth_changed=not created and depth is not None and old_cap != cfg.result_cap,
                queries=sum(1 for _, sha in by_qid.values() if sha in lists),
                queries_total=len(by_qid), texts_total=len(by_text),
                not_in_corpus=names_not_in_corpora(s, lists),
            )
    except sa.exc.OperationalError as exc:  # SQLite: another process held the write lock past the busy timeout
        if "database is locked" not in str(exc).lower():
            raise
        raise InputError(f"the database is busy: another engines process is writing to it (importing {name!r} too?); "
                         "nothing was written, run the command again once it has finished") from None
    if parsed.score_disagreements:
        res.notes.append(
            f"{parsed.score_disagreements} of {len(parsed.lists)} queries have scores that disagree with their ranks; "
            "the rank column's order is kept (trec_eval would re-sort by score: --order score)"
        )
    if cut:
        res.notes.append(f"{cut} lists longer than k_max = {k_max} were cut at {k_max}")
    return res


def _stored_cap(session: Session, bench: str, name: str, parsed: ParsedRun, order: str) -> int | None:
    """The result cap an earlier import of the same file stored (None: none, or no such row)."""
    from engines.base import config_hash

    digest = config_hash(run_identity(bench=bench, name=name, sha256=parsed.sha256, fmt=parsed.format, order=order))
    return session.scalar(sa.select(EngineConfig.result_cap).where(EngineConfig.config_hash == digest))


def _check_depth(parsed: ParsedRun, depth: int | None) -> None:
    """``--depth`` below the longest list: the run was asked for more than it says."""
    if depth is None:
        return
    longest = max(parsed.lists, key=lambda rl: len(rl.names), default=None)
    if longest is not None and len(longest.names) > depth:
        raise InputError(f"--depth {depth}: {parsed.path}:{longest.line} already lists {len(longest.names)} names "
                         f"for {longest.key[:60]!r}; give --depth {len(longest.names)} or more (the depth each "
                         "query was asked for)")


def names_not_in_corpora(session: Session, lists: dict[str, tuple[str, list[str]]]) -> list[tuple[str, int, int]]:
    """Per loaded corpus: (NAME@REV, distinct returned names it does not hold, distinct names),
    names normalised as the scorer resolves them."""
    from store.models import Corpus, Declaration
    from store.names import normalize_name

    names = sorted({n for _, ns in lists.values() for n in (normalize_name(x) for x in ns) if n})
    out = []
    for c in session.execute(sa.select(Corpus).order_by(Corpus.id)).scalars():
        held: set[str] = set()
        for i in range(0, len(names), 900):
            held.update(session.execute(sa.select(Declaration.full_name).where(
                Declaration.corpus_id == c.id, Declaration.full_name.in_(names[i:i + 900]))).scalars())
        out.append((f"{c.name}@{c.revision}", len(names) - len(held), len(names)))
    return out


@dataclass
class DropResult:
    configs: int
    answers: int
    hits: int


def drop_run(db: Database, name: str) -> DropResult:
    """Remove every imported configuration labelled ``name`` with its answers, hits and
    positions, in one transaction."""
    with db.session() as s, s.begin():
        cids = list(s.execute(
            sa.select(EngineConfig.id).where(EngineConfig.label == name, EngineConfig.engine == ENGINE)
        ).scalars())
        if not cids:
            other = s.execute(sa.select(EngineConfig.engine).where(EngineConfig.label == name).limit(1)).scalar_one_or_none()
            if other is not None:
                raise InputError(f"{name!r} is a {other} row, not an imported run; engines run drop removes imported runs only")
            names = ", ".join(s.execute(
                sa.select(EngineConfig.label).where(EngineConfig.engine == ENGINE).distinct().order_by(EngineConfig.label)
            ).scalars()) or "none"
            raise InputError(f"no imported run named {name!r} (imported runs: {names})")
        answers = sa.select(Answer.id).where(Answer.config_id.in_(cids))
        quiet = {"synchronize_session": False}
        hits = s.execute(sa.delete(Hit).where(Hit.answer_id.in_(answers)).execution_options(**quiet)).rowcount or 0
        n_ans = s.execute(sa.delete(Answer).where(Answer.config_id.in_(cids)).execution_options(**quiet)).rowcount or 0
        for model in (Position, Epoch, WorkLease):
            s.execute(sa.delete(model).where(model.config_id.in_(cids)).execution_options(**quiet))
        s.execute(sa.delete(EngineConfig).where(EngineConfig.id.in_(cids)).execution_options(**quiet))
    return DropResult(len(cids), n_ans, hits)
