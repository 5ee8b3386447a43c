"""``-`` reads standard input wherever a file is read (issue 34, item 3): ``corpus load -``
(plain or gzip, recorded as ``-``) and ``bench load - --name NAME`` (a JSON document or JSONL
lines), spooled to a temporary file that is removed after."""

from __future__ import annotations

import gzip
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "byo" / "corpus.jsonl"
QR = ROOT / "benchmarks" / "MathlibQR.json"


def engines(db: Path, *args: str, data: bytes = b"") -> subprocess.CompletedProcess:
    env = {**os.environ, "ENGINES_DATABASE_URL": f"sqlite:///{db}", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], input=data, capture_output=True, env=env,
                          cwd=db.parent, timeout=300)


def spooled_left() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("engines-corpus-*")} | \
        {p.name for p in Path(tempfile.gettempdir()).glob("engines-bench-*")}


def test_corpus_and_benchmark_load_from_standard_input(tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    before = spooled_left()
    raw = CORPUS.read_bytes()
    plain = engines(db, "corpus", "load", "-", "--name", "piped", data=raw)
    assert plain.returncode == 0, plain.stderr
    zipped = engines(db, "corpus", "load", "-", "--name", "zipped", data=gzip.compress(raw))
    assert zipped.returncode == 0, zipped.stderr
    qr = engines(db, "bench", "load", "-", "--name", "mathlibqr", data=QR.read_bytes())
    assert qr.returncode == 0, qr.stderr
    with sqlite3.connect(db) as con:
        rows = dict(con.execute("SELECT name, row_count FROM corpora"))
        sources = {s for (s,) in con.execute("SELECT source FROM corpora")}
        queries = con.execute("SELECT count(*) FROM queries q JOIN benchmarks b ON b.id = q.benchmark_id "
                              "WHERE b.name = 'mathlibqr'").fetchone()[0]
    lines = sum(1 for line in raw.splitlines() if line.strip())
    assert rows == {"piped": lines, "zipped": lines}
    assert sources == {"-"}  # not the temporary file's path
    assert queries == 946
    assert spooled_left() <= before  # the spooled copies are gone


def test_standard_input_refusals_are_one_line(tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    empty = engines(db, "corpus", "load", "-", "--name", "none")
    assert empty.returncode != 0 and b"nothing was read" in empty.stderr
    assert len(empty.stderr.decode().strip().splitlines()) == 1
    unnamed = engines(db, "bench", "load", "-", data=QR.read_bytes())
    assert unnamed.returncode != 0 and b"needs --name" in unnamed.stderr
    assert len(unnamed.stderr.decode().strip().splitlines()) == 1
