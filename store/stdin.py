"""``-`` as a file: standard input spooled to a temporary file, block by block (read like any
file, never whole in memory), for the readers that take a path (run import, corpus load,
bench load)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from store.errors import InputError

STDIN = "-"
BLOCK = 1 << 20


def spool_stdin(what: str, *, prefix: str = "engines-", suffix: str = ".stdin", name: str | None = None) -> Path:
    """Standard input copied to a new temporary file (``name`` inside a new temporary directory,
    when the reader goes by the file's name); the caller removes it. Empty input is one line
    naming ``what`` was expected."""
    if name is not None:
        path = Path(tempfile.mkdtemp(prefix=prefix)) / name
        out = open(path, "wb")
    else:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix)
        path, out = Path(tmp), open(fd, "wb")
    with out:
        shutil.copyfileobj(sys.stdin.buffer, out, BLOCK)
    if not path.stat().st_size:
        remove_spooled(path)
        raise InputError(f"{what} from standard input (-): nothing was read; pipe the file in")
    return path


def remove_spooled(path: Path) -> None:
    """Remove a spooled file (and the directory made for it by ``name``)."""
    path.unlink(missing_ok=True)
    if path.parent.name.startswith("engines-") and path.parent != Path(tempfile.gettempdir()):
        shutil.rmtree(path.parent, ignore_errors=True)


def _gzip_or_not(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


@contextmanager
def corpus_from_stdin() -> Iterator[Path]:
    """A corpus piped in: ``stdin.jsonl`` (or ``.jsonl.gz`` by its magic bytes), removed after."""
    path = spool_stdin("a corpus", prefix="engines-corpus-", name="stdin.jsonl")
    if _gzip_or_not(path):
        path = path.rename(path.with_name("stdin.jsonl.gz"))
    try:
        yield path
    finally:
        remove_spooled(path)


@contextmanager
def benchmark_from_stdin(name: str) -> Iterator[Path]:
    """A benchmark piped in, named ``NAME.json`` when it is one JSON document (MathlibQR's own
    format, an id list's JSON) and ``NAME.jsonl`` otherwise (one query a line); removed after."""
    path = spool_stdin("a benchmark", prefix="engines-bench-", name=f"{name}.jsonl")
    try:
        with open(path, "rb") as fh:
            json.load(fh)  # one document (bounded by what was piped in; benchmarks are small)
        path = path.rename(path.with_suffix(".json"))
    except (ValueError, UnicodeDecodeError):
        pass
    try:
        yield path
    finally:
        remove_spooled(path)
