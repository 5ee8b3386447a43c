"""Benchmark format readers: a file's content → query rows, one clear line on bad input.

Each reader returns the queries as dicts (``qid``, ``target_id``, ``text``, ``style``,
``primary``, ``kind``, ``difficulty``, ``meta``, ``units``) for :mod:`store.benchmarks`
to store; nothing here touches the database.

- MathlibQR: one query per non-empty style field, id ``<target id>_<style field>``,
  one gold unit (the target's full_name), style/kind/difficulty kept.
- MathlibMPR: one query per item and style; ``NL_main_result`` is the primary
  (default-scored) style, ``formal_statement`` a second style; one gold unit per
  premise group with its kind (original/alternative).
- Benchmarks of other projects: a BEIR directory (``queries.jsonl`` +
  ``qrels/<split>.tsv``, optional ``corpus.jsonl``) or a JSONL file of
  ``{"qid", "query", "gold" | "gold_groups", ...}`` lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from store.errors import InputError
from store.text import clean_json, clean_text

QR_STYLES = ("q1a_lean", "q1b_latex", "q1c_natural", "q2_slogan", "q3_nickname", "q4_special_case")
MPR_STYLES = ("NL_main_result", "formal_statement")  # the first is the primary style


def _str_field(obj: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise InputError(f"{where}: field {key!r} must be a non-empty string, got {json.dumps(value)[:60]}")
    return value


def qr_queries(data: list[dict[str, Any]], display: str) -> list[dict[str, Any]]:
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


def mpr_queries(data: list[dict[str, Any]], display: str) -> list[dict[str, Any]]:
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


# ------------------------------------------------------------ other projects' benchmarks

DEFAULT_STYLE = "default"  # the style of a query whose source names none
MAX_LINE_BYTES = 1 << 20  # one JSONL line; a longer one is refused, not parsed


def read_jsonl(path: Path, what: str):
    """(line number, object) of each non-blank line of a JSONL file; one clear line on bad input."""
    if not path.is_file():
        raise InputError(f"{what} {path} does not exist or is not a file")
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark (Windows editors)
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(f"{path}:{lineno}: line longer than {MAX_LINE_BYTES:,} bytes; refusing it")
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
                if b"\\u" in raw:  # NUL and surrogates only come from \u escapes
                    obj = clean_json(obj)
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


def jsonl_queries(path: Path) -> list[dict[str, Any]]:
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


def _inside(root: Path, path: Path) -> None:
    """Refuses a file of a BEIR directory that is a symlink out of the directory: a loaded
    folder is read from its own files only (a shared folder must not read /etc/passwd)."""
    if not (path.is_symlink() or path.exists()):
        return
    base, real = root.resolve(), path.resolve()
    if real != base and base not in real.parents:
        raise InputError(f"{path}: a symlink out of the folder {root} (to {real}); bench load reads only the "
                         "folder's own files: copy the file into the folder")


def beir_queries(root: Path, split: str) -> tuple[list[dict[str, Any]], list[Path], dict[str, Any]]:
    queries_path, qrels_path, corpus_path = root / "queries.jsonl", root / "qrels" / f"{split}.tsv", root / "corpus.jsonl"
    for p in (queries_path, root / "qrels", qrels_path, corpus_path):
        _inside(root, p)
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
    gold: dict[str, dict[str, None]] = {}  # qid → its judged ids, in order (a dict: linear in ids)
    order: list[str] = []
    with open(qrels_path, encoding="utf-8-sig", errors="strict") as fh:
        try:
            lines = clean_text(fh.read()).splitlines()
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
            gold[qid] = {}
            order.append(qid)
        if value > 0:
            gold[qid][cid] = None
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
