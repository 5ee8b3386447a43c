"""engines sql reader function: cells cut at the caller's --max-width, queries run from a string refused

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 10:00:00

On PostgreSQL the reader function ``engines_sql_select`` is re-created by
``store.sql.readonly.setup_reader``: it cuts a cell at the number of characters the caller sets
in ``engines.cell_chars`` (``engines sql --max-width``; 0 there means whole values up to
``store.sql.readonly.MAX_CELL_CHARS``), shares ``ROW_CHARS`` between the cells of a long row, and
refuses the functions that run a query given as a string (``query_to_xml`` and its kin,
``cursor_to_xml``, ``ts_stat``, ``ts_rewrite``), in which an advisory-lock call could hide
(issue 31). A database still at 0009 keeps cutting every cell at 65,536 characters.
SQLite: nothing to do.
"""

from __future__ import annotations

import sys

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from store.sql.readonly import FIX_HINT, setup_reader

    problem = setup_reader(op.get_bind())
    if problem is not None:
        print(f"note: engines sql stays disabled on this database ({problem}); {FIX_HINT}", file=sys.stderr)


def downgrade() -> None:
    # The function stays: the one 0008 created is not kept in the code any more.
    pass
