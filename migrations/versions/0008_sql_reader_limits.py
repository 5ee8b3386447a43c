"""engines sql reader function: refuses lock, notify and sleep calls, cuts long cells, lock_timeout

Revision ID: 0008
Revises: 0006 (to be re-chained after 0007)
Create Date: 2026-12-02 03:30:00

On PostgreSQL the reader function ``engines_sql_select`` (migration 0004, owned by the
``engines_reader`` role) is re-created by ``store.sql.readonly.setup_reader``: it refuses a query
that calls ``pg_advisory_*`` / ``pg_try_advisory_*``, ``pg_notify`` or ``pg_sleep*``
(functions granted to PUBLIC, with which a reader could hold up other sessions, issue 21),
runs with ``lock_timeout`` set, and cuts cells longer than ``store.sql.readonly.CELL_CHARS``
characters so the client never receives a gigabyte in one row. SQLite: nothing to do.
"""

from __future__ import annotations

import sys

from alembic import op

revision = "0008"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from store.sql import FIX_HINT, setup_reader

    problem = setup_reader(op.get_bind())
    if problem is not None:
        print(f"note: engines sql stays disabled on this database ({problem}); {FIX_HINT}", file=sys.stderr)


def downgrade() -> None:
    # The stricter function stays: the one 0004 created is not kept in the code any more.
    pass
