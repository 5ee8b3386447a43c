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
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks import KNOWN_FILES, SHIPPED_FILES, shipped_path
from store.db import Database
from store.errors import InputError
from store.models import Benchmark, GoldName, GoldUnit, Query, Subset, SubsetMember

QR_STYLES = ("q1a_lean", "q1b_latex", "q1c_natural", "q2_slogan", "q3_nickname", "q4_special_case")
MPR_STYLES = ("NL_main_result", "formal_statement")  # the first is the primary style
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
            return raw, raw.decode("utf-8"), True
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text ({exc})") from None
    try:
        return raw, json.loads(raw), False
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 JSON ({exc})") from None


def _str_field(obj: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise InputError(f"{where}: field {key!r} must be a non-empty string, got {json.dumps(value)[:60]}")
    return value


def _qr_queries(data: list[dict[str, Any]], display: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, item in enumerate(data):
        where = f"{display}: item {i}"
        tid = _str_field(item, "id", where)
        full_name = _str_field(item, "full_name", f"{where} ({tid})").strip()
        if tid in seen:
            raise InputError(f"{where}: duplicate target id {tid!r}")
        seen.add(tid)
        for style in QR_STYLES:
            text = _str_field(item, style, f"{where} ({tid})", required=False).strip()
            if not text:
                continue  # an empty field means the style is absent
            out.append(
                {
                    "qid": f"{tid}_{style}",
                    "target_id": tid,
                    "text": text,
                    "style": style,
                    "primary": True,
                    "kind": item.get("kind"),
                    "difficulty": item.get("difficulty"),
                    "meta": {"full_name": full_name, "file": item.get("file")},
                    "units": [("single", [full_name])],
                }
            )
    return out


def _mpr_queries(data: list[dict[str, Any]], display: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, item in enumerate(data):
        where = f"{display}: item {i}"
        tid = _str_field(item, "id", where)
        if tid in seen:
            raise InputError(f"{where}: duplicate item id {tid!r}")
        seen.add(tid)
        groups = item.get("premise_group")
        if not isinstance(groups, list) or not groups:
            raise InputError(f"{where} ({tid}): 'premise_group' must be a non-empty list")
        units: list[tuple[str, list[str]]] = []
        for j, g in enumerate(groups):
            gw = f"{where} ({tid}) premise_group[{j}]"
            if not isinstance(g, dict) or g.get("kind") not in ("original", "alternative"):
                raise InputError(f"{gw}: expected {{'kind': 'original'|'alternative', 'docs': [...]}}")
            docs = g.get("docs")
            if not isinstance(docs, list) or not docs or not all(isinstance(d, str) and d.strip() for d in docs):
                raise InputError(f"{gw}: 'docs' must be a non-empty list of names")
            units.append((g["kind"], [d.strip() for d in docs]))
        meta = {"pr": item.get("pr"), "formal_main_result": item.get("formal_main_result")}
        for style in MPR_STYLES:
            text = _str_field(item, style, f"{where} ({tid})").strip()
            out.append(
                {
                    "qid": f"{tid}_{style}",
                    "target_id": tid,
                    "text": text,
                    "style": style,
                    "primary": style == MPR_STYLES[0],
                    "kind": None,
                    "difficulty": None,
                    "meta": meta,
                    "units": units,
                }
            )
    return out


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
        queries = _qr_queries(data, str(path)) if fmt == "mathlibqr" else _mpr_queries(data, str(path))
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
        for q in queries:
            query = Query(
                qid=q["qid"],
                target_id=q["target_id"],
                text=q["text"],
                query_sha256=query_sha256(q["text"]),
                style=q["style"],
                primary=q["primary"],
                kind=q["kind"],
                difficulty=q["difficulty"],
                meta=q["meta"],
            )
            for ordinal, (kind, names) in enumerate(q["units"]):
                unit = GoldUnit(ordinal=ordinal, kind=kind)
                unit.names = [GoldName(name=n) for n in names]
                query.gold_units.append(unit)
            bench.queries.append(query)
    counts["gold_units"] = sum(len(q["units"]) for q in queries if q["primary"])
    return BenchLoadResult("benchmark", [name], digest, True, modified, counts)


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
DEFAULT_STYLE = "default"  # the style of a query whose source names none
MAX_LINE_BYTES = 1 << 20  # one JSONL line; a longer one is refused, not parsed


def read_jsonl(path: Path, what: str):
    """(line number, object) of each non-blank line of a JSONL file; one clear line on bad input."""
    if not path.is_file():
        raise InputError(f"{what} {path} does not exist or is not a file")
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(f"{path}:{lineno}: line longer than {MAX_LINE_BYTES:,} bytes; refusing it")
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                why = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
                raise InputError(f"{path}:{lineno}: not a JSON line ({why}); fix or remove the line") from None
            if not isinstance(obj, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object per line, got {type(obj).__name__}")
            yield lineno, obj


def _opt_str(obj: dict[str, Any], key: str, where: str, limit: int) -> str | None:
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = str(v)
    if not isinstance(v, str) or len(v) > limit:
        raise InputError(f"{where}: {key!r} must be a string of at most {limit} characters")
    return v.strip() or None


def _query_row(qid: str, text: str, units: list[list[str]], fields: dict[str, Any], where: str) -> dict[str, Any]:
    if not units:
        raise InputError(f"{where}: query {qid!r} has no gold; every query needs at least one gold name")
    if len(qid) > 200:
        raise InputError(f"{where}: query id {qid[:40]!r}… is longer than 200 characters")
    return {
        "qid": qid,
        "target_id": (_opt_str(fields, "target", where, 100) or qid)[:100],
        "text": text,
        "style": _opt_str(fields, "style", where, 50) or DEFAULT_STYLE,
        "primary": True,  # every style of another project's benchmark is scored by default
        "kind": _opt_str(fields, "kind", where, 50),
        "difficulty": _opt_str(fields, "difficulty", where, 20),
        "meta": None,
        "units": [("single", names) for names in units],
    }


def _names(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(n, str) and n.strip() for n in value):
        raise InputError(f"{where}: expected a list of declaration names (non-empty strings)")
    return list(dict.fromkeys(n.strip() for n in value))


def _jsonl_queries(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for lineno, obj in read_jsonl(path, "benchmark file"):
        where = f"{path}:{lineno}"
        qid, text = obj.get("qid"), obj.get("query")
        if isinstance(qid, int) and not isinstance(qid, bool):
            qid = str(qid)
        if not isinstance(qid, str) or not qid.strip():
            raise InputError(f"{where}: 'qid' must be a non-empty string")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{where}: 'query' must be a non-empty string (query {qid!r})")
        qid = qid.strip()
        if qid in seen:
            raise InputError(f"{where}: duplicate qid {qid!r} (first on line {seen[qid]}); qids must be unique")
        seen[qid] = lineno
        if "gold" in obj and "gold_groups" in obj:
            raise InputError(f"{where}: give 'gold' or 'gold_groups', not both (query {qid!r})")
        if "gold_groups" in obj:
            groups = obj["gold_groups"]
            if not isinstance(groups, list):
                raise InputError(f"{where}: 'gold_groups' must be a list of lists of names (query {qid!r})")
            units = [_names(g, f"{where} gold_groups[{j}]") for j, g in enumerate(groups)]
            if any(not u for u in units):
                raise InputError(f"{where}: an empty gold group (query {qid!r}); every group needs a name")
        else:
            units = [[n] for n in _names(obj.get("gold", []), f"{where} 'gold'")]
        out.append(_query_row(qid, text.strip(), units, obj, where))
    if not out:
        raise InputError(f"{path}: no queries in the file")
    return out


def _beir_queries(root: Path, split: str) -> tuple[list[dict[str, Any]], list[Path], dict[str, Any]]:
    queries_path, qrels_path, corpus_path = root / "queries.jsonl", root / "qrels" / f"{split}.tsv", root / "corpus.jsonl"
    if not queries_path.is_file():
        raise InputError(f"{root}: not a BEIR directory (no queries.jsonl); pass a BEIR directory or a JSONL benchmark file")
    if not qrels_path.is_file():
        have = sorted(p.stem for p in (root / "qrels").glob("*.tsv")) if (root / "qrels").is_dir() else []
        raise InputError(f"{root}: no qrels/{split}.tsv (splits here: {', '.join(have) or 'none'}); pass --split")
    texts: dict[str, tuple[str, dict[str, Any], int]] = {}
    for lineno, obj in read_jsonl(queries_path, "BEIR queries file"):
        where = f"{queries_path}:{lineno}"
        qid, text = obj.get("_id"), obj.get("text")
        if isinstance(qid, int) and not isinstance(qid, bool):
            qid = str(qid)
        if not isinstance(qid, str) or not qid.strip() or not isinstance(text, str) or not text.strip():
            raise InputError(f"{where}: each query needs a non-empty '_id' and 'text'")
        if qid.strip() in texts:
            raise InputError(f"{where}: duplicate qid {qid.strip()!r} (first on line {texts[qid.strip()][2]}); qids must be unique")
        meta = obj.get("metadata") or {}
        if not isinstance(meta, dict):
            raise InputError(f"{where}: 'metadata' must be an object")
        texts[qid.strip()] = (text.strip(), meta, lineno)
    gold: dict[str, list[str]] = {}
    order: list[str] = []
    with open(qrels_path, encoding="utf-8", errors="strict") as fh:
        try:
            lines = fh.read().splitlines()
        except UnicodeDecodeError as exc:
            raise InputError(f"{qrels_path}: not UTF-8 text ({exc.reason})") from None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        cols = line.split("\t") if "\t" in line else line.split()
        if lineno == 1 and [c.strip() for c in cols[:3]] == ["query-id", "corpus-id", "score"]:
            continue
        where = f"{qrels_path}:{lineno}"
        if len(cols) != 3:
            raise InputError(f"{where}: expected 'query-id<TAB>corpus-id<TAB>score', got {len(cols)} columns")
        qid, cid, score = (c.strip() for c in cols)
        try:
            value = float(score)
        except ValueError:
            raise InputError(f"{where}: score {score!r} is not a number") from None
        if qid not in texts:
            raise InputError(f"{where}: query-id {qid!r} is not in queries.jsonl")
        if qid not in gold:
            gold[qid] = []
            order.append(qid)
        if value > 0 and cid not in gold[qid]:
            gold[qid].append(cid)
    files = [queries_path, qrels_path]
    mapped = False
    if corpus_path.is_file():
        wanted = {c for ids in gold.values() for c in ids}
        titles: dict[str, str] = {}
        for lineno, obj in read_jsonl(corpus_path, "BEIR corpus file"):
            did = obj.get("_id")
            did = str(did) if isinstance(did, int) else did
            if did in wanted and isinstance(obj.get("title"), str) and obj["title"].strip():
                titles[did] = obj["title"].strip()
        # The ids are names unless the corpus gives them other titles.
        if any(titles.get(c, c) != c for c in wanted):
            missing = sorted(wanted - set(titles))
            if missing:
                raise InputError(f"{corpus_path}: corpus-id {missing[0]!r} of the qrels has no title to map it to a name")
            gold = {q: list(dict.fromkeys(titles[c] for c in ids)) for q, ids in gold.items()}
            files.append(corpus_path)
            mapped = True
    out = []
    for qid in order:
        text, meta, lineno = texts[qid]
        out.append(_query_row(qid, text, [[n] for n in gold[qid]], meta, f"{queries_path}:{lineno}"))
    if not out:
        raise InputError(f"{qrels_path}: no judged queries in split {split!r}")
    return out, files, {"format": "beir", "split": split, "ids_mapped_through_titles": mapped}


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
    if not name and path.is_dir():
        raise InputError(f"benchmark source {path} is a directory: a BEIR directory (queries.jsonl, qrels/) "
                         "loads with --name NAME; otherwise pass a .json or .txt benchmark file")
    if not name:
        raise InputError(f"{path}: a benchmark of another project needs --name (e.g. --name my-bench)")
    if task is not None and task not in TASKS:
        raise InputError(f"--task {task!r}: expected {' or '.join(TASKS)}")
    if path.is_dir():
        queries, files, meta = _beir_queries(path, split)
        h = hashlib.sha256()
        for f in files:
            h.update(f"{f.relative_to(path).as_posix()}\0{hashlib.sha256(f.read_bytes()).hexdigest()}\n".encode())
        digest = h.hexdigest()
    else:
        queries = _jsonl_queries(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        meta = {"format": "jsonl"}
    inferred = "theorem-search" if all(len(q["units"]) == 1 for q in queries) else "premise-retrieval"
    res = _store_benchmark(db, name, task or inferred, path, digest, False, queries, meta)
    gold = {n for q in queries for _, names in q["units"] for n in names}
    res.corpus_gold = corpus_gold_counts(db, gold)
    return res


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
