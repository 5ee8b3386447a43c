"""A colleague's archive on a read-only share (issue 34, item 7).

``engines sql``, ``status``, ``score``, ``report``, ``drift`` and ``export`` work on a
SQLite file that cannot be written: a real read-only mount (a tmpfs remounted ``ro``; CI
runs as root) and a file without write bits in a directory without write bits (root is
not bound by permissions, so there the test checks what the code decides: the file is
opened read-only, and nothing is written). Either way no file appears beside the database
(no -wal, -shm, journal or lock file), its bytes and mtime stay as they were, and the
figures equal those of a writable copy (the archive was never scored: on the read-only
file every position is derived in memory). A file whose schema is behind this version's
says so in one line naming ``engines db upgrade`` and is left as it was.
"""

from __future__ import annotations

import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.epochs import two_epochs  # noqa: F401 (fixture)
from tests.support.machine import tmpfs

ROOT = Path(__file__).resolve().parents[2]
BENCH = "mathlibmpr"


def _engines(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINES_")}
    return subprocess.run([sys.executable, "-m", "cli.main", "--db", url, *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)})


def _commands(out: Path) -> list[tuple[str, ...]]:
    return [
        ("status",),
        ("sql", "--tsv", "SELECT count(*) AS n FROM exchanges"),
        ("score", "--bench", BENCH, "--epoch", "all", "--json", str(out / "score.json")),
        ("report", "--bench", BENCH, "--out", str(out / "report")),
        ("drift", "leansearch", "--bench", BENCH),
        ("export", "--out", str(out / "archive.warc.gz")),
    ]


def _state(d: Path) -> dict[str, tuple[int, int, str]]:
    import hashlib

    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(d.iterdir())}


def _figures(path: Path) -> dict:
    doc = json.loads(path.read_text("utf-8"))
    doc.pop("generated_at")
    return doc


@pytest.mark.parametrize("how", ["chmod", "mount"])
def test_reading_commands_work_on_a_read_only_archive(two_epochs, tmp_path: Path, how: str) -> None:  # noqa: F811
    writable = tmp_path / "writable.db"
    shutil.copyfile(two_epochs.path, writable)
    mine = tmp_path / "mine"
    mine.mkdir()
    res = _engines(f"sqlite:///{writable}", *_commands(mine)[2])
    assert res.returncode == 0, res.stderr

    with _share(how, two_epochs.path) as db:
        before = _state(db.parent)
        out = tmp_path / "out"
        out.mkdir()
        for cmd in _commands(out):
            res = _engines(f"sqlite:///{db}", *cmd)
            assert res.returncode == 0, (cmd, res.stderr[-2000:])
            assert "Traceback" not in res.stderr
            assert _state(db.parent) == before, cmd  # nothing beside it, not a byte changed
            if cmd[0] == "sql":
                assert res.stdout.splitlines()[0] == "n" and int(res.stdout.splitlines()[1]) > 0
        assert _figures(out / "score.json") == _figures(mine / "score.json")
        assert (out / "report" / "index.html").is_file() and (out / "archive.warc.gz").stat().st_size > 0


@pytest.mark.parametrize("how", ["chmod", "mount"])
def test_a_read_only_archive_that_needs_a_migration_says_so(tmp_path: Path, how: str) -> None:
    old = tmp_path / "old.db"
    old.write_bytes(lzma.decompress((ROOT / "tests" / "data" / "upgrades" / "0006" / "sqlite.db.xz").read_bytes()))
    with _share(how, old) as db:
        before = _state(db.parent)
        for cmd in (("status",), ("score", "--bench", "mathlibqr")):
            res = _engines(f"sqlite:///{db}", *cmd)
            lines = res.stderr.strip().splitlines()
            assert res.returncode != 0 and len(lines) == 1, res.stderr
            assert str(db) in lines[0] and "read-only" in lines[0] and "`engines db upgrade`" in lines[0], lines[0]
        assert _state(db.parent) == before


class _share:
    """``src`` copied into a directory that is then made read-only: by permissions
    (``chmod``: file 0444, directory 0555) or by a read-only mount (``mount``)."""

    def __init__(self, how: str, src: Path) -> None:
        self.how, self.src = how, src

    def __enter__(self) -> Path:
        if self.how == "mount":
            self._cm = tmpfs("64m")
            d = self._cm.__enter__()
        else:
            self._cm = None
            d = Path(tempfile.mkdtemp(prefix="share-", dir=self.src.parent))
        db = d / "cache.db"
        shutil.copyfile(self.src, db)
        if self.how == "mount":
            subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        else:
            db.chmod(0o444)
            d.chmod(0o555)
        self.dir = d
        return db

    def __exit__(self, *exc) -> None:
        if self._cm is not None:
            self._cm.__exit__(*exc)
        else:
            self.dir.chmod(0o755)
