"""engines_reserve: the spacing T/n counts from the newest recorded send, pending included

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 13:40:00

Version 0005 counted a granted send that had not left yet as leaving *now* for the
spacing as well as for the window. With several request loops (or workers) sharing a
host at a high limit, every grant then held all the others back until its departure was
written: a third of two workers' reserve calls were refused at concurrency 1, more than
half at concurrency 8, each a round trip and a sleep. The window (n per T + margin, the
hard bound) still counts pending sends as leaving now; the spacing (smoothing) counts
from the newest recorded time, as ``crawler.pacing.window_span`` does.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _load_0005():
    path = Path(__file__).with_name("0005_pg_reserve_function.py")
    spec = importlib.util.spec_from_file_location("engines_migration_0005", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_V5 = _load_0005()  # the function as 0005 created it; this revision changes one line of it

_PENDING_AS_NOW_FOR_BOTH = "SELECT count(*), min(a.adj), max(a.adj) INTO v_count, v_lo, v_hi FROM ("
_PENDING_AS_NOW_FOR_WINDOW = "SELECT count(*), min(a.adj), max(a.sent_at) INTO v_count, v_lo, v_hi FROM ("
_ADJ = "THEN p_now ELSE l.sent_at END AS adj\n"
_ADJ_AND_RAW = "THEN p_now ELSE l.sent_at END AS adj, l.sent_at\n"


def _function() -> str:
    body = _V5.FUNCTION
    assert body.count(_PENDING_AS_NOW_FOR_BOTH) == 1 and body.count(_ADJ) == 1
    return body.replace(_PENDING_AS_NOW_FOR_BOTH, _PENDING_AS_NOW_FOR_WINDOW).replace(_ADJ, _ADJ_AND_RAW)


FUNCTION = _function()


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_V5.FUNCTION)
