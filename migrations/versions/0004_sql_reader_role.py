"""read-only role for engines sql (PostgreSQL): engines_reader and its query function

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 05:00:00

No table changes. On PostgreSQL, ``store.reader.setup_reader`` creates the
cluster-global role ``engines_reader`` when it is missing (never drops it), grants it
SELECT on this schema's tables and views, and creates the SECURITY DEFINER function
``engines_sql_select`` it owns. Without the right to create roles the migration still
succeeds and ``engines sql`` refuses with a line that says how to fix it.
"""

from __future__ import annotations

import sys

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from store.reader import FIX_HINT, setup_reader

    bind = op.get_bind()
    problem = setup_reader(bind)
    if problem is not None:
        print(f"note: engines sql stays disabled on this database ({problem}); {FIX_HINT}", file=sys.stderr)


def downgrade() -> None:
    from store.reader import FUNCTION_SIG

    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION_SIG}")
