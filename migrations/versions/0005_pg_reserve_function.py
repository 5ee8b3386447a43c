"""one round trip per send slot on PostgreSQL: the function engines_reserve

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 11:10:00

Workers sharing a PostgreSQL database take send slots one at a time under the host's
``host_state`` row lock. Done from the client, that lock was held across five round trips
(lock, departures, window, insert, commit) and every GIL wait of a busy client process in
between, so a second worker added nothing. ``engines_reserve`` does the same steps inside
the server in one call: write the caller's noted departures, count the last n sends
(pending ones as leaving now), decide, and insert the grant as pending. The decision is
``crawler.pacing.earliest_send_span``, line for line (tests compare the two).
SQLite needs none of this: one crawler per file decides in memory.
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SIGNATURE = ("engines_reserve(text, double precision, integer, double precision, double precision, "
             "double precision, double precision, double precision, text, double precision[])")

FUNCTION = """
CREATE OR REPLACE FUNCTION engines_reserve(
    p_host text, p_now double precision, p_n integer, p_period double precision, p_margin double precision,
    p_pending_max double precision, p_credit_sent double precision, p_credit double precision,
    p_worker text, p_departures double precision[]
) RETURNS TABLE (granted boolean, earliest double precision, outage boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_paused double precision;
    v_since double precision;
    v_outages integer;
    v_count integer;
    v_lo double precision;
    v_hi double precision;
    v_base double precision;
    v_t double precision;
    i integer;
BEGIN
    SELECT h.paused_until, h.outage_since, h.outage_count INTO v_paused, v_since, v_outages
        FROM host_state h WHERE h.host = p_host FOR UPDATE;
    -- The caller's sends that already left: (granted, departed) pairs.
    IF p_departures IS NOT NULL THEN
        FOR i IN 1 .. coalesce(array_length(p_departures, 1), 0) / 2 LOOP
            UPDATE send_log SET sent_at = p_departures[2 * i], pending = false
                WHERE host = p_host AND sent_at = p_departures[2 * i - 1];
        END LOOP;
    END IF;
    SELECT count(*), min(a.adj), max(a.adj) INTO v_count, v_lo, v_hi FROM (
        SELECT CASE WHEN l.pending AND l.sent_at > p_now - p_pending_max AND l.sent_at < p_now
                    THEN p_now ELSE l.sent_at END AS adj
        FROM (SELECT s.sent_at, s.pending FROM send_log s WHERE s.host = p_host
              ORDER BY s.sent_at DESC LIMIT p_n) l
    ) a;
    v_t := coalesce(v_paused, 0.0);
    IF v_count > 0 AND v_hi IS NOT NULL THEN
        v_base := v_hi;
        IF p_credit_sent IS NOT NULL AND p_credit_sent = v_base THEN
            v_base := v_base - p_credit;
        END IF;
        v_t := greatest(v_t, v_base + p_period / p_n);
        IF v_count >= p_n AND v_lo IS NOT NULL THEN
            v_t := greatest(v_t, v_lo + p_period + p_margin);
        END IF;
    END IF;
    IF v_t > p_now THEN
        RETURN QUERY SELECT false, v_t, (v_since IS NOT NULL OR coalesce(v_outages, 0) > 0);
        RETURN;
    END IF;
    INSERT INTO send_log (host, sent_at, worker, pending) VALUES (p_host, p_now, p_worker, true);
    RETURN QUERY SELECT true, p_now, (v_since IS NOT NULL OR coalesce(v_outages, 0) > 0);
END
$fn$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")
