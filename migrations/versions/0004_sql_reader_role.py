"""read-only role for engines sql (PostgreSQL), pending sends in send_log

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 05:00:00

- ``send_log.pending``: a send slot granted but not yet left; other workers count it as
  leaving now until the sender corrects its time (pacing under load, issue 12).
- On PostgreSQL, ``store.sql.readonly.setup_reader`` creates the
cluster-global role ``engines_reader`` when it is missing (never drops it), grants it
SELECT on this schema's tables and views, and creates the SECURITY DEFINER function
``engines_sql_select`` it owns. Without the right to create roles the migration still
succeeds and ``engines sql`` refuses with a line that says how to fix it.
"""

from __future__ import annotations

import sys

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from store.sql import FIX_HINT, setup_reader

    with op.batch_alter_table("send_log", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pending", sa.Boolean(), server_default=sa.false(), nullable=False))
    bind = op.get_bind()
    problem = setup_reader(bind)
    if problem is not None:
        print(f"note: engines sql stays disabled on this database ({problem}); {FIX_HINT}", file=sys.stderr)


def downgrade() -> None:
    from store.sql import FUNCTION_SIG

    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION_SIG}")
    with op.batch_alter_table("send_log", schema=None) as batch_op:
        batch_op.drop_column("pending")
