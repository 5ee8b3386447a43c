"""``engines sql`` runs its query in a worker process, so ``--timeout`` is a wall-clock
bound and memory a hard one, on both backends.

The worker (forked where the platform allows it) caps its address space at
``WORKER_MEMORY`` above what it started with, runs the query through
:mod:`store.sql.backends` and sends the kept rows back in batches of about ``BATCH_BYTES``
over a pipe. The command waits at most ``--timeout`` plus :data:`GRACE` seconds: a query
still running then (SQLite inside one long C call, e.g. ``instr()`` on long strings; a
PostgreSQL backend that does not look at its ``statement_timeout`` while it builds a
gigabyte) has its worker killed and, on PostgreSQL, its server process terminated
(``pg_terminate_backend``), so the locks it holds go too. Errors come back as one line.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
import traceback
from typing import Any

from store.errors import DatabaseError, UserError
from store.sql.fetch import WORKER_MEMORY, Kept, Refused

GRACE = 0.5  # after --timeout: the worker's own stop (progress handler, statement_timeout) comes first
_ERRORS = {"Refused": Refused, "DatabaseError": DatabaseError}


def _cap_memory() -> None:
    try:
        import resource

        with open("/proc/self/status", encoding="ascii") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + WORKER_MEMORY, resource.RLIM_INFINITY))
    except (ImportError, OSError, StopIteration, ValueError):
        pass  # no /proc or no setrlimit: the deadline still holds


def _work(send: Any, backend: str, target: Any, query: str, opts: dict) -> None:
    """The worker's body: every outcome is one message; the rows go in batches before it."""
    from store.sql.backends import run_postgres, run_sqlite

    _cap_memory()
    kept = Kept(opts["max_rows"], opts["max_width"], emit=lambda rows: send.send(("rows", rows)))
    try:
        if backend == "sqlite":
            cols, _, cut = run_sqlite(target, query, timeout=opts["timeout"], max_rows=opts["max_rows"], kept=kept)
        else:
            cols, _, cut = run_postgres(target, query, timeout=opts["timeout"], max_rows=opts["max_rows"], kept=kept,
                                        on_pid=lambda pid: send.send(("pid", pid)))
        send.send(("done", cols, cut, kept.cells_cut))
    except UserError as exc:
        send.send(("error", type(exc).__name__, exc.message, exc.exit_code))
    except MemoryError:
        send.send(("error", "UserError", "the query needs more memory than engines sql allows; select fewer or "
                   "shorter columns (substr(x, 1, N), length(x)) or fewer rows", 1))
    except BaseException:  # noqa: BLE001 - a bug: its traceback goes to the command
        send.send(("bug", traceback.format_exc()))
    finally:
        send.close()


def _context() -> Any:
    return mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


def run_in_worker(backend: str, target: Any, query: str, *, timeout: float, max_rows: int, max_width: int,
                  url: str | None = None) -> tuple[list[str], list[tuple], bool | str, int]:
    """(columns, kept rows, cut, cells cut) of ``query``, run in a worker process that is
    killed at ``timeout`` + GRACE seconds (PostgreSQL: its server process too, via ``url``)."""
    if backend == "postgresql":
        import psycopg  # noqa: F401 - imported once here, not in every worker

    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    opts = {"timeout": timeout, "max_rows": max_rows, "max_width": max_width}
    proc = ctx.Process(target=_work, args=(send, backend, target, query, opts), daemon=True)
    deadline = time.monotonic() + timeout + GRACE
    proc.start()
    send.close()
    rows: list[tuple] = []
    pid = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not recv.poll(left):
                _stop(proc, url, pid)
                from store.sql.backends import timed_out

                raise timed_out(timeout)
            try:
                msg = recv.recv()
            except EOFError:
                proc.join(1)
                raise UserError(f"the query's process ended without an answer (exit {proc.exitcode}); "
                                "the query may need more memory than engines sql allows") from None
            if msg[0] == "rows":
                rows.extend(msg[1])
            elif msg[0] == "pid":
                pid = msg[1]
            elif msg[0] == "done":
                return msg[1], rows, msg[2], msg[3]
            elif msg[0] == "error":
                raise _ERRORS.get(msg[1], UserError)(msg[2], exit_code=msg[3])
            else:
                raise RuntimeError(f"engines sql's worker failed:\n{msg[1]}")
    finally:
        recv.close()
        if proc.is_alive():
            proc.kill()
        proc.join(5)


def _stop(proc: Any, url: str | None, pid: int | None) -> None:
    """Kill the worker; on PostgreSQL end its server process too (waiting at most a second)."""
    proc.kill()
    if url is None or pid is None:
        return

    def terminate() -> None:
        try:
            import psycopg
            import sqlalchemy as sa

            u = sa.make_url(url).set(drivername="postgresql")
            dsn = u.render_as_string(hide_password=False)
            with psycopg.connect(dsn, connect_timeout=1, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        except Exception:  # noqa: BLE001 - best effort: the server ends it at statement_timeout anyway
            pass

    t = threading.Thread(target=terminate, daemon=True)
    t.start()
    t.join(1.0)
