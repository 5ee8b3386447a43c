"""Runs from elsewhere: read a TREC or JSONL run file, write it as a system row.

The reusable pieces (``engines run import``, and bundles that embed runs):

- :func:`parse_run` reads a file (TREC ``qid Q0 docno rank score tag``, plain or ``.gz``;
  or JSONL ``{"qid"|"query": ..., "ranked": [names]}``) into :class:`ParsedRun`: one
  :class:`RunList` per qid or query text, names in rank order, as returned.
- :func:`match_benchmark` maps those lists onto a benchmark's query texts (all or nothing,
  one line naming the first bad line), cut at ``k_max``.
- :func:`write_run` writes the configuration (engine ``run``) and its answers through the
  one write path (:func:`store.writes.add_answers`) in the caller's transaction.
- :func:`import_run` = the three in one transaction; :func:`drop_run` removes a row.

Names are stored as returned and resolved by the scorer exactly like crawled hits.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import sqlalchemy as sa
from sqlalchemy.orm import Session

from store.db import Database
from store.errors import InputError
from store.models import Answer, Benchmark, EngineConfig, Epoch, Hit, Position, Query, WorkLease
from store.writes import AnswerRow, add_answers

ENGINE = "run"  # the engine column of every imported configuration
ENDPOINT_VERSION = "import/1"
FORMATS = ("trec", "jsonl")
K_MAX = 200
MAX_LINE_BYTES = 1 << 20
DOCNOS_FILE = "docnos.tsv"  # written by scoring.export beside its run files


@dataclass
class RunList:
    key: str  # the qid, or the query text (``by == "query"``)
    by: str  # "qid" | "query"
    line: int  # the first line of the list in the file
    names: list[str]


@dataclass
class ParsedRun:
    path: Path
    sha256: str
    format: str
    lists: list[RunList]
    lines: int
    # Queries whose scores disagree with the rank column (TREC): we keep the rank order.
    score_disagreements: int = 0
    docnos: str | None = None  # the mapping file the DOCNOs were read through
    # Our own export names each run's result cap in docnos.tsv; else the longest list gives it.
    cap_known: bool = False
    result_cap: int | None = None


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


# ------------------------------------------------------------------------- reading


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when they are gzip data."""
    if not path.is_file():
        raise InputError(f"run file {path} does not exist or is not a file")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise InputError(f"{path}: broken gzip data ({exc}); re-compress or pass the plain file") from None
    return raw


def _open_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    for lineno, line in enumerate(io.BytesIO(_read_bytes(path)), start=1):
        if len(line) > MAX_LINE_BYTES:
            raise InputError(f"{path}:{lineno}: line longer than {MAX_LINE_BYTES:,} bytes; refusing it")
        yield lineno, line


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_docnos(path: Path) -> tuple[dict[str, str], dict[str, int | None]]:
    """DOCNO → name from a ``docnos.tsv`` of our TREC export (placeholders map to themselves),
    and run tag → result cap from its ``# result_cap`` lines."""
    if not path.is_file():
        raise InputError(f"--docnos {path} does not exist or is not a file")
    out: dict[str, str] = {}
    caps: dict[str, int | None] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("# result_cap\t"):
            parts = line.split("\t")
            if len(parts) == 3 and (parts[2] == "none" or parts[2].isdigit()):
                caps[parts[1]] = None if parts[2] == "none" else int(parts[2])
            continue
        if not line.strip() or line.startswith("#"):
            continue
        doc, sep, name = line.partition("\t")
        if not sep:
            raise InputError(f"{path}:{lineno}: expected 'DOCNO<TAB>name'; is this a docnos.tsv of engines score --trec?")
        # "!dup!<rank>" (a repeat, or a gold row the matching did not credit) stays a
        # placeholder: it never resolves and keeps its rank. "!u<j>!…" (a credited row whose
        # unit's names all went to earlier units) maps to that unit's first name.
        out[doc] = doc if doc.startswith("!dup!") or not name else name
    return out, caps


def _detect(path: Path) -> str:
    for _, line in _open_lines(path):
        if line.strip():
            return "jsonl" if line.lstrip().startswith(b"{") else "trec"
    raise InputError(f"{path}: the run file is empty")


def parse_run(
    path: str | Path,
    fmt: str | None = None,
    docnos: str | Path | None = None,
    *,
    qids: set[str] | None = None,
    texts: set[str] | None = None,
    bench: str | None = None,
) -> ParsedRun:
    """Read a run file into ranked lists (all or nothing; errors name the first bad line).

    ``fmt``: "trec" | "jsonl" | None (by content). A TREC file's order is its rank column
    (renumbered 1..n; a rank repeated within a query is refused). DOCNOs are names; when a
    ``docnos.tsv`` is given (or lies beside the file) they are read back through it.
    ``qids`` / ``texts``: the benchmark's, to refuse unknown keys at their line.
    """
    path = Path(path).expanduser()
    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: expected trec or jsonl")
    fmt = fmt or _detect(path)
    mapping_path: Path | None = None
    if fmt == "trec":
        if docnos is not None:
            mapping_path = Path(docnos).expanduser()
        elif (path.parent / DOCNOS_FILE).is_file():
            mapping_path = path.parent / DOCNOS_FILE
    elif docnos is not None:
        raise InputError("--docnos applies to TREC runs only")
    mapping, caps = read_docnos(mapping_path) if mapping_path is not None else (None, {})
    tags: set[str] = set()

    def check(key: str, by: str, lineno: int) -> None:
        known = qids if by == "qid" else texts
        if known is not None and key not in known:
            other = " (is this a run for another benchmark?)" if bench else ""
            what = f"qid {key!r}" if by == "qid" else f"query text {key[:60]!r}"
            raise InputError(f"{path}:{lineno}: {what} is not in benchmark {bench}{other}; "
                             "remove the line or import into the right --bench")

    lines = 0
    if fmt == "jsonl":
        lists: dict[tuple[str, str], RunList] = {}
        for lineno, raw in _open_lines(path):
            lines = lineno
            if not raw.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(raw)
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                why = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
                raise InputError(f"{where}: not a JSON line ({why}); expected {{\"qid\": ..., \"ranked\": [names]}}") from None
            if not isinstance(obj, dict) or "ranked" not in obj or ("qid" in obj) == ("query" in obj):
                raise InputError(f"{where}: expected {{\"qid\" or \"query\": ..., \"ranked\": [names]}} (one of qid/query)")
            by = "qid" if "qid" in obj else "query"
            key = obj[by]
            if by == "qid" and isinstance(key, int) and not isinstance(key, bool):
                key = str(key)
            if not isinstance(key, str) or not key.strip():
                raise InputError(f"{where}: {by!r} must be a non-empty string")
            key = key.strip()
            ranked = obj["ranked"]
            if not isinstance(ranked, list):
                raise InputError(f"{where}: 'ranked' must be a list of names")
            names: list[str] = []
            for i, n in enumerate(ranked):
                if isinstance(n, list) and n and all(isinstance(p, str) for p in n):
                    n = ".".join(n)  # components, stored dotted as crawled list names are
                if not isinstance(n, str) or not n.strip():
                    raise InputError(f"{where}: 'ranked'[{i}] is not a name (a non-empty string)")
                names.append(n)
            if (by, key) in lists:
                raise InputError(f"{where}: {by} {key[:60]!r} already has a list (line {lists[(by, key)].line}); "
                                 "give each query one line")
            check(key, by, lineno)
            lists[(by, key)] = RunList(key, by, lineno, names)
        if not lists:
            raise InputError(f"{path}: no ranked lists in the file")
        return ParsedRun(path, file_sha256(path), fmt, list(lists.values()), lines,
                         docnos=None)

    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = raw[:exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{lineno}: not UTF-8 text") from None
    rows = text.split("\n")
    if len(raw) > MAX_LINE_BYTES and max(map(len, rows)) > MAX_LINE_BYTES:
        lineno = next(i for i, r in enumerate(rows, start=1) if len(r) > MAX_LINE_BYTES)
        raise InputError(f"{path}:{lineno}: line longer than {MAX_LINE_BYTES:,} bytes; refusing it")
    lines = len(rows)
    # The hot loop (perf/run_import.py): one split per line, checks that cost a compare.
    per: dict[str, list[tuple[int, int, float, str]]] = {}
    tags: set[str] = set()
    last_tag = None
    get = mapping.get if mapping is not None else None
    for lineno, line in enumerate(rows, start=1):
        cols = line.split()
        if len(cols) != 6:
            if not cols:
                continue
            raise InputError(f"{path}:{lineno}: expected 'qid Q0 docno rank score tag' (6 columns), got {len(cols)}")
        qid, _, doc, rank_s, score_s, tag = cols
        if tag != last_tag:
            tags.add(tag)
            last_tag = tag
        try:
            rank = int(rank_s)
            score = float(score_s)
        except ValueError:
            raise InputError(f"{path}:{lineno}: rank {rank_s!r} must be an integer and score {score_s!r} a number") from None
        ranked = per.get(qid)
        if ranked is None:
            check(qid, "qid", lineno)
            ranked = per[qid] = []
        if get is not None:
            name = get(doc)
            if name is None:
                raise InputError(f"{path}:{lineno}: DOCNO {doc!r} is not in {mapping_path}; "
                                 "pass the docnos.tsv written with this run")
        else:
            name = doc
        ranked.append((rank, lineno, score, name))
    if not per:
        raise InputError(f"{path}: no run lines in the file")
    out: list[RunList] = []
    disagree = 0
    repeated: list[tuple[int, int, str]] = []  # (line, rank, qid) of each rank given twice
    for qid, ranked in per.items():
        first_line = ranked[0][1]
        ranked.sort()
        ranks = [r[0] for r in ranked]
        if len(set(ranks)) != len(ranks):
            repeated.extend((b[1], b[0], qid) for a, b in zip(ranked, ranked[1:]) if a[0] == b[0])
            continue
        scores = [r[2] for r in ranked]
        if scores != sorted(scores, reverse=True):
            disagree += 1
        out.append(RunList(qid, "qid", first_line, [r[3] for r in ranked]))
    if repeated:
        lineno, rank, qid = min(repeated)
        raise InputError(f"{path}:{lineno}: rank {rank} repeated in query {qid!r}; each rank once per query")
    parsed = ParsedRun(path, file_sha256(path), fmt, out, lines, disagree,
                       str(mapping_path) if mapping_path is not None else None)
    if len(tags) == 1 and next(iter(tags)) in caps:
        parsed.cap_known, parsed.result_cap = True, caps[next(iter(tags))]
    return parsed


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


def run_identity(*, bench: str, name: str, sha256: str, fmt: str) -> dict[str, Any]:
    """What makes an imported row: the file's bytes, its format, its name and benchmark."""
    return {"engine": ENGINE, "endpoint_version": ENDPOINT_VERSION, "benchmark": bench, "name": name,
            "sha256": sha256, "format": fmt}


def check_name(session: Session, name: str) -> None:
    low = name.strip().lower()
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
) -> tuple[EngineConfig, bool, int]:
    """The configuration and answers of one run (caller's transaction): (config, created,
    hits written). An existing configuration of the same identity is left as it is (its
    ``source`` updated if a new one is given). ``result_cap``: "longest" = the longest
    list when shorter than ``k_max`` (the ``k≤N`` badge), else the cap to record."""
    from engines.base import config_hash

    check_name(session, name)
    identity = run_identity(bench=bench, name=name, sha256=sha256, fmt=fmt)
    digest = config_hash(identity)
    found = session.execute(sa.select(EngineConfig).where(EngineConfig.config_hash == digest)).scalar_one_or_none()
    if found is not None:
        if source is not None and (found.params or {}).get("source") != source:
            found.params = {**(found.params or {}), "source": source}
        return found, False, 0
    longest = max((len(n) for _, n in lists.values()), default=0)
    cfg = EngineConfig(
        engine=ENGINE, endpoint_version=ENDPOINT_VERSION,
        params={**identity, "source": source, "lists": len(lists), "longest": longest},
        config_hash=digest, label=name, local=False,
        result_cap=(longest if 0 < longest < k_max else None) if result_cap == "longest" else result_cap,
    )
    session.add(cfg)
    session.flush()
    rows = [
        AnswerRow(config_id=cfg.id, query_text=text, query_sha256=sha,
                  hits=[RunHit(rank, nm) for rank, nm in enumerate(names, start=1)])
        for sha, (text, names) in lists.items()
    ]
    add_answers(session, rows)
    return cfg, True, sum(len(r.hits) for r in rows)


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
) -> ImportResult:
    """Parse, check against the benchmark and write, in one transaction (all or nothing)."""
    with db.session() as s, s.begin():
        check_name(s, name)
        b, by_qid, by_text = benchmark_queries(s, bench)
        parsed = parse_run(path, fmt, docnos, qids=set(by_qid), texts=set(by_text), bench=bench)
        lists, cut = match_benchmark(parsed, by_qid, by_text, k_max)
        before = None
        cfg, created, hits = write_run(s, bench=b.name, name=name, sha256=parsed.sha256, fmt=parsed.format,
                                       source=source, lists=lists, k_max=k_max,
                                       result_cap=parsed.result_cap if parsed.cap_known else "longest")
        if not created:
            before = s.scalar(sa.select(sa.func.count()).select_from(Answer).where(Answer.config_id == cfg.id))
        res = ImportResult(
            config_id=cfg.id, label=cfg.label, created=created,
            answers=len(lists) if created else int(before or 0), hits=hits,
            unanswered=len(set(by_text.values()) - set(lists)), cut=cut, parsed=parsed,
            source_changed=not created and s.is_modified(cfg),
        )
    if parsed.score_disagreements:
        res.notes.append(
            f"{parsed.score_disagreements} of {len(parsed.lists)} queries have scores that disagree with their ranks; "
            "the rank column's order is kept (trec_eval would re-sort by score)"
        )
    if cut:
        res.notes.append(f"{cut} lists longer than k_max = {k_max} were cut at {k_max}")
    return res


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
