"""Issue 21, databases already hurt: the upgrade to 0009 heals what today's code stored
(an Inf or year-5195 pause, a password in host_state / send_log), on both backends."""

from __future__ import annotations

import math
import time

import sqlalchemy as sa
from alembic import command
from typer.testing import CliRunner

from cli.main import app
from store.db import _alembic_config, create_db_engine, open_database
from store.models import Exchange, HostState, SendLog


def _hurt_database(url: str) -> None:
    """A database at revision 0006 holding what hostile servers left there."""
    engine = create_db_engine(url)
    try:
        command.upgrade(_alembic_config(engine), "0006")
        now = time.time()
        with engine.begin() as conn:
            ins = sa.text("INSERT INTO host_state (host, paused_until, updated_at, outage_count) "
                          "VALUES (:h, :p, :u, 0)")
            conn.execute(ins, [
                {"h": "127.0.0.1:1", "p": math.inf, "u": "2026-12-01 00:00:00"},  # Retry-After: 1e400
                {"h": "127.0.0.1:2", "p": 99999999999.0 + now, "u": "2026-12-01 00:00:00"},  # year 5195
                {"h": "127.0.0.1:3", "p": now + 60, "u": "2026-12-01 00:00:00"},  # a sane pause
                {"h": "alice:S3cretPW@127.0.0.1:4", "p": now + 120, "u": "2026-12-01 00:00:00"},
                {"h": "bob:Other@127.0.0.1:3", "p": now + 600, "u": "2026-12-01 00:00:00"},  # merges into :3
            ])
            conn.execute(sa.text("INSERT INTO send_log (host, sent_at, worker, pending) VALUES (:h, :t, 'w', false)"),
                         [{"h": "alice:S3cretPW@127.0.0.1:4", "t": now - i} for i in range(3)]
                         + [{"h": "127.0.0.1:3", "t": now}])
    finally:
        engine.dispose()


def test_the_upgrade_caps_absurd_pauses_and_strips_credentials(any_db_url: str, monkeypatch) -> None:
    _hurt_database(any_db_url)
    before = time.time()
    db = open_database(any_db_url)  # upgrades to head
    try:
        with db.session() as s:
            state = dict(s.execute(sa.select(HostState.host, HostState.paused_until)).all())
            sends = sorted(h for (h,) in s.execute(sa.select(SendLog.host)))
            assert s.scalar(sa.select(sa.func.count()).select_from(Exchange)) == 0
    finally:
        db.dispose()
    assert set(state) == {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"}
    for host in ("127.0.0.1:1", "127.0.0.1:2"):
        assert before + 86400 - 1 <= state[host] <= time.time() + 86400 + 1, (host, state[host])
    assert state["127.0.0.1:3"] > before + 500  # merged: the longer pause wins
    assert sends == ["127.0.0.1:3"] + ["127.0.0.1:4"] * 3
    monkeypatch.setenv("ENGINES_DATABASE_URL", any_db_url)
    res = CliRunner().invoke(app, ["status"])  # before: OverflowError on the Inf pause
    assert res.exit_code == 0, res.output
    assert "S3cretPW" not in res.output
