"""reparse, outages and epochs: superseded answers, dropped items, host outage state, epoch labels

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 04:20:00

- ``answers.superseded`` (``engines reparse`` keeps old answers, marked superseded) and
  ``answers.dropped_items``; the unique constraint on (config, text, epoch) becomes a
  partial unique index over current (not superseded) answers.
- ``parse_outcomes.dropped_items`` / ``drop_reason``: items a tolerant parse dropped.
- ``host_state.outage_since`` / ``outage_reason`` / ``outage_count``: an outage pauses
  the host with growing backoff; every worker and the next run see it.
- ``epochs``: a label and start time per configuration epoch (drift studies).
- The views ``v_answers`` and ``v_hits`` show current answers only.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
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
       a.dropped_items AS dropped_items,
       a.fetched_at AS fetched_at,
       a.latency_ms AS latency_ms,
       a.exchange_id AS exchange_id,
       a.parser_version AS parser_version,
       a.id AS answer_id
FROM answers a
JOIN engine_configs c ON c.id = a.config_id
LEFT JOIN queries q ON q.query_sha256 = a.query_sha256
LEFT JOIN benchmarks b ON b.id = q.benchmark_id
WHERE NOT a.superseded
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
       a.parser_version AS parser_version,
       a.id AS answer_id
FROM hits h
JOIN answers a ON a.id = h.answer_id
JOIN engine_configs c ON c.id = a.config_id
LEFT JOIN declarations d ON d.id = h.declaration_id
LEFT JOIN queries q ON q.query_sha256 = a.query_sha256
LEFT JOIN benchmarks b ON b.id = q.benchmark_id
WHERE NOT a.superseded
"""


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS v_hits")
    op.execute("DROP VIEW IF EXISTS v_answers")
    with op.batch_alter_table("answers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("superseded", sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.add_column(sa.Column("dropped_items", sa.Integer(), server_default="0", nullable=False))
        batch_op.drop_constraint("uq_answers_config_id_query_sha256_epoch", type_="unique")
    op.create_index(
        "uq_answers_current", "answers", ["config_id", "query_sha256", "epoch"], unique=True,
        sqlite_where=sa.text("superseded = 0"), postgresql_where=sa.text("NOT superseded"),
    )
    with op.batch_alter_table("parse_outcomes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dropped_items", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("drop_reason", sa.Text(), nullable=True))
    with op.batch_alter_table("host_state", schema=None) as batch_op:
        batch_op.add_column(sa.Column("outage_since", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("outage_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("outage_count", sa.Integer(), server_default="0", nullable=False))
    op.create_table(
        "epochs",
        sa.Column("config_id", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["config_id"], ["engine_configs.id"], name=op.f("fk_epochs_config_id_engine_configs")),
        sa.PrimaryKeyConstraint("config_id", "epoch", name=op.f("pk_epochs")),
    )
    op.execute(V_ANSWERS)
    op.execute(V_HITS)


def downgrade() -> None:
    import importlib

    old = importlib.import_module("migrations.versions.0002_crawler_state_and_views")
    op.execute("DROP VIEW IF EXISTS v_hits")
    op.execute("DROP VIEW IF EXISTS v_answers")
    op.drop_table("epochs")
    with op.batch_alter_table("host_state", schema=None) as batch_op:
        batch_op.drop_column("outage_count")
        batch_op.drop_column("outage_reason")
        batch_op.drop_column("outage_since")
    with op.batch_alter_table("parse_outcomes", schema=None) as batch_op:
        batch_op.drop_column("drop_reason")
        batch_op.drop_column("dropped_items")
    op.execute("DELETE FROM answers WHERE superseded")  # the old schema has no place for them
    op.drop_index("uq_answers_current", table_name="answers")
    with op.batch_alter_table("answers", schema=None) as batch_op:
        batch_op.create_unique_constraint("uq_answers_config_id_query_sha256_epoch", ["config_id", "query_sha256", "epoch"])
        batch_op.drop_column("dropped_items")
        batch_op.drop_column("superseded")
    op.execute(old.V_ANSWERS)
    op.execute(old.V_HITS)
