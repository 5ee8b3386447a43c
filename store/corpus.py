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
import re
from collections import Counter
from dataclasses import dataclass, field
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


def _decl_values(obj: Any, corpus_id: int, row: int, display: str, lineno: int) -> tuple[tuple, Any]:
    """One JSON object → the ``_DECL_COLUMNS`` tuple (JSON columns already encoded) and
    the row's unknown keys (None when there are none).

    The same row as :func:`parse_row` (which this falls back to for anything unusual,
    and for its error messages) without the intermediate dict.
    """
    name = obj.get("name") if type(obj) is dict else None
    module = obj.get("module_name") if name is not None else None
    full_name = None
    if type(name) is list and name and "" not in name:
        try:
            full_name = ".".join(name)  # TypeError unless every component is a string
        except TypeError:
            pass
    if full_name is None or (module is not None and type(module) is not list and type(module) is not str):
        rec = parse_row(obj, f"{display}:{lineno}", row)
        rec["corpus_id"] = corpus_id
        return tuple(
            (_ENCODE(rec[c]) if rec[c] is not None else None) if c in _JSON_COLUMNS else rec[c] for c in _DECL_COLUMNS
        ), (rec["extra"].keys() if rec["extra"] else None)
    if type(module) is list:
        module = ".".join(module) if all(type(p) is str for p in module) else ".".join(str(p) for p in module)
    get = obj.get
    texts = [get(k) for k in _TEXT_KEYS]
    for i, v in enumerate(texts):
        if v is not None and type(v) is not str:
            texts[i] = _ENCODE(v)
    extra = None
    unknown = obj.keys() - _KNOWN
    if unknown:
        extra = _ENCODE({k: obj[k] for k in obj if k in unknown})
    # A name without quotes, backslashes or control characters encodes as its parts in
    # quotes (exactly json.dumps' output); the rest goes through the encoder.
    name_json = _ENCODE(name) if _NEEDS_ESCAPE.search(full_name) else '["' + '", "'.join(name) + '"]'
    return (corpus_id, row, full_name, name_json, module or None, *texts, extra), unknown or None


def _iter_values(path: Path, display: str, corpus_id: int) -> Iterator[tuple[tuple, Any]]:
    """:func:`iter_rows` as ``_DECL_COLUMNS`` tuples; the same errors."""
    row = 0
    loads = json.loads
    try:
        with _open_text(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                try:
                    obj = loads(line)
                except json.JSONDecodeError as exc:
                    if not line.strip():
                        continue
                    raise InputError(f"{display}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
                yield _decl_values(obj, corpus_id, row, display, lineno)
                row += 1
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"{display}: cannot read corpus file ({exc})") from None


def _insert_sql(conn: sa.Connection) -> str:
    quote = conn.dialect.identifier_preparer.quote
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    return (
        f"INSERT INTO declarations ({', '.join(quote(c) for c in _DECL_COLUMNS)}) "
        f"VALUES ({', '.join([mark] * len(_DECL_COLUMNS))})"
    )


def _bulk_inserter(conn: sa.Connection) -> Callable[[list[tuple]], None]:
    """Batches of value tuples into ``declarations``: COPY on PostgreSQL, executemany
    straight to the driver on SQLite (the ORM/Core per-row parameter processing cost
    three times the SQLite insert itself on a 310k-row load, perf/corpus_load.py)."""
    if conn.dialect.name == "postgresql":
        cursor = conn.connection.driver_connection.cursor()
        quote = conn.dialect.identifier_preparer.quote
        copy_sql = f"COPY declarations ({', '.join(quote(c) for c in _DECL_COLUMNS)}) FROM STDIN"

        def copy(batch: list[tuple]) -> None:
            with cursor.copy(copy_sql) as cp:
                for values in batch:
                    cp.write_row(values)

        return copy
    sql = _insert_sql(conn)
    return lambda batch: conn.exec_driver_sql(sql, batch)


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

    kinds: Counter[str] = Counter()
    names: Counter[str] = Counter()
    extra_keys: Counter[str] = Counter()
    n = 0
    with db.engine.begin() as conn:
        insert_rows = _bulk_inserter(conn)
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
        batch: list[tuple] = []
        # Tuple positions in _DECL_COLUMNS: 2 full_name, 5 kind.
        for values, unknown in _iter_values(source.path, source.display, corpus_id):
            kinds[values[5] or ""] += 1
            names[values[2]] += 1
            if unknown:
                extra_keys.update(unknown)
            batch.append(values)
            if len(batch) >= BATCH_ROWS:
                insert_rows(batch)
                n += len(batch)
                batch = []
                if progress:
                    progress(n)
        if batch:
            insert_rows(batch)
            n += len(batch)
            if progress:
                progress(n)
        if n == 0:
            raise InputError(f"{source.display}: no declarations in the file")
        meta = {
            "kinds": dict(kinds.most_common()),
            "duplicate_names": sum(1 for c in names.values() if c > 1),
            "distinct_names": len(names),
            "extra_keys": dict(extra_keys.most_common()),
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
