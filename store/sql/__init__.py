"""``engines sql``: one read-only query against the cache, safe to hand to colleagues.

- :mod:`store.sql.runner`: the entry (one statement, a query keyword first, the timeout
  checked) that runs the query in the worker process;
- :mod:`store.sql.worker`: the worker process that makes ``--timeout`` a wall-clock bound;
- :mod:`store.sql.backends`: the two runners inside it, SQLite and PostgreSQL;
- :mod:`store.sql.fetch`: the limits and how rows are kept (cells cut, batches, the result cut);
- :mod:`store.sql.readonly`: where the protection lives, in the database: the
  ``engines_reader`` role and its security-definer function on PostgreSQL (set up by
  migrations 0004, 0008, 0010 and ``engines db reader``), a read-only connection with an
  authorizer on SQLite.
"""

from store.sql.fetch import EXIT_REFUSED, Refused, cut_note
from store.sql.readonly import FIX_HINT, FUNCTION_SIG, READER_ROLE, setup_reader
from store.sql.runner import check_timeout, run_query

__all__ = ["EXIT_REFUSED", "FIX_HINT", "FUNCTION_SIG", "READER_ROLE", "Refused", "check_timeout", "cut_note",
           "run_query", "setup_reader"]
