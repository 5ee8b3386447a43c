"""One crawler per SQLite file: an exclusive ``flock`` next to the database file."""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from crawler.options import EXIT_ALREADY_CRAWLING
from store.errors import UserError


class AlreadyCrawling(UserError):
    exit_code = EXIT_ALREADY_CRAWLING


class CrawlLock:
    """An exclusive lock file next to a SQLite cache: one crawler per file.

    ``flock`` is released by the kernel when the process dies (even ``kill -9``), so a
    stale file never blocks a restart; a crawl that ends removes it (and .gitignore
    ignores ``*.crawl.lock``).
    """

    def __init__(self, db_path: str) -> None:
        self.path = Path(db_path + ".crawl.lock")
        self.fd: int | None = None

    def acquire(self) -> None:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "another process"
                os.close(fd)
                raise AlreadyCrawling(
                    f"already crawling: {holder} holds {self.path}; wait for it to finish "
                    "(one crawler per SQLite file; use PostgreSQL for several workers)"
                ) from None
            # The file is removed at release: a lock taken on a file the previous holder had
            # just removed is a lock on nothing; take it again on the file now at the path.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
        self.fd = fd

    def release(self) -> None:
        """Remove the lock file, then unlock: removed while still held, so no other crawler
        can hold a lock on the removed file while a third creates a new one."""
        if self.fd is not None:
            try:
                self.path.unlink()
            except OSError:
                pass  # a read-only directory: the file stays, unlocked, as before
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def sqlite_path(db) -> str | None:
    if db.dialect != "sqlite":
        return None
    path = db.engine.url.database
    return None if not path or path == ":memory:" else str(Path(path).resolve())

