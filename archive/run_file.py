"""Run files from elsewhere, read: a TREC, JSONL or ranx run file into ranked lists (:func:`parse_run`).

A TREC ``qid Q0 docno rank score tag`` file (plain or ``.gz``), its order the rank column
(``order="score"``: the score column, descending, ties as trec_eval breaks them), its
DOCNOs read back through our export's ``docnos.tsv`` when there is one; JSONL
``{"qid"|"query": ..., "ranked": [names]}`` or ``{..., "scores": {name: score}}``; or a
ranx JSON run ``{qid: {name: score}}``. A UTF-8 byte order mark is skipped; ``-`` reads
standard input. All or nothing: an error names the first bad line. :mod:`archive.runs`
matches the lists to a benchmark and writes them.

Bounded like bundles: a file (a small .gz inflating to gigabytes too) is read a block at
a time, a line longer than ``MAX_LINE_BYTES`` is refused before it is read whole, at most
``MAX_RUN_ROWS`` ranked names are kept, and a ranx run (one JSON document) is at most
``MAX_RANX_BYTES``. NUL and lone surrogates in names are stored as U+FFFD, as crawled hits.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from store.errors import InputError
from store.sniff import refuse_other_kinds
from store.stdin import spool_stdin
from store.text import clean_json, clean_text

FORMATS = ("trec", "jsonl", "ranx")
ORDERS = ("rank", "score")
BOM = b"\xef\xbb\xbf"
STDIN = "-"
MAX_LINE_BYTES = 1 << 20
READ_BYTES = 1 << 20
NL = b"\n"  # (an f-string may not hold a backslash)
# Ranked names read from one file, in memory until the whole file is checked (about 250 bytes
# each): the bound that keeps a small .gz of endless rows under the memory bound.
MAX_RUN_ROWS = 2_000_000
# A ranx run is one JSON document, read whole: its (inflated) size is bounded.
MAX_RANX_BYTES = 64 << 20
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
    order: str = "rank"  # "score": lists sorted by score (trec_eval's order)


# ------------------------------------------------------------------------- reading


def _open_raw(path: Path) -> BinaryIO:
    """The file for reading bytes, gunzipped as it is read when it is gzip data."""
    if not path.is_file():
        raise InputError(f"run file {path} does not exist or is not a file")
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")


def _blocks(path: Path, shown: Path | None = None) -> Iterator[tuple[int, bytes]]:
    """(number of its first line, block of whole lines without the last newline), read
    ``READ_BYTES`` at a time (a UTF-8 byte order mark skipped): never more than a block and
    one unfinished line in memory, and a line longer than ``MAX_LINE_BYTES`` is refused
    before it is read whole (a small .gz can inflate to one endless line)."""
    shown = shown or path
    lineno, rest = 1, b""
    with _open_raw(path) as fh:
        first = True
        while True:
            try:
                block = fh.read(READ_BYTES)
            except (OSError, EOFError, zlib.error) as exc:
                raise InputError(f"{shown}: broken gzip data ({exc}); re-compress or pass the plain file") from None
            if not block:
                break
            if first:
                block, first = block.removeprefix(BOM), False
            data = rest + block if rest else block
            cut = data.rfind(NL)
            if cut < 0:
                rest = data
            else:
                whole, rest = data[:cut], data[cut + 1:]
                if len(whole) > MAX_LINE_BYTES:
                    _check_lengths(shown, lineno, whole)
                yield lineno, whole
                lineno += whole.count(NL) + 1
            if len(rest) > MAX_LINE_BYTES:
                _too_long(shown, lineno)
    if rest:
        yield lineno, rest


def _too_long(path: Path, lineno: int) -> None:
    raise InputError(f"{path}:{lineno}: line longer than {MAX_LINE_BYTES:,} bytes; refusing it")


def _check_lengths(path: Path, lineno: int, whole: bytes) -> None:
    for i, line in enumerate(whole.split(NL)):
        if len(line) > MAX_LINE_BYTES:
            _too_long(path, lineno + i)


def _lines(path: Path, shown: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its newline), each at most ``MAX_LINE_BYTES``."""
    for first, whole in _blocks(path, shown):
        yield from enumerate(whole.split(NL), start=first)


def _too_many(path: Path, lineno: int) -> None:
    raise InputError(
        f"{path}:{lineno}: more than {MAX_RUN_ROWS:,} ranked names in the run file; only the first "
        "names of each list (k_max, 200 by default) are kept, so cut each query's list to its top ranks"
    )


def _whole(path: Path, limit: int) -> bytes | None:
    """The (gunzipped) file without a byte order mark, or None when it is longer than ``limit``."""
    with _open_raw(path) as fh:
        try:
            raw = fh.read(limit + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{path}: broken gzip data ({exc}); re-compress or pass the plain file") from None
    return None if len(raw) > limit else raw.removeprefix(BOM)


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
        out[doc] = doc if doc.startswith("!dup!") or not name else clean_text(name)
    return out, caps


def _detect(path: Path, shown: Path) -> str:
    for _, line in _lines(path, shown):
        if line.strip():
            if not line.lstrip().startswith(b"{"):
                return "trec"
            raw = _whole(path, MAX_RANX_BYTES)
            return "ranx" if raw is not None and _ranx_object(raw) is not None else "jsonl"
    raise InputError(f"{shown}: the run file is empty")


def _ranx_object(raw: bytes) -> dict[str, Any] | None:
    """The whole file as ranx's ``{qid: {doc: score}}``, or None when it is not one."""
    try:
        obj = json.loads(raw.removeprefix(BOM))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if b"\\u" in raw:  # NUL and surrogates only come from \u escapes
        obj = clean_json(obj)
    if isinstance(obj, dict) and obj and all(isinstance(v, dict) for v in obj.values()):
        return obj
    return None


def by_score(scores: list[tuple[float, str]]) -> list[str]:
    """Names by score descending, ties by name descending: trec_eval's order (its qsort
    compares the score, then ``strcmp(docno2, docno1)``; UTF-8 byte order is code point order)."""
    return [name for _, name in sorted(scores, key=lambda t: (t[0], t[1]), reverse=True)]


def parse_run(
    path: str | Path,
    fmt: str | None = None,
    docnos: str | Path | None = None,
    *,
    qids: set[str] | None = None,
    texts: set[str] | None = None,
    bench: str | None = None,
    order: str = "rank",
) -> ParsedRun:
    """Read a run file into ranked lists (all or nothing; errors name the first bad line).

    ``fmt``: "trec" | "jsonl" | "ranx" | None (by content). A TREC file's order is its rank
    column (renumbered 1..n; a rank repeated within a query is refused), or with
    ``order="score"`` its score column (descending; ties by DOCNO descending, as
    trec_eval). DOCNOs are names; when a ``docnos.tsv`` is given (or lies beside the
    file) they are read back through it. ``qids`` / ``texts``: the benchmark's, to refuse
    unknown keys at their line. ``path`` ``-`` reads standard input.
    """
    stdin = str(path) == STDIN
    path = Path(path).expanduser() if not stdin else Path(STDIN)
    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: expected trec, jsonl or ranx")
    if order not in ORDERS:
        raise InputError(f"--order {order!r}: expected rank or score")
    if not stdin:
        refuse_other_kinds(path, ("trec-run", "jsonl-run"), "a run")
    spooled = spool_stdin("a run", prefix="engines-run-") if stdin else None
    try:
        return _parse_from(spooled or path, path, fmt, docnos, _key_check(path, qids, texts, bench), order, stdin)
    finally:
        if spooled is not None:
            spooled.unlink(missing_ok=True)


def _parse_from(src: Path, path: Path, fmt: str | None, docnos: str | Path | None, check, order: str,
                stdin: bool) -> ParsedRun:
    """:func:`parse_run` of the file ``src`` (standard input spooled), shown as ``path``."""
    fmt = fmt or _detect(src, path)
    mapping_path: Path | None = None
    if fmt == "trec":
        if docnos is not None:
            mapping_path = Path(docnos).expanduser()
        elif not stdin and (path.parent / DOCNOS_FILE).is_file():
            mapping_path = path.parent / DOCNOS_FILE
    elif docnos is not None:
        raise InputError("--docnos applies to TREC runs only")
    if order == "score" and fmt != "trec":
        raise InputError(f"--order score applies to TREC runs (a {fmt} run's order is its list, or its scores)")
    mapping, caps = read_docnos(mapping_path) if mapping_path is not None else (None, {})
    if fmt == "jsonl":
        parsed = _parse_jsonl(src, path, check)
    elif fmt == "ranx":
        parsed = _parse_ranx(src, path, check)
    else:
        parsed = _parse_trec(src, path, check, mapping, mapping_path, caps, order)
    parsed.sha256 = file_sha256(src)  # the bytes as given (gzip data stays gzip data)
    return parsed


def _key_check(path: Path, qids: set[str] | None, texts: set[str] | None, bench: str | None):
    """``check(key, by, lineno)``: refuses a qid or query text the benchmark does not have."""

    def check(key: str, by: str, lineno: int) -> None:
        known = qids if by == "qid" else texts
        if known is not None and key not in known:
            other = " (is this a run for another benchmark?)" if bench else ""
            what = f"qid {key!r}" if by == "qid" else f"query text {key[:60]!r}"
            raise InputError(f"{path}:{lineno}: {what} is not in benchmark {bench}{other}; "
                             "remove the line or import into the right --bench")

    return check


def _parse_jsonl(src: Path, path: Path, check) -> ParsedRun:
    """A JSONL run: one ``{"qid"|"query": ..., "ranked": [names]}`` (or ``"scores": {name:
    score}``, ranked by score) per line."""
    lines = rows = 0
    lists: dict[tuple[str, str], RunList] = {}
    for lineno, raw in _lines(src, path):
        lines = lineno
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(raw)
            if b"\\u" in raw:  # NUL and lone surrogates (only from \u escapes) → U+FFFD, as crawled hits
                obj = clean_json(obj)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise InputError(f"{where}: not a JSON line ({why}); expected {{\"qid\": ..., \"ranked\": [names]}}") from None
        if (not isinstance(obj, dict) or ("ranked" in obj) == ("scores" in obj)
                or ("qid" in obj) == ("query" in obj)):
            raise InputError(f"{where}: expected {{\"qid\" or \"query\": ..., \"ranked\": [names]}} "
                             "(one of qid/query; or \"scores\": {name: score} instead of ranked)")
        by = "qid" if "qid" in obj else "query"
        key = obj[by]
        if by == "qid" and isinstance(key, int) and not isinstance(key, bool):
            key = str(key)
        if not isinstance(key, str) or not key.strip():
            raise InputError(f"{where}: {by!r} must be a non-empty string")
        key = key.strip()
        names = _jsonl_names(obj["ranked"], where) if "ranked" in obj else _scored_names(obj["scores"], where)
        rows += len(names)
        if rows > MAX_RUN_ROWS:
            _too_many(path, lineno)
        if (by, key) in lists:
            raise InputError(f"{where}: {by} {key[:60]!r} already has a list (line {lists[(by, key)].line}); "
                             "give each query one line")
        check(key, by, lineno)
        lists[(by, key)] = RunList(key, by, lineno, names)
    if not lists:
        raise InputError(f"{path}: no ranked lists in the file")
    return ParsedRun(path, "", "jsonl", list(lists.values()), lines, docnos=None)


def _scored_names(scores: Any, where: str) -> list[str]:
    """``{name: score}`` → names by score (trec_eval's order)."""
    if not isinstance(scores, dict) or not scores:
        raise InputError(f"{where}: 'scores' must be a non-empty object {{name: score}}")
    pairs = []
    for name, value in scores.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            raise InputError(f"{where}: the score of {name[:60]!r} is not a number")
        if not name.strip():
            raise InputError(f"{where}: an empty name in 'scores'")
        pairs.append((float(value), name))
    return by_score(pairs)


def _parse_ranx(src: Path, path: Path, check) -> ParsedRun:
    """ranx's JSON run: ``{qid: {doc: score}}``, each query ranked by score."""
    raw = _whole(src, MAX_RANX_BYTES)
    if raw is None:
        raise InputError(f"{path}: a ranx JSON run larger than {MAX_RANX_BYTES >> 20} MiB (it is read whole); "
                         "write it as TREC or JSONL, which are read line by line")
    obj = _ranx_object(raw)
    del raw
    if obj is None:
        raise InputError(f"{path}: not a ranx JSON run; expected {{\"qid\": {{\"name\": score, ...}}, ...}}")
    lists = []
    if sum(len(v) for v in obj.values()) > MAX_RUN_ROWS:
        _too_many(path, 1)
    for i, (qid, scores) in enumerate(obj.items(), start=1):
        where = f"{path}: query {qid[:60]!r}"
        check(qid.strip(), "qid", 1)
        lists.append(RunList(qid.strip(), "qid", i, _scored_names(scores, where)))
    return ParsedRun(path, "", "ranx", lists, 1, docnos=None)


def _jsonl_names(ranked: Any, where: str) -> list[str]:
    """The names of one JSONL line's ``ranked`` (a name given as components is joined with dots)."""
    if not isinstance(ranked, list):
        raise InputError(f"{where}: 'ranked' must be a list of names")
    names: list[str] = []
    for i, n in enumerate(ranked):
        if isinstance(n, list) and n and all(isinstance(p, str) for p in n):
            n = ".".join(n)  # components, stored dotted as crawled list names are
        if not isinstance(n, str) or not n.strip():
            raise InputError(f"{where}: 'ranked'[{i}] is not a name (a non-empty string)")
        names.append(n)
    return names


def _parse_trec(src: Path, path: Path, check, mapping: dict[str, str] | None, mapping_path: Path | None,
                caps: dict[str, int | None], order: str = "rank") -> ParsedRun:
    """A TREC run (``qid Q0 docno rank score tag``), DOCNOs read through ``mapping`` when given."""
    per, tags, lines = _trec_rows(src, path, check, mapping, mapping_path)
    out, disagree = _trec_lists(path, per) if order == "rank" else (_trec_by_score(per), 0)
    parsed = ParsedRun(path, "", "trec", out, lines, disagree,
                       str(mapping_path) if mapping_path is not None else None, order=order)
    if len(tags) == 1 and next(iter(tags)) in caps:
        parsed.cap_known, parsed.result_cap = True, caps[next(iter(tags))]
    return parsed


def _trec_text(src: Path, path: Path) -> Iterator[tuple[int, list[str]]]:
    """(number of the first line, the lines) of each block of the file, as text."""
    for first, whole in _blocks(src, path):
        try:
            text = whole.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}:{first + whole.count(NL, 0, exc.start)}: not UTF-8 text") from None
        if "\x00" in text:  # stored as both backends can (PostgreSQL text refuses NUL), as crawled hits are
            text = clean_text(text)
        yield first, text.split("\n")


def _trec_rows(src: Path, path: Path, check, mapping: dict[str, str] | None, mapping_path: Path | None,
               ) -> tuple[dict[str, list[tuple[int, int, float, str]]], set[str], int]:
    """qid → its (rank, line, score, name) rows in file order, the run tags seen, and the
    number of lines."""
    # The hot loop (perf/run_import.py): one split per line, checks that cost a compare.
    per: dict[str, list[tuple[int, int, float, str]]] = {}
    tags: set[str] = set()
    last_tag = None
    get = mapping.get if mapping is not None else None
    lineno = rows = 0
    for first, block in _trec_text(src, path):
        rows += len(block) - block.count("")
        if rows > MAX_RUN_ROWS:
            _too_many(path, first + len(block) - 1)
        for lineno, line in enumerate(block, start=first):
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
                doc = name
            ranked.append((rank, lineno, score, doc))
    if not per:
        raise InputError(f"{path}: no run lines in the file")
    return per, tags, lineno


def _trec_lists(path: Path, per: dict[str, list[tuple[int, int, float, str]]]) -> tuple[list[RunList], int]:
    """One list per qid in rank order, and how many queries' scores disagree with their ranks."""
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
        raise InputError(f"{path}:{lineno}: rank {rank} repeated in query {qid!r}; each rank once per query, "
                         "or pass --order score to rank by the score column (as trec_eval does)")
    return out, disagree


def _trec_by_score(per: dict[str, list[tuple[int, int, float, str]]]) -> list[RunList]:
    """``--order score``: each query by score descending, ties by DOCNO descending (trec_eval)."""
    return [RunList(qid, "qid", ranked[0][1], by_score([(r[2], r[3]) for r in ranked])) for qid, ranked in per.items()]
