"""Corpus loading: LeanSearch v2 corpus JSONL (plain or gzip, local or ``hf://``) into ``declarations``.

A corpus is identified by (name, revision, sha256 of the file). Loading streams the
file in batches inside one transaction, so memory stays bounded and a failure
leaves nothing behind. Names are not unique and are all kept (every copy is a gold).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import queue
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from itertools import chain
from operator import is_not, itemgetter
from pathlib import Path
from typing import Any, Callable, Iterator

import sqlalchemy as sa
from sqlalchemy.orm import Session

from store.db import Database
from store.errors import InputError
from store.models import Corpus
from store.types import utcnow

KNOWN_KEYS = (
    "name",
    "module_name",
    "kind",
    "type",
    "signature",
    "value",
    "informal_name",
    "informal_description",
    "docstring",
)
BATCH_ROWS = 5000
_SQLITE_ROWS_PER_INSERT = 500
LOCAL_REVISION = "local"
HF_PATTERN = re.compile(r"^hf://(?P<repo>[^/@\s]+/[^/@\s]+)(?:@(?P<rev>[^/\s]+))?(?:/(?P<path>\S+))?$")


@dataclass(frozen=True)
class CorpusSource:
    """A resolved corpus file on local disk, with where it came from."""

    path: Path
    display: str  # what the user passed (hf:// spec or path)
    revision: str | None  # the hub revision, when there is one


@dataclass
class LoadResult:
    corpus_id: int
    name: str
    revision: str
    sha256: str
    rows: int
    created: bool  # False when the same file was already loaded (no-op)
    meta: dict[str, Any] = field(default_factory=dict)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def resolve_source(src: str, *, download_dir: Path | None = None) -> CorpusSource:
    """Turn ``SRC`` into a local file: a path, or ``hf://OWNER/DATASET@REVISION[/FILE]``."""
    if src.startswith("hf://"):
        return _resolve_hf(src, download_dir=download_dir)
    path = Path(src).expanduser()
    if not path.exists():
        raise InputError(f"corpus file {src} does not exist; pass a .jsonl, .jsonl.gz or hf://OWNER/DATASET@REVISION")
    if path.is_dir():
        raise InputError(f"corpus source {src} is a directory; pass the .jsonl or .jsonl.gz file inside it")
    return CorpusSource(path=path, display=src, revision=None)


def _resolve_hf(src: str, *, download_dir: Path | None) -> CorpusSource:
    m = HF_PATTERN.match(src)
    if not m:
        raise InputError(f"cannot parse {src!r}; expected hf://OWNER/DATASET@REVISION (optionally /FILE.jsonl)")
    repo, rev, fname = m.group("repo"), m.group("rev"), m.group("path")
    if not rev:
        raise InputError(
            f"{src}: a pinned revision is required (hf://{repo}@<commit>), so an upstream re-upload cannot change scores"
        )
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError:
        raise InputError("hf:// sources need huggingface_hub: pip install 'engines[hf]'") from None
    # The dataset's file name is not documented (BENCHMARKS.md §5.1): list and pick, never guess.
    patterns = [fname] if fname else ["*.jsonl", "*.jsonl.gz", "**/*.jsonl", "**/*.jsonl.gz"]
    try:
        folder = snapshot_download(
            repo_id=repo,
            repo_type="dataset",
            revision=rev,
            allow_patterns=patterns,
            local_dir=str(download_dir) if download_dir else None,
        )
    except LocalEntryNotFoundError as exc:
        raise InputError(f"{src}: not in the local Hugging Face cache and the hub is unreachable ({exc})") from None
    except HfHubHTTPError as exc:
        raise InputError(f"{src}: Hugging Face hub refused the download: {str(exc).splitlines()[0]}") from None
    files = sorted(
        p for p in Path(folder).rglob("*") if p.is_file() and p.name.endswith((".jsonl", ".jsonl.gz"))
    )
    if fname:
        files = [p for p in files if p.relative_to(folder).as_posix() == fname]
    if not files:
        raise InputError(f"{src}: the dataset at revision {rev} has no .jsonl/.jsonl.gz file")
    if len(files) > 1:
        names = ", ".join(p.relative_to(folder).as_posix() for p in files)
        raise InputError(f"{src}: several corpus files ({names}); name one as hf://{repo}@{rev}/FILE")
    return CorpusSource(path=files[0], display=src, revision=rev)


def _open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if gz:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def parse_row(obj: Any, where: str, row: int) -> dict[str, Any]:
    """One corpus JSON object → a ``declarations`` row (without ``corpus_id``)."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}; is this a corpus JSONL file?")
    name = obj.get("name")
    if isinstance(name, str):
        # A string name must be split before joining, or every character gets a dot (BENCHMARKS.md §6.5).
        parts = [p for p in name.strip().split(".")]
    elif isinstance(name, list) and all(type(p) is str for p in name):
        parts = name
    else:
        parts = []
    if not parts or "" in parts:
        raise InputError(
            f"{where}: row has no usable 'name' (got {json.dumps(name, ensure_ascii=False)[:80]}); "
            "expected a list of name components like [\"Nat\", \"add_comm\"]"
        )
    module = obj.get("module_name")
    if isinstance(module, list):
        module = ".".join(str(p) for p in module)
    extra = {k: v for k, v in obj.items() if k not in KNOWN_KEYS}
    return {
        "row": row,
        "full_name": ".".join(parts),
        "name": parts,
        "module_name": _as_text(module) or None,
        "kind": _as_text(obj.get("kind")),
        "type": _as_text(obj.get("type")),
        "signature": _as_text(obj.get("signature")),
        "value": _as_text(obj.get("value")),
        "informal_name": _as_text(obj.get("informal_name")),
        "informal_description": _as_text(obj.get("informal_description")),
        "docstring": _as_text(obj.get("docstring")),
        "extra": extra or None,
    }


def iter_rows(path: Path, display: str | None = None) -> Iterator[dict[str, Any]]:
    """Stream parsed rows; errors name the file and the 1-based line."""
    display = display or str(path)
    row = 0
    try:
        with _open_text(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{display}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
                yield parse_row(obj, f"{display}:{lineno}", row)
                row += 1
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"{display}: cannot read corpus file ({exc})") from None


_DECL_COLUMNS = (
    "corpus_id", "row", "full_name", "name", "module_name", "kind", "type", "signature", "value",
    "informal_name", "informal_description", "docstring", "extra",
)
_JSON_COLUMNS = frozenset({"name", "extra"})
_TEXT_KEYS = ("kind", "type", "signature", "value", "informal_name", "informal_description", "docstring")
_KNOWN = frozenset(KNOWN_KEYS)
# One encoder for every row: json.dumps with a keyword argument builds a new encoder per call,
# which was a fifth of a 250k-row load.
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')
# json's own string encoder (C) and its C object encoder with json.dumps' settings, built
# once: JSONEncoder.encode builds that encoder anew on every call. Without circular checks
# (markers None), which parsed JSON never needs. Same output as _ENCODE.
_ENCODE_STR = json.encoder.encode_basestring
_C_ENCODER = (
    json.encoder.c_make_encoder(None, None, _ENCODE_STR, None, ": ", ", ", False, False, True)
    if json.encoder.c_make_encoder is not None and _ENCODE_STR is json.encoder.c_encode_basestring
    else None
)
_KNOWN_ORDER = ("name", "module_name", *_TEXT_KEYS)
_FULL_NAME = itemgetter(2)
_SCAN_ONCE = json.decoder.JSONDecoder().scan_once  # what json.loads runs, without its Python layers
_not_none = partial(is_not, None)


def _encode(obj: Any) -> str:
    return "".join(_C_ENCODER(obj, 0)) if _C_ENCODER is not None else _ENCODE(obj)


class _Shape:
    """What a row's key order implies, worked out once per distinct key order: when all
    known keys are there, one C getter for them (in ``_KNOWN_ORDER``) and then the unknown
    keys; the unknown keys (``extra``) in order, and the ``extra`` JSON with holes for the
    encoded values."""

    __slots__ = ("get", "unknown", "extra_fmt")

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.unknown = tuple(k for k in keys if k not in _KNOWN) or None
        self.get = itemgetter(*_KNOWN_ORDER, *(self.unknown or ())) if _KNOWN.issubset(keys) else None
        self.extra_fmt = (
            "{" + ", ".join(_ENCODE_STR(k).replace("%", "%%") + ": %s" for k in self.unknown) + "}"
            if self.unknown else None
        )


_SHAPES: dict[tuple[str, ...], _Shape] = {}
_MAX_SHAPES = 1024


def _shape(keys: tuple[str, ...]) -> _Shape:
    shape = _SHAPES.get(keys)
    if shape is None:
        shape = _Shape(keys)
        if len(_SHAPES) < _MAX_SHAPES:
            _SHAPES[keys] = shape
    return shape


def _encode_value(v: Any) -> str:
    return _ENCODE_STR(v) if type(v) is str else int.__repr__(v) if type(v) is int else _encode(v)


def _decl_values(
    obj: Any, corpus_id: int, row: int, display: str, lineno: int, plain: bool = False
) -> tuple[tuple, Any]:
    """One JSON object → the ``_DECL_COLUMNS`` tuple (JSON columns already encoded) and
    the row's unknown keys in order (None when there are none).

    The same row as :func:`parse_row` without the intermediate dict, for rows with every
    known key, a list name of non-empty strings and a list, string or null module; any
    other row goes through :func:`_decl_values_general` (and its errors through parse_row).
    ``plain``: the source line has no backslash, so no string in it needs a JSON escape.
    """
    if type(obj) is dict and _C_ENCODER is not None:
        keys = tuple(obj)
        shape = _SHAPES.get(keys) or _shape(keys)
        get = shape.get
        if get is not None:
            vals = get(obj)
            name, module, texts = vals[0], vals[1], vals[2:9]
            full_name = _dotted(name)
            if full_name is not None and (module is None or type(module) is str or type(module) is list):
                try:
                    "".join(filter(_not_none, texts))  # TypeError unless each is None or a string
                except TypeError:
                    texts = [v if v is None or type(v) is str else _encode(v) for v in texts]
                if type(module) is list:
                    try:
                        module = ".".join(module)
                    except TypeError:
                        module = ".".join(str(p) for p in module)
                unknown = shape.unknown
                if unknown is None:
                    extra = None
                elif len(unknown) == 2:  # as in the extracted Mathlib (source_path, source_line)
                    a, b = vals[9:]
                    extra = shape.extra_fmt % (
                        _ENCODE_STR(a) if type(a) is str else int.__repr__(a) if type(a) is int else _encode(a),
                        _ENCODE_STR(b) if type(b) is str else int.__repr__(b) if type(b) is int else _encode(b),
                    )
                else:
                    extra = shape.extra_fmt % tuple(map(_encode_value, vals[9:]))
                # Without escapes a name encodes as its parts in quotes (exactly json.dumps' output).
                name_json = '["' + '", "'.join(name) + '"]' if plain else "".join(_C_ENCODER(name, 0))
                return (corpus_id, row, full_name, name_json, module or None, *texts, extra), unknown
    return _decl_values_general(obj, corpus_id, row, display, lineno)


def _dotted(name: Any) -> str | None:
    """A list of non-empty string parts joined with dots, else None."""
    if type(name) is list and name and "" not in name:
        try:
            return ".".join(name)  # TypeError unless every component is a string
        except TypeError:
            return None
    return None


def _decl_values_general(obj: Any, corpus_id: int, row: int, display: str, lineno: int) -> tuple[tuple, Any]:
    """:func:`_decl_values` for any input, falling back to :func:`parse_row` (and its
    errors) for anything unusual."""
    name = obj.get("name") if type(obj) is dict else None
    module = obj.get("module_name") if name is not None else None
    full_name = _dotted(name)
    if full_name is None or (module is not None and type(module) is not list and type(module) is not str):
        rec = parse_row(obj, f"{display}:{lineno}", row)
        rec["corpus_id"] = corpus_id
        return tuple(
            (_ENCODE(rec[c]) if rec[c] is not None else None) if c in _JSON_COLUMNS else rec[c] for c in _DECL_COLUMNS
        ), (tuple(rec["extra"]) if rec["extra"] else None)
    if type(module) is list:
        module = ".".join(module) if all(type(p) is str for p in module) else ".".join(str(p) for p in module)
    get = obj.get
    texts = [get(k) for k in _TEXT_KEYS]
    for i, v in enumerate(texts):
        if v is not None and type(v) is not str:
            texts[i] = _ENCODE(v)
    extra = None
    unknown = tuple(k for k in obj if k not in _KNOWN)
    if unknown:
        extra = _ENCODE({k: obj[k] for k in unknown})
    # A name without quotes, backslashes or control characters encodes as its parts in
    # quotes (exactly json.dumps' output); the rest goes through the encoder.
    name_json = _ENCODE(name) if _NEEDS_ESCAPE.search(full_name) else '["' + '", "'.join(name) + '"]'
    return (corpus_id, row, full_name, name_json, module or None, *texts, extra), unknown or None


# PostgreSQL COPY text format: a field's backslash, newline, carriage return and tab are
# escaped; NULL is \N. psycopg's write_row refuses a NUL in a text field, and so do we.
_COPY_SPECIAL = re.compile("[\\\\\n\r\t\x00]")


class _NulInText(Exception):
    """A text field holds NUL; raised as psycopg's DataError once the batch is read."""


def _copy_escape(s: str) -> str:
    if "\x00" in s:
        raise _NulInText
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _copy_line(values: tuple, plain: bool) -> str:
    """A ``_DECL_COLUMNS`` tuple as one line of COPY text."""
    if plain:  # no backslash in the source line: no string here has a special character
        fields = ["\\N" if v is None else v for v in values[2:]]
    else:
        fields = ["\\N" if v is None else _copy_escape(v) if _COPY_SPECIAL.search(v) else v for v in values[2:]]
    return f"{values[0]}\t{values[1]}\t" + "\t".join(fields) + "\n"


@dataclass
class _Tally:
    """What the corpora row's meta counts, gathered while reading."""

    kinds: Counter = field(default_factory=Counter)
    names: Counter = field(default_factory=Counter)
    extra_keys: Counter = field(default_factory=Counter)


def _iter_batches(
    path: Path, display: str, corpus_id: int, copy: bool, tally: _Tally, batch_rows: int = BATCH_ROWS
) -> Iterator[tuple[Any, int]]:
    """The file as batches of at most ``batch_rows`` rows: lists of ``_DECL_COLUMNS``
    tuples, or (``copy``) COPY text; with the row count. Counts kinds, names and extra
    keys into ``tally``. Errors name the file and the 1-based line, as :func:`iter_rows`."""
    row = 0
    loads, scan = json.loads, _SCAN_ONCE
    kinds, names = tally.kinds, tally.names
    unknown_counts: dict[tuple[str, ...], int] = {}  # per distinct tuple of unknown keys, in first-seen order
    batch: list[tuple] = []
    lines: list[str] = []

    nul_in_text = False

    def flush() -> tuple[Any, int]:
        nonlocal batch, lines
        if nul_in_text:  # where write_row raised it: writing the batch, after reading it all
            import psycopg

            raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        # Tuple positions in _DECL_COLUMNS: 2 full_name, 5 kind.
        kinds.update(v[5] or "" for v in batch)
        names.update(map(_FULL_NAME, batch))
        out = ("".join(lines) if copy else batch), len(batch)
        batch, lines = [], []
        return out

    try:
        with _open_text(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                try:
                    # json.loads without its Python layers: the C scanner, then the same
                    # check that nothing but the line end follows; anything else (leading
                    # or trailing blanks, errors) goes through json.loads itself.
                    obj, end = scan(line, 0)
                    if end != len(line) and (end + 1 != len(line) or line[end] != "\n"):
                        raise ValueError
                except (StopIteration, ValueError):
                    try:
                        obj = loads(line)
                    except json.JSONDecodeError as exc:
                        if not line.strip():
                            continue
                        raise InputError(f"{display}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
                plain = "\\" not in line
                values, unknown = _decl_values(obj, corpus_id, row, display, lineno, plain)
                row += 1
                if unknown:
                    unknown_counts[unknown] = unknown_counts.get(unknown, 0) + 1
                batch.append(values)
                if copy:
                    try:
                        lines.append(_copy_line(values, plain))
                    except _NulInText:
                        nul_in_text = True
                if len(batch) >= batch_rows:
                    yield flush()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"{display}: cannot read corpus file ({exc})") from None
    for unknown, count in unknown_counts.items():  # keys in the order they were first seen
        for key in unknown:
            tally.extra_keys[key] += count
    if batch:
        yield flush()


class _Reader:
    """:func:`_iter_batches` in a thread of its own, a few batches ahead of the thread
    that inserts them: parsing (Python) runs while SQLite inserts with the GIL released,
    or while PostgreSQL works on the COPY data already sent. Batches and the reader's
    error come out in file order, so the first error is the one a serial load would
    raise. Memory stays bounded by ``ahead`` batches."""

    _DONE = object()

    def __init__(self, batches: Iterator[tuple[Any, int]], ahead: int = 3) -> None:
        self._batches = batches
        self._queue: queue.Queue = queue.Queue(maxsize=ahead)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corpus-reader", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for batch in self._batches:
                if not self._put(batch):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(exc)
        else:
            self._put(self._DONE)
        finally:
            close = getattr(self._batches, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        while True:
            item = self._queue.get()
            if item is self._DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _insert_sql(conn: sa.Connection) -> str:
    from store.writes import driver_insert_sql

    return driver_insert_sql(conn, "declarations", _DECL_COLUMNS)


def _bulk_inserter(conn: sa.Connection) -> Callable[[Any], None]:
    """A function taking batches from :func:`_iter_batches`.

    PostgreSQL: a COPY per batch fed preformatted text (``write_row`` per row cost more
    than the server's own work; a COPY per batch, as before, reports a bad value at the
    batch that holds it). SQLite: straight to the driver (the ORM/Core per-row parameter
    processing cost three times the SQLite insert itself, perf/corpus_load.py), as
    INSERTs of up to ``_SQLITE_ROWS_PER_INSERT`` rows each: sqlite3 lets go of the GIL
    for each statement it steps, and with one statement per row (executemany) the reader
    thread held the GIL through nearly every step, so the two threads took turns instead
    of overlapping."""
    if conn.dialect.name == "postgresql":
        cursor = conn.connection.driver_connection.cursor()
        quote = conn.dialect.identifier_preparer.quote
        copy_sql = f"COPY declarations ({', '.join(quote(c) for c in _DECL_COLUMNS)}) FROM STDIN"

        def copy(text: str) -> None:
            with cursor.copy(copy_sql) as cp:
                cp.write(text)

        return copy
    sql = _insert_sql(conn)
    dbapi = conn.connection.driver_connection
    cursor = dbapi.cursor()
    per = _SQLITE_ROWS_PER_INSERT
    getlimit = getattr(dbapi, "getlimit", None)  # Python 3.11+
    if getlimit is not None:
        import sqlite3

        per = min(per, getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(_DECL_COLUMNS),
                  getlimit(sqlite3.SQLITE_LIMIT_COMPOUND_SELECT))
    else:
        per = min(per, 999 // len(_DECL_COLUMNS))  # SQLite's smallest default limits
    values_row = "(" + ", ".join(["?"] * len(_DECL_COLUMNS)) + ")"
    many_sql = sql.split(" VALUES ")[0] + " VALUES " + ", ".join([values_row] * per)
    flat = chain.from_iterable

    def insert(batch: list[tuple]) -> None:
        full = len(batch) - len(batch) % per
        for i in range(0, full, per):
            cursor.execute(many_sql, list(flat(batch[i:i + per])))
        if full < len(batch):
            cursor.executemany(sql, batch[full:])

    return insert


_NAME_INDEX = "ix_declarations_corpus_id_full_name"


def _drop_name_index_if_empty(conn: sa.Connection) -> str | None:
    """On SQLite, when ``declarations`` is empty, drop its (corpus_id, full_name) index
    inside the load's transaction and return the statement that made it, to run again
    after the rows are in: building it once from sorted keys cost 0.2-0.3 s where keeping
    it up to date row by row cost 0.6 s of a 250k-row load. A failed load rolls the drop
    back with everything else. With rows already there, rebuilding would sort them too."""
    if conn.exec_driver_sql("SELECT 1 FROM declarations LIMIT 1").first() is not None:
        return None
    sql = conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'declarations' AND name = ?",
        (_NAME_INDEX,),
    ).scalar()
    if sql is None:
        return None
    conn.exec_driver_sql(f'DROP INDEX "{_NAME_INDEX}"')
    return sql


def load_corpus(
    db: Database,
    src: str,
    *,
    name: str,
    revision: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> LoadResult:
    """Load a corpus file in one transaction. Same file again → no-op; another file under
    the same (name, revision) → refused."""
    source = resolve_source(src)
    if revision and source.revision and revision != source.revision:
        raise InputError(f"--revision {revision} contradicts the revision in {src}")
    revision = revision or source.revision or LOCAL_REVISION
    digest = sha256_file(source.path)

    with db.session() as s:
        existing = s.execute(
            sa.select(Corpus).where(Corpus.name == name, Corpus.revision == revision)
        ).scalar_one_or_none()
    if existing is not None:
        if existing.sha256 == digest:
            return LoadResult(existing.id, name, revision, digest, existing.row_count, False, existing.meta or {})
        raise InputError(
            f"corpus {name!r} revision {revision!r} is already loaded from a different file "
            f"(sha256 {existing.sha256[:12]}, this file {digest[:12]}); use another --name or --revision"
        )

    tally = _Tally()
    n = 0
    with db.engine.begin() as conn:
        corpus_id = conn.execute(
            sa.insert(Corpus.__table__).returning(Corpus.__table__.c.id),
            {
                "name": name,
                "revision": revision,
                "sha256": digest,
                "source": source.display,
                "row_count": 0,
                "loaded_at": utcnow(),
            },
        ).scalar_one()
        copy = conn.dialect.name == "postgresql"
        reader = _Reader(_iter_batches(source.path, source.display, corpus_id, copy, tally))
        insert_rows = _bulk_inserter(conn)
        rebuild_index = None if copy else _drop_name_index_if_empty(conn)
        try:
            for batch, count in reader:
                insert_rows(batch)
                n += count
                if progress:
                    progress(n)
        finally:
            reader.close()
        if rebuild_index:
            conn.exec_driver_sql(rebuild_index)
        if n == 0:
            raise InputError(f"{source.display}: no declarations in the file")
        meta = {
            "kinds": dict(tally.kinds.most_common()),
            "duplicate_names": sum(1 for c in tally.names.values() if c > 1),
            "distinct_names": len(tally.names),
            "extra_keys": dict(tally.extra_keys.most_common()),
            "file": source.path.name,
        }
        conn.execute(
            sa.update(Corpus.__table__).where(Corpus.__table__.c.id == corpus_id).values(row_count=n, meta=meta)
        )
    return LoadResult(corpus_id, name, revision, digest, n, True, meta)


def pick_corpus(session: Session, spec: str | None) -> Corpus:
    """The corpus named ``NAME`` or ``NAME@REVISION``; with none given, the only loaded one."""
    rows = list(session.execute(sa.select(Corpus).order_by(Corpus.id)).scalars())
    listing = ", ".join(f"{c.name}@{c.revision}" for c in rows) or "none"
    if spec is None:
        if len(rows) == 1:
            return rows[0]
        if not rows:
            raise InputError("no corpus is loaded; load one with `engines corpus load SRC --name NAME`")
        raise InputError(f"several corpora are loaded ({listing}); choose one with --corpus NAME[@REVISION]")
    name, _, rev = spec.partition("@")
    found = [c for c in rows if c.name == name and (not rev or c.revision == rev)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise InputError(f"no corpus {spec!r} in the database (loaded: {listing})")
    raise InputError(f"corpus {spec!r} has several revisions ({listing}); name one as NAME@REVISION")


def find_corpus(db: Database, spec: str | None = None) -> Corpus:
    """:func:`pick_corpus` in a session of its own."""
    with db.session() as s:
        return pick_corpus(s, spec)
