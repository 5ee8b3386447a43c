"""``engines verify``'s temporary directory: bounded, marked, and never left behind.

- Bounded: everything verify writes there (an embedded corpus, name-list files, the
  temporary SQLite database and its WAL) is at most ``TEMP_RATIO`` (96) times the size of
  the bundle plus the corpus files taken from this machine, and never less than
  ``MIN_TEMP_BYTES`` (256 MiB) -- :class:`TempBudget`: files are charged as they are
  written; the database gets half of what is left as SQLite's ``max_page_count`` (its WAL
  holds at most as many pages again), so a bundle that would need more ends in one line.
- Marked: the directory (``engines-verify-*`` in the system's temporary directory) holds
  ``engines-verify.pid``: the verifying process's id and start time.
- Never left behind: it is removed when verify ends, fails or is interrupted (SIGINT, and
  SIGTERM turned into the same by ``engines verify``); one left by a process that was
  killed outright (kill -9, a power cut) is removed by the next verify, once its process is
  gone (:func:`sweep`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

TEMP_RATIO = 96
MIN_TEMP_BYTES = 256 << 20
PREFIX = "engines-verify-"
MARK = "engines-verify.pid"


class TempBudget:
    """Bytes verify may write to its temporary directory, and what it has written."""

    def __init__(self, bundle_bytes: int) -> None:
        self.bundle_bytes = bundle_bytes
        self.local_bytes = 0  # corpus files taken from this machine
        self.used = 0
        self.db_pages: int | None = None

    @property
    def limit(self) -> int:
        return max(MIN_TEMP_BYTES, TEMP_RATIO * (self.bundle_bytes + self.local_bytes))

    def describe(self) -> str:
        return (f"{self.limit:,} bytes of temporary space ({TEMP_RATIO}x the bundle"
                + (" and the local corpus files" if self.local_bytes else "") + f", at least {MIN_TEMP_BYTES >> 20} MiB)")

    def charge(self, n: int, where: str) -> None:
        from pipelines.verify_read import CannotVerify

        self.used += n
        if self.used > self.limit:
            raise CannotVerify(f"{where}: the bundle needs more than {self.describe()}; refused")

    def bound_sqlite(self, db) -> None:
        """Every connection of ``db`` (a temporary SQLite database) stops at half of what is left."""
        import sqlalchemy as sa

        page = 4096
        self.db_pages = max(64, (self.limit - self.used) // 2 // page)

        @sa.event.listens_for(db.engine, "connect")
        def _bound(dbapi_connection, _record) -> None:  # noqa: ANN001
            cur = dbapi_connection.cursor()
            cur.execute(f"PRAGMA max_page_count={int(self.db_pages)}")
            cur.close()

        db.engine.dispose()  # the connections made before (the migrations) take the bound when reopened

    def exceeded(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the temporary database reaching its bound."""
        seen: list[BaseException | None] = [exc]
        while seen:
            e = seen.pop()
            if e is None:
                continue
            if "database or disk is full" in str(e).lower() and self.db_pages is not None:
                return True
            seen += [getattr(e, "orig", None), e.__cause__]
        return False


def _started(pid: int) -> str:
    """The process's start time (Linux: clock ticks since boot; elsewhere empty)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]
    except (OSError, ValueError, IndexError):
        return ""


def _alive(pid: int, started: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not started or _started(pid) in ("", started)  # a reused pid is another process


def sweep(base: Path | None = None) -> int:
    """Remove directories a killed verify left behind (marked, owned by this user, their
    process gone); the count removed."""
    base = Path(base or tempfile.gettempdir())
    removed = 0
    for d in base.glob(PREFIX + "*"):
        try:
            if d.is_symlink() or not d.is_dir() or d.stat().st_uid != os.getuid():
                continue
            pid_text, _, started = (d / MARK).read_text().strip().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            continue  # not marked (or being made): not ours to judge
        if not _alive(pid, started):
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
    return removed


@contextmanager
def verify_tempdir() -> Iterator[Path]:
    """A marked temporary directory, removed on the way out whatever happens (the ones killed
    verifies left behind are swept first)."""
    sweep()
    d = Path(tempfile.mkdtemp(prefix=PREFIX))
    try:
        (d / MARK).write_text(f"{os.getpid()} {_started(os.getpid())}\n")
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
