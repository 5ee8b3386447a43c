"""Benchmark loading: MathlibQR, MathlibMPR, the shared171 subset file and id lists.

Formats are recognised by content, files are verified by sha256 against
``benchmarks.KNOWN_FILES``, and each load is one transaction.

- MathlibQR: one query per non-empty style field, id ``<target id>_<style field>``,
  one gold unit (the target's full_name), style/kind/difficulty kept.
- MathlibMPR: one query per item and style; ``NL_main_result`` is the primary
  (default-scored) style, ``formal_statement`` a second style; one gold unit per
  premise group with its kind (original/alternative).
- MathlibQR_shared171.json: named gold-name subsets (shared171, missing_in_*).
- MathlibMPR_Prop_ids.txt: a named target-id subset (mathlibmpr-prop).
- Benchmarks of other projects (``--name`` required): a BEIR directory
  (``queries.jsonl`` + ``qrels/<split>.tsv``, optional ``corpus.jsonl``) or a JSONL file
  of ``{"qid", "query", "gold" | "gold_groups", ...}`` lines (:func:`load_external`).

The format readers (file content → query rows) are :mod:`store.bench_formats`; this
module recognises, verifies and stores.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks import KNOWN_FILES, SHIPPED_FILES, shipped_path
from store.bench_formats import (  # noqa: F401 - the readers' names, importable from here as before
    DEFAULT_STYLE,
    MAX_LINE_BYTES,
    MPR_STYLES,
    QR_STYLES,
    beir_queries,
    jsonl_queries,
    mpr_queries,
    qr_queries,
    read_jsonl,
)
from store.db import Database
from store.errors import InputError
from store.sniff import refuse_other_kinds
from store.text import clean_json, clean_text
from store.models import Benchmark, GoldName, GoldUnit, Query, Subset, SubsetMember

SUBSET_LISTS = {
    "shared_declarations": "shared171",
    "missing_in_4160": "missing_in_4160",
    "missing_in_4280": "missing_in_4280",
    "missing_in_LE": "missing_in_LE",
}


@dataclass
class BenchLoadResult:
    kind: str  # "benchmark" | "subset"
    names: list[str]
    sha256: str
    created: bool
    modified: bool
    counts: dict[str, int] = field(default_factory=dict)
    # External benchmarks: (corpus "name@revision", gold names it holds, distinct gold names).
    corpus_gold: list[tuple[str, int, int]] | None = None


def query_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _detect(data: Any, is_text: bool) -> str:
    if is_text:
        return "id-list"
    if isinstance(data, dict) and "shared_declarations" in data:
        return "shared171"
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        if all("premise_group" in x for x in data):
            return "mathlibmpr"
        if all("full_name" in x and any(s in x for s in QR_STYLES) for x in data):
            return "mathlibqr"
    return "unknown"


def _read(path: Path) -> tuple[bytes, Any, bool]:
    if not path.exists():
        raise InputError(f"benchmark file {path} does not exist")
    if path.is_dir():
        raise InputError(f"benchmark source {path} is a directory; pass a .json or .txt file")
    raw = path.read_bytes()
    if path.suffix == ".txt":
        try:
            return raw, clean_text(raw.decode("utf-8")), True
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text ({exc})") from None
    try:
        return raw, clean_json(json.loads(raw)), False
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deep to read; is this a benchmark file?") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 JSON ({exc})") from None


def load_benchmark_file(
    db: Database, src: str | Path, *, name: str | None = None, allow_modified: bool = False,
    split: str = "test", task: str | None = None,
) -> BenchLoadResult:
    """Load one benchmark or subset file; the same file again is a no-op."""
    path = Path(src).expanduser()
    if path.is_dir() or path.suffix == ".jsonl":
        return load_external(db, path, name=name, split=split, task=task)
    if task is not None:
        raise InputError(f"--task applies to BEIR directories and JSONL benchmarks, not to {path.name}")
    refuse_other_kinds(path, ("benchmark",), "a benchmark")
    raw, data, is_text = _read(path)
    digest = hashlib.sha256(raw).hexdigest()
    fmt = _detect(data, is_text)
    if fmt == "unknown":
        raise InputError(
            f"{path}: not a recognised benchmark file (expected MathlibQR.json, MathlibMPR.json, "
            "MathlibQR_shared171.json or an id list .txt)"
        )
    known = KNOWN_FILES.get(digest)
    modified = known is None or known[1] != fmt
    if fmt == "id-list" and known is None and name is None:
        raise InputError(f"{path}: an id list needs --name (it is not one of the shipped files)")
    canonical = known[0] if known else {"mathlibqr": "mathlibqr", "mathlibmpr": "mathlibmpr", "shared171": "shared171"}.get(fmt, "")
    if modified and not allow_modified:
        raise InputError(
            f"{path}: sha256 {digest[:12]}… does not match the published {canonical or fmt} file; "
            "pass --allow-modified to load it anyway (its hash is recorded)"
        )
    if fmt in ("mathlibqr", "mathlibmpr"):
        bench_name = name or (canonical if not modified else f"{canonical}-modified-{digest[:8]}")
        queries = qr_queries(data, str(path)) if fmt == "mathlibqr" else mpr_queries(data, str(path))
        task = "theorem-search" if fmt == "mathlibqr" else "premise-retrieval"
        return _store_benchmark(db, bench_name, task, path, digest, modified, queries)
    if fmt == "shared171":
        lists: dict[str, list[str]] = {}
        for key, subset_name in SUBSET_LISTS.items():
            value = data.get(key, [])
            if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
                raise InputError(f"{path}: {key!r} must be a list of names")
            prefix = f"{name}:" if name else ("" if not modified else f"modified-{digest[:8]}:")
            lists[prefix + subset_name] = value
        return _store_subsets(db, lists, "gold_name", path, digest, modified, {"note": data.get("note")})
    ids = [ln.strip() for ln in data.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not ids:
        raise InputError(f"{path}: no ids in the file (blank and #-comment lines are skipped)")
    subset_name = name or canonical
    return _store_subsets(db, {subset_name: ids}, "target_id", path, digest, modified, None)


def _store_benchmark(
    db: Database, name: str, task: str, path: Path, digest: str, modified: bool, queries: list[dict[str, Any]],
    extra_meta: dict[str, Any] | None = None,
) -> BenchLoadResult:
    counts = {
        "targets": len({q["target_id"] for q in queries}),
        "queries": len(queries),
        "primary_queries": sum(1 for q in queries if q["primary"]),
    }
    with db.session() as s, s.begin():
        existing = s.execute(sa.select(Benchmark).where(Benchmark.name == name)).scalar_one_or_none()
        if existing is not None:
            if existing.sha256 == digest:
                return BenchLoadResult("benchmark", [name], digest, False, existing.modified, counts)
            raise InputError(
                f"benchmark {name!r} is already loaded from a different file (sha256 {existing.sha256[:12]}…); "
                "pass --name to load this one under another name"
            )
        bench = Benchmark(
            name=name,
            task=task,
            source_file=path.name,
            sha256=digest,
            modified=modified,
            meta={**counts, **(extra_meta or {})},
        )
        s.add(bench)
        s.flush()
        insert_queries(s, bench.id, queries)
    counts["gold_units"] = sum(len(q["units"]) for q in queries if q["primary"])
    return BenchLoadResult("benchmark", [name], digest, True, modified, counts)


BATCH = 5000


def insert_queries(s: Any, bench_id: int, queries: list[dict[str, Any]]) -> None:
    """The queries with their gold units and names, in bulk (linear in rows: the ORM's
    unit of work took 80 s and 3.2 GB for 200,000 queries, and was quadratic in the
    gold names of one query). Ids are read back by (qid) and (query, ordinal)."""
    qt, ut, nt = Query.__table__, GoldUnit.__table__, GoldName.__table__
    for i in range(0, len(queries), BATCH):
        s.execute(qt.insert(), [
            {"benchmark_id": bench_id, "qid": q["qid"], "target_id": q["target_id"], "text": q["text"],
             "query_sha256": query_sha256(q["text"]), "style": q["style"], "primary": q["primary"],
             "kind": q["kind"], "difficulty": q["difficulty"], "meta": q["meta"]}
            for q in queries[i:i + BATCH]
        ])
    qid_id = dict(s.execute(sa.select(qt.c.qid, qt.c.id).where(qt.c.benchmark_id == bench_id)).all())
    units = [{"query_id": qid_id[q["qid"]], "ordinal": o, "kind": kind}
             for q in queries for o, (kind, _) in enumerate(q["units"])]
    for i in range(0, len(units), BATCH):
        s.execute(ut.insert(), units[i:i + BATCH])
    del units
    unit_id = {(qi, o): ui for qi, o, ui in s.execute(
        sa.select(ut.c.query_id, ut.c.ordinal, ut.c.id).join(qt, qt.c.id == ut.c.query_id).where(qt.c.benchmark_id == bench_id)
    )}
    batch: list[dict[str, Any]] = []
    for q in queries:
        qi = qid_id[q["qid"]]
        for o, (_, names) in enumerate(q["units"]):
            ui = unit_id[(qi, o)]
            batch.extend({"gold_unit_id": ui, "name": n} for n in names)
            if len(batch) >= BATCH:
                s.execute(nt.insert(), batch)
                batch = []
    if batch:
        s.execute(nt.insert(), batch)


def _store_subsets(
    db: Database,
    lists: dict[str, list[str]],
    member_kind: str,
    path: Path,
    digest: str,
    modified: bool,
    meta: dict[str, Any] | None,
) -> BenchLoadResult:
    counts = {n: len(set(v)) for n, v in lists.items()}
    created = False
    with db.session() as s, s.begin():
        for subset_name, members in lists.items():
            existing = s.execute(sa.select(Subset).where(Subset.name == subset_name)).scalar_one_or_none()
            if existing is not None:
                if existing.sha256 == digest:
                    continue
                raise InputError(
                    f"subset {subset_name!r} is already loaded from a different file (sha256 {existing.sha256[:12]}…); "
                    "pass --name to load this one under another name"
                )
            subset = Subset(
                name=subset_name,
                member_kind=member_kind,
                source_file=path.name,
                sha256=digest,
                modified=modified,
                meta=meta,
            )
            s.add(subset)
            s.flush()
            s.add_all(SubsetMember(subset_id=subset.id, member=m) for m in dict.fromkeys(members))
            created = True
    return BenchLoadResult("subset", list(lists), digest, created, modified, counts)


def load_shipped(db: Database) -> list[BenchLoadResult]:
    """Load every benchmark file shipped in ``benchmarks/`` (idempotent)."""
    return [load_benchmark_file(db, shipped_path(f)) for f in SHIPPED_FILES]


def find_benchmark(db: Database, name: str) -> Benchmark:
    with db.session() as s:
        bench = s.execute(sa.select(Benchmark).where(Benchmark.name == name)).scalar_one_or_none()
        if bench is None:
            names = ", ".join(s.execute(sa.select(Benchmark.name).order_by(Benchmark.name)).scalars()) or "none"
            raise InputError(
                f"no benchmark named {name!r} in the database (loaded: {names}); "
                "load it with `engines bench load SRC` or `engines bench load --shipped`"
            )
        return bench


def subset_members(db: Database, name: str) -> set[str]:
    with db.session() as s:
        subset = s.execute(sa.select(Subset).where(Subset.name == name)).scalar_one_or_none()
        if subset is None:
            raise InputError(f"no subset named {name!r}; load it with `engines bench load --shipped`")
        return set(
            s.execute(sa.select(SubsetMember.member).where(SubsetMember.subset_id == subset.id)).scalars()
        )


# ------------------------------------------------------------ other projects' benchmarks

TASKS = ("theorem-search", "premise-retrieval")


def load_external(
    db: Database, src: str | Path, *, name: str | None, split: str = "test", task: str | None = None
) -> BenchLoadResult:
    """Load a BEIR directory or a JSONL benchmark (recognised by content) under ``name``.

    One transaction; the same files again under the same name are a no-op. The sha256
    is that of the file, or for a BEIR directory that of the files read (names and hashes).
    """
    path = Path(src).expanduser()
    if not path.exists():
        raise InputError(f"benchmark source {path} does not exist")
    if path.is_file():
        refuse_other_kinds(path, ("benchmark",), "a benchmark")
    if not name and path.is_dir():
        raise InputError(f"benchmark source {path} is a directory: a BEIR directory (queries.jsonl, qrels/) "
                         "loads with --name NAME; otherwise pass a .json or .txt benchmark file")
    if not name:
        raise InputError(f"{path}: a benchmark of another project needs --name (e.g. --name my-bench)")
    if task is not None and task not in TASKS:
        raise InputError(f"--task {task!r}: expected {' or '.join(TASKS)}")
    if path.is_dir():
        queries, files, meta = beir_queries(path, split)
        h = hashlib.sha256()
        for f in files:
            h.update(f"{f.relative_to(path).as_posix()}\0{hashlib.sha256(f.read_bytes()).hexdigest()}\n".encode())
        digest = h.hexdigest()
    else:
        queries = jsonl_queries(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        meta = {"format": "jsonl"}
    inferred = "theorem-search" if all(len(q["units"]) == 1 for q in queries) else "premise-retrieval"
    gold = {n for q in queries for _, names in q["units"] for n in names}
    counts = corpus_gold_counts(db, gold)
    if counts and not any(held for _, held, _ in counts):
        raise InputError(_resolves_nothing(path, meta, counts, len(gold)))
    res = _store_benchmark(db, name, task or inferred, path, digest, False, queries, meta)
    res.corpus_gold = counts
    return res


def _resolves_nothing(path: Path, meta: dict[str, Any], counts: list[tuple[str, int, int]], n_gold: int) -> str:
    """The one line for a benchmark no loaded corpus holds a gold name of (nothing is loaded)."""
    corpora = ", ".join(c for c, _, _ in counts)
    if meta.get("format") == "beir" and not meta.get("ids_mapped_through_titles"):
        fix = ("its qrels' corpus-ids are not declaration names: put a corpus.jsonl beside queries.jsonl whose "
               "titles give each judged id's declaration name, or load the corpus it was judged against first")
    else:
        fix = "its gold names are not declaration names of these corpora: load the corpus it was made for first"
    return f"{path}: none of its {n_gold} gold names is in any loaded corpus ({corpora}); {fix}; nothing was loaded"


def corpus_gold_counts(db: Database, names: set[str]) -> list[tuple[str, int, int]]:
    """For each loaded corpus: how many of these gold names it holds (exact full_name)."""
    from store.models import Corpus, Declaration

    out = []
    wanted = sorted(names)
    with db.session() as s:
        for c in s.execute(sa.select(Corpus).order_by(Corpus.id)).scalars():
            held: set[str] = set()
            for i in range(0, len(wanted), 900):
                chunk = wanted[i:i + 900]
                held.update(s.execute(
                    sa.select(Declaration.full_name).where(Declaration.corpus_id == c.id, Declaration.full_name.in_(chunk))
                ).scalars())
            out.append((f"{c.name}@{c.revision}", len(held), len(wanted)))
    return out


def subset_from_qids(db: Database, name: str, bench: str, src: str | Path) -> BenchLoadResult:
    """``engines bench subset NAME --bench B --qids FILE``: the named subset of B's queries
    listed in FILE (one qid a line, ``#`` comments; ``-`` = standard input), one transaction.
    An unknown qid is refused at its line; the same list again is a no-op."""
    import sys

    if str(src) == "-":
        raw, where = sys.stdin.buffer.read(), "<stdin>"
    else:
        path = Path(src).expanduser()
        if not path.is_file():
            raise InputError(f"--qids {path} does not exist or is not a file")
        raw, where = path.read_bytes(), str(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{where}: not UTF-8 text; expected one qid a line") from None
    b = find_benchmark(db, bench)
    with db.session() as s:
        known = set(s.execute(sa.select(Query.qid).where(Query.benchmark_id == b.id)).scalars())
    qids: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        qid = line.strip()
        if not qid or qid.startswith("#"):
            continue
        if qid not in known:
            raise InputError(f"{where}:{lineno}: qid {qid[:60]!r} is not in benchmark {b.name}; "
                             "fix the line or pass the right --bench")
        qids.append(qid)
    if not qids:
        raise InputError(f"{where}: no qids in the file (one qid a line)")
    digest = hashlib.sha256(raw).hexdigest()
    res = _store_subsets(db, {name: qids}, "qid", Path(where), digest, False, {"bench": b.name})
    return res
