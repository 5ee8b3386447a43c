"""The bring-your-own data (tests/data/byo) and the small run and gold builders the convention tests share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner
from cli.main import app
from store.db import open_database
from store.models import Benchmark


DATA = Path(__file__).resolve().parents[1] / "data" / "byo"


@pytest.fixture
def cli(sqlite_url):
    runner = CliRunner()

    def _run(*args, input=None):  # noqa: A002 - click's name
        return runner.invoke(app, [str(a) for a in args], env={"ENGINES_DATABASE_URL": sqlite_url}, input=input)

    _run.url = sqlite_url
    return _run


def _ok(res):
    assert res.exit_code == 0, res.output
    return res


def _error(res, *needles):
    assert res.exit_code != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _example(cli):
    _ok(cli("corpus", "load", DATA / "corpus.jsonl", "--name", "divisors", "--revision", "028964f2c6f0"))
    _ok(cli("bench", "load", DATA / "beir", "--name", "byo-divisors"))


def _doc(cli, *extra):
    res = _ok(cli("score", "--bench", "byo-divisors", "--json", "-", *extra))
    return json.loads(res.stdout), res


def _row(doc, sid):
    return next(s for s in doc["systems"] if s["id"] == sid)


def _gold(cli) -> dict[str, str]:
    db = open_database(cli.url)
    try:
        with db.session() as s:
            b = s.execute(sa.select(Benchmark).where(Benchmark.name == "byo-divisors")).scalar_one()
            return {q.qid: q.gold_units[0].names[0].name for q in b.queries}
    finally:
        db.dispose()
