"""The machine fails under the archive (issue 21): a full disk during an import or a crawl
(a real size-limited tmpfs; CI runs as root), a corrupt database file, a read-only mount.
Each is one line naming the file, what happened and what to do, a non-zero exit, and
nothing half-written: the database opens afterwards with whole exchanges only."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from benchmarks import SLICE_CORPUS, shipped_path
from engines.base import config_hash
from engines.emulate import StandIn
from store.benchmarks import load_benchmark_file
from store.db import open_database
from store.models import Answer, Exchange, ParseOutcome
from tests.support.bundles import LEANSEARCH, PUBLIC, Bundle, _config
from tests.support.machine import tmpfs

ROOT = Path(__file__).resolve().parents[2]


def _fill(d: Path, leave: int) -> None:
    """Take all free space of ``d`` but ``leave`` bytes."""
    st = os.statvfs(d)
    free = st.f_bavail * st.f_frsize
    with open(d / "filler", "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))


def _engines(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", "--db", url, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 1, (p.returncode, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in p.stderr and "(a bug" not in p.stderr, p.stderr
    assert lines and lines[-1].startswith("error: "), p.stderr
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and not any(ln.startswith(("Exception", "  File")) for ln in lines), p.stderr
    return errors[0]


def _counts(url: str) -> tuple[int, int, int]:
    db = open_database(url)
    try:
        with db.session() as s:
            return tuple(s.scalar(sa.select(sa.func.count()).select_from(m)) for m in (Exchange, Answer, ParseOutcome))
    finally:
        db.dispose()


def _big_bundle(path: Path, n: int = 60) -> Path:
    b = Bundle(path, [_config(LEANSEARCH)])
    for i in range(n):
        b.pair(PUBLIC, [f"q{i}"], b"[[]]" + b" " * 100_000, h=config_hash(LEANSEARCH))
    return b.close()


def test_a_full_disk_during_an_import_is_one_line_and_nothing_is_half_written(tmp_path: Path) -> None:
    bundle = _big_bundle(tmp_path / "big.warc.gz")
    with tmpfs("32m") as d:
        db = d / "cache.db"
        url = f"sqlite:///{db}"
        open_database(url).dispose()
        _fill(d, 1_000_000)  # room for a few exchanges, not for 60 of 100 KB
        line = _one_error_line(_engines(url, "import", str(bundle)))
        assert line.startswith(f"error: the disk holding {db} is full; free space there")
        assert "nothing was half-written" in line
        (d / "filler").unlink()
        assert _counts(url) == (0, 0, 0)
        # With room again, the same import goes through.
        ok = _engines(url, "import", str(bundle))
        assert ok.returncode == 0, ok.stderr
        assert _counts(url)[0] == 60


def test_a_full_disk_during_a_crawl_is_one_line_and_the_next_crawl_completes() -> None:
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in itertools.islice(fh, 400)]
    with tmpfs("48m") as d, StandIn("leansearch", rows).in_thread() as srv:
        db = d / "cache.db"
        url = f"sqlite:///{db}"
        database = open_database(url)
        try:
            load_benchmark_file(database, shipped_path("MathlibMPR.json"))
        finally:
            database.dispose()
        _fill(d, 300_000)
        args = ("crawl", "leansearch", "--bench", "mathlibmpr", "--url", f"leansearch={srv.url}", "--rate", "50/1s")
        line = _one_error_line(_engines(url, *args))
        assert f"the disk holding {db} is full" in line, line
        n_ex, n_ans, n_out = _counts(url)
        assert n_ans <= n_out <= n_ex  # every answer has its outcome; no half-written exchange
        (d / "filler").unlink()
        ok = _engines(url, *args)
        assert ok.returncode == 0, ok.stderr
        assert _counts(url)[1] == 69, (ok.stdout[-2000:], ok.stderr[-3000:])


def test_a_corrupt_database_file_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    url = f"sqlite:///{db}"
    open_database(url).dispose()
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page: page * 3] = b"\xa5" * (page * 2)  # pages 2 and 3 (the schema's tables) overwritten
    db.write_bytes(bytes(data))
    line = _one_error_line(_engines(url, "status"))
    assert line.startswith(f"error: {db} is corrupt (database disk image is malformed); restore it from a backup")


def test_a_read_only_mount_is_one_line(tmp_path: Path) -> None:
    bundle = _big_bundle(tmp_path / "small.warc.gz", n=2)
    with tmpfs("4m") as d:
        db = d / "cache.db"
        url = f"sqlite:///{db}"
        open_database(url).dispose()
        before = db.read_bytes()
        subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        line = _one_error_line(_engines(url, "import", str(bundle)))
        assert str(db) in line and ("read-only" in line or "for writing" in line), line
        assert db.read_bytes() == before
