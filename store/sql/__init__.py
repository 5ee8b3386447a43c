"""``engines sql``: one read-only query against the cache, safe to hand to colleagues.

- :mod:`store.sql.runner`: runs the query (one statement, a query keyword first, bounded
  rows, cells and time) and says what was refused;
- :mod:`store.sql.readonly`: where the protection lives, in the database: the
  ``engines_reader`` role and its security-definer function on PostgreSQL (set up by
  migrations 0004 and 0008 and ``engines db reader``), a read-only connection with an
  authorizer on SQLite.
"""

from store.sql.readonly import FIX_HINT, FUNCTION_SIG, READER_ROLE, setup_reader
from store.sql.runner import EXIT_REFUSED, Refused, check_timeout, run_query

__all__ = ["EXIT_REFUSED", "FIX_HINT", "FUNCTION_SIG", "READER_ROLE", "Refused", "check_timeout", "run_query",
           "setup_reader"]
