"""The dense row as a user sees it (issue 22, item 9): no transformers "Loading weights"
bar in piped output, and a label that says what the queries were ("plain queries"), not
a cryptic "(none)"."""

from __future__ import annotations

import sqlalchemy as sa
from typer.testing import CliRunner

from tests.support.dense import MODEL, _slice_rows


def test_run_dense_is_quiet_when_piped_and_labels_plain_queries(sqlite_url, write_jsonl, tmp_path, monkeypatch):
    from benchmarks import shipped_path
    from cli.main import app
    from store.benchmarks import load_benchmark_file
    from store.corpus import load_corpus
    from store.db import open_database
    from store.models import EngineConfig

    monkeypatch.setenv("ENGINES_CACHE_DIR", str(tmp_path / "cache"))
    db = open_database(sqlite_url)
    try:
        load_benchmark_file(db, shipped_path("MathlibQR.json"))
        load_corpus(db, str(write_jsonl(_slice_rows(40), "c.jsonl")), name="mini")
        res = CliRunner().invoke(app, ["run", "dense", "--db", sqlite_url, "--model", MODEL, "--bench", "mathlibqr",
                                       "--limit", "2", "--query-format", "none"])
        assert res.exit_code == 0, res.output
        assert "Loading weights" not in res.output and "it/s]" not in res.output, res.output
        with db.session() as s:
            label = s.execute(sa.select(EngineConfig.label)).scalar_one()
        assert label == f"dense:{MODEL} (plain queries)"
        assert "(none)" not in res.output
    finally:
        db.dispose()
