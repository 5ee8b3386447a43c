"""crawler work state (work_leases.status/note) and the read-only views v_answers, v_hits

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 12:00:00

The views are for people inspecting the cache with ``engines sql`` (README, "Crawling").
They are plain portable SQL (SQLite and PostgreSQL) and are not part of the models.
One answer appears once per benchmark query with the same text (query texts are shared).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

V_ANSWERS = """
CREATE VIEW v_answers AS
SELECT c.engine AS engine,
       c.label AS config,
       a.config_id AS config_id,
       a.epoch AS epoch,
       b.name AS benchmark,
       q.qid AS query_id,
       q.style AS style,
       a.query_text AS query_text,
       a.n_returned AS n_returned,
       a.fetched_at AS fetched_at,
       a.latency_ms AS latency_ms,
       a.exchange_id AS exchange_id,
       a.parser_version AS parser_version,
       a.id AS answer_id
FROM answers a
JOIN engine_configs c ON c.id = a.config_id
LEFT JOIN queries q ON q.query_sha256 = a.query_sha256
LEFT JOIN benchmarks b ON b.id = q.benchmark_id
"""

V_HITS = """
CREATE VIEW v_hits AS
SELECT c.engine AS engine,
       c.label AS config,
       a.config_id AS config_id,
       a.epoch AS epoch,
       b.name AS benchmark,
       q.qid AS query_id,
       a.query_text AS query_text,
       h.rank AS rank,
       h.name AS returned_name,
       h.normalized_name AS normalized_name,
       d.full_name AS resolved_full_name,
       h.resolution AS resolution,
       a.fetched_at AS fetched_at,
       a.id AS answer_id
FROM hits h
JOIN answers a ON a.id = h.answer_id
JOIN engine_configs c ON c.id = a.config_id
LEFT JOIN declarations d ON d.id = h.declaration_id
LEFT JOIN queries q ON q.query_sha256 = a.query_sha256
LEFT JOIN benchmarks b ON b.id = q.benchmark_id
"""


def upgrade() -> None:
    with op.batch_alter_table("work_leases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("status", sa.String(length=20), server_default="leased", nullable=False))
        batch_op.add_column(sa.Column("note", sa.Text(), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_work_leases_config_id_epoch_status_leased_until"),
            ["config_id", "epoch", "status", "leased_until"],
            unique=False,
        )
    op.execute(V_ANSWERS)
    op.execute(V_HITS)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS v_hits")
    op.execute("DROP VIEW IF EXISTS v_answers")
    with op.batch_alter_table("work_leases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_work_leases_config_id_epoch_status_leased_until"))
        batch_op.drop_column("note")
        batch_op.drop_column("status")
