"""The limits of ``engines sql`` and how rows are kept: cells cut at ``--max-width`` (each
cut counted), batches bounded by bytes, the whole result cut at :data:`RESULT_BYTES`.

Used by the runners (:mod:`store.sql.backends`) inside the worker process
(:mod:`store.sql.worker`); the command prints what they kept.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from store.errors import UserError
from store.sql.readonly import CELL_CHARS, MAX_CELL_CHARS, ROW_CHARS  # noqa: F401 (the reader function's cuts)

EXIT_REFUSED = 2
# Limits (README, "engines sql"): --timeout at most MAX_TIMEOUT seconds (a larger value is
# refused); a value SQLite computes at most MAX_VALUE_BYTES (larger: an error naming the
# limit); PostgreSQL's reader function cuts a cell at --max-width characters (at most
# MAX_CELL_CHARS, also when --max-width is 0) and a long row's cells so the row stays near
# ROW_CHARS; rows are fetched in batches of about BATCH_BYTES (one row at a time when rows
# are large) and kept until they hold RESULT_BYTES, then the result is cut with a note.
# The worker process may use WORKER_MEMORY bytes more than the command had when it started.
MAX_TIMEOUT = 600.0
MAX_VALUE_BYTES = 16 * 2**20
RESULT_BYTES = 64 * 2**20
BATCH_BYTES = 4 * 2**20
MAX_BATCH_ROWS = 1000
WORKER_MEMORY = 1 * 2**30


class Refused(UserError):
    exit_code = EXIT_REFUSED


def cut_note(cells_cut: int, max_width: int) -> str | None:
    """The one stderr line counting the cut values (None: nothing was cut)."""
    if not cells_cut:
        return None
    what = "value" if cells_cut == 1 else "values"
    if max_width:
        return f"{cells_cut:,} {what} cut at --max-width {max_width}; --max-width 0 shows whole values"
    return f"{cells_cut:,} {what} cut at {MAX_CELL_CHARS:,} characters, the most engines sql keeps of one value"


def _size(v: Any) -> int:
    if isinstance(v, (str, bytes)):
        return sys.getsizeof(v)
    return 2 * len(repr(v)) if isinstance(v, (list, dict, tuple)) else 16


@dataclass
class Kept:
    """Rows kept so far; ``emit`` (in the worker) receives them in batches of ~BATCH_BYTES."""

    max_rows: int
    max_width: int
    emit: Callable[[list[tuple]], None] | None = None
    rows: list[tuple] = field(default_factory=list)
    count: int = 0
    cells_cut: int = 0
    size: int = 0
    cut: bool | str = False
    _pending: list[tuple] = field(default_factory=list)
    _pending_size: int = 0

    def cell(self, v: Any) -> Any:
        """A cell as kept: text longer than --max-width cut (and counted), a blob by its length."""
        if isinstance(v, memoryview):
            v = bytes(v)
        if isinstance(v, bytes):
            return f"<{len(v)} bytes>"
        if isinstance(v, str):
            limit = self.max_width or MAX_CELL_CHARS
            if len(v) > limit:
                self.cells_cut += 1
                return v[: max(limit - 1, 0)] + "…"
        return v

    def add(self, row: Iterable[Any]) -> bool:
        """Keep one row; False when the result is full (``cut`` says why)."""
        if self.count == self.max_rows:
            self.cut = True
            return False
        r = tuple(self.cell(v) for v in row)
        n = sum(_size(v) for v in r)
        self.count += 1
        self.size += n
        self._pending.append(r)
        self._pending_size += n
        if self._pending_size >= BATCH_BYTES:
            self.flush()
        if self.size > RESULT_BYTES:
            self.cut = (f"cut at {self.count:,} rows: the result passed {RESULT_BYTES // 2**20} MiB, the most "
                        "engines sql keeps (select fewer or shorter columns)")
            return False
        return True

    def flush(self) -> None:
        if self.emit is None:
            self.rows.extend(self._pending)
        elif self._pending:
            self.emit(self._pending)
        self._pending, self._pending_size = [], 0


def batch_rows(biggest: int) -> int:
    """How many rows the next fetch asks for, after rows of up to ``biggest`` bytes."""
    return max(1, min(MAX_BATCH_ROWS, BATCH_BYTES // max(biggest, 1)))
