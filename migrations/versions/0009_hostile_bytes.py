"""exchanges.body_truncated; heal what hostile servers left in a database (issue 21)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 03:30:00

- ``exchanges.body_truncated``: the body was longer than ``--max-body`` and only its
  first bytes are archived (exported with ``WARC-Truncated: length``).
- A pause stored from an untrusted ``Retry-After`` (``1e400`` stored Inf, which made
  every later ``crawl`` and ``status`` raise OverflowError; ``99999999999`` paused a
  host until the year 5195) is capped at 24 hours from this upgrade, the longest pause
  the crawler now stores (``crawler.pacing.PAUSE_MAX``).
- A ``--url`` with credentials (``http://alice:PW@host``) put them into ``host_state``
  and ``send_log``: the host keys lose their ``user:password@`` part (rows of the
  same host merge, the longer pause wins).

Bodies archived without a parse outcome that crashed the parser (a body nested 200,000
deep) need no change here: the start-up recovery now records such a body as a failed
parse outcome instead of raising.
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

PAUSE_MAX = 86400.0  # crawler.pacing.PAUSE_MAX when this was written


def upgrade() -> None:
    with op.batch_alter_table("exchanges", schema=None) as batch_op:
        batch_op.add_column(sa.Column("body_truncated", sa.Boolean(), server_default=sa.false(), nullable=False))
    bind = op.get_bind()
    cap = time.time() + PAUSE_MAX
    # Inf (and PostgreSQL's NaN, which sorts above every number) compare greater than cap.
    bind.execute(sa.text("UPDATE host_state SET paused_until = :cap WHERE paused_until > :cap"), {"cap": cap})
    rows = bind.execute(sa.text("SELECT host, paused_until FROM host_state WHERE host LIKE '%@%'")).all()
    for host, paused in rows:
        bare = host.rpartition("@")[2]
        other = bind.execute(sa.text("SELECT paused_until FROM host_state WHERE host = :h"), {"h": bare}).first()
        if other is None:
            bind.execute(sa.text("UPDATE host_state SET host = :bare WHERE host = :h"), {"bare": bare, "h": host})
            continue
        if paused is not None and (other[0] is None or paused > other[0]):
            bind.execute(sa.text("UPDATE host_state SET paused_until = :p WHERE host = :h"), {"p": paused, "h": bare})
        bind.execute(sa.text("DELETE FROM host_state WHERE host = :h"), {"h": host})
    for (host,) in bind.execute(sa.text("SELECT DISTINCT host FROM send_log WHERE host LIKE '%@%'")).all():
        bind.execute(sa.text("UPDATE send_log SET host = :bare WHERE host = :h"),
                     {"bare": host.rpartition("@")[2], "h": host})


def downgrade() -> None:
    with op.batch_alter_table("exchanges", schema=None) as batch_op:
        batch_op.drop_column("body_truncated")
