"""``engines status`` output (issue 34 item 9): piped tables are never cut to 80 columns,
``--json`` and ``--tsv`` like ``engines sql``; names with terminal escapes shown escaped
(issue 31, "a name is text")."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli.main import app
from store.db import open_database
from store.models import Benchmark, EngineConfig

LABEL = "loogle (" + "very long label " * 8 + "\x1b]0;owned\x07\u202e)"


def _seed(url: str) -> None:
    db = open_database(url)
    try:
        with db.session() as s:
            s.add(Benchmark(name="bench\ttab", task="theorem-search", source_file="f", sha256="x" * 64, meta={}))
            s.add(EngineConfig(engine="loogle", endpoint_version="1", params={}, config_hash="h" * 64, label=LABEL))
            s.commit()
    finally:
        db.dispose()


def _status(url: str, *args: str):
    return CliRunner().invoke(app, ["status", *args], env={"ENGINES_DATABASE_URL": url, "COLUMNS": "80"})


def test_piped_status_is_not_cut_and_names_are_escaped(sqlite_url: str) -> None:
    _seed(sqlite_url)
    res = _status(sqlite_url)
    assert res.exit_code == 0, res.output
    shown = "loogle (" + "very long label " * 8 + "\\x1b]0;owned\\x07\\u202e)"
    row = next(ln for ln in res.stdout.splitlines() if "loogle" in ln)
    assert shown in row and "bench\\ttab" in row and "0/0" in row
    assert "\x1b" not in res.stdout and "\u202e" not in res.stdout


def test_status_json_and_tsv(sqlite_url: str) -> None:
    _seed(sqlite_url)
    res = _status(sqlite_url, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["columns"] == ["config", "benchmark", "epoch", "answered", "failed", "pending", "last success",
                              "rate", "ETA"]
    assert doc["rows"][0][:6] == [LABEL, "bench\ttab", 0, "0/0", 0, 0]
    assert doc["sampled"] == {"columns": ["sample subset", "benchmark", "config", "epoch", "answered"], "rows": []}
    res = _status(sqlite_url, "--tsv")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "config\tbenchmark\tepoch\tanswered\tfailed\tpending\tlast success\trate\tETA"
    assert lines[1].split("\t")[:4] == ["loogle (" + "very long label " * 8 + "\\x1b]0;owned\\x07\\u202e)",
                                        "bench\\ttab", "0", "0/0"]
    assert len(lines) == 2
    assert _status(sqlite_url, "--tsv", "--json").exit_code == 1
