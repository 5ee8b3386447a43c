"""Every bad input: one line on stderr, a non-zero exit, no traceback, nothing changed (issue 12).

The table runs the real entry point (``cli.main.run``, what the ``engines`` script
calls) in-process against one SQLite cache holding the shipped benchmarks and a tiny
corpus; the file's sha256 is compared before and after every case. A second test walks
``--help`` of every command and sub-command.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from cli import main as cli
from store.benchmarks import load_shipped
from store.corpus import load_corpus
from store.db import open_database

GOOD_ROWS = [{"name": ["Nat", "add_comm"], "kind": "theorem", "signature": "a + b = b + a"}]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad-inputs")
    corpus = d / "tiny.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in GOOD_ROWS), "utf-8")
    db = open_database(f"sqlite:///{d / 'cache.db'}")
    load_shipped(db)
    load_corpus(db, str(corpus), name="tiny")
    db.dispose()
    # Bad input files, one per case that needs one.
    (d / "notdb.db").write_text("hello, I am not a database\n")
    (d / "bad.json").write_text('[{"a": 1,\n  "b": ]\n')
    (d / "list.json").write_text("[1, 2, 3]\n")
    (d / "empty.json").write_text("")
    (d / "badline.jsonl").write_text(json.dumps(GOOD_ROWS[0]) + '\n{"name": ["Ā"], "kind": x}\n', "utf-8")
    (d / "noname.jsonl").write_text('{"kind": "theorem"}\n')
    (d / "notgz.jsonl.gz").write_bytes(b"plain text, not gzip\n")
    (d / "score.json").write_text("{not json")
    with gzip.open(d / "badgz.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write('{"name": ["A"]}\n{"name": ["B"], oops}\n')
    newer = d / "newer.db"
    db = open_database(f"sqlite:///{newer}")
    with db.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_future'")
    db.dispose()
    return d


def _sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _listing(d: Path) -> list[str]:
    # SQLite's -wal/-shm companions come and go with connections; the data is in the hashed file.
    # (The crawler's lock file is removed when a crawl ends, so it is not filtered.)
    return sorted(p.name for p in d.iterdir() if not p.name.endswith(("-wal", "-shm")))


B = ["--bench", "mathlibqr"]
PG_DOWN = "postgresql+psycopg://postgres@127.0.0.1:1/test"

# (id, argv, db: None = the seeded cache / a file name in the cache dir / a URL, text expected in the line)
CASES = [
    # databases
    ("db-not-sqlite", ["corpus", "list"], "notdb.db", "is not a SQLite database"),
    ("db-not-sqlite-sql", ["sql", "SELECT 1"], "notdb.db", "is not a SQLite database"),
    ("db-directory", ["corpus", "list"], ".", "is a directory"),
    ("db-missing-dir", ["corpus", "list"], "sqlite:////nonexistent-dir/x.db", "does not exist"),
    ("db-unparseable", ["corpus", "list"], "::not a url::", "cannot parse database URL"),
    ("db-mysql", ["corpus", "list"], "mysql://root@127.0.0.1/x", "unsupported database URL scheme"),
    ("db-pg-down", ["corpus", "list"], PG_DOWN, "cannot connect to database"),
    ("db-pg-down-sql", ["sql", "SELECT 1"], PG_DOWN, "cannot connect to database"),
    ("db-newer", ["bench", "list"], "newer.db", "newer than this version"),
    ("db-missing-sql", ["sql", "SELECT 1"], "absent.db", "no SQLite database at"),
    # crawl
    ("crawl-unknown-engine", ["crawl", "google", *B], None, "unknown engine 'google'"),
    ("crawl-no-engine", ["crawl", *B], None, "Missing argument"),
    ("crawl-rate-garbage", ["crawl", "leansearch", *B, "--rate", "fast"], None, "invalid rate 'fast'"),
    ("crawl-rate-zero", ["crawl", "leansearch", *B, "--rate", "0/1s"], None, "invalid rate '0/1s'"),
    ("crawl-rate-empty", ["crawl", "leansearch", *B, "--rate", "leansearch="], None, "invalid rate ''"),
    ("crawl-rate-other-engine", ["crawl", "leansearch", *B, "--rate", "loogle=3/30s"], None, "not being crawled"),
    ("crawl-deadline-word", ["crawl", "leansearch", *B, "--deadline", "soon"], None, "cannot parse duration 'soon'"),
    ("crawl-deadline-zero", ["crawl", "leansearch", *B, "--deadline", "0"], None, "must be positive"),
    ("crawl-deadline-negative", ["crawl", "leansearch", *B, "--deadline", "-5m"], None, "cannot parse duration"),
    ("crawl-limit-word", ["crawl", "leansearch", *B, "--limit", "abc"], None, "Invalid value for '--limit'"),
    ("crawl-limit-zero", ["crawl", "leansearch", *B, "--limit", "0"], None, "Invalid value for '--limit'"),
    ("crawl-url-empty", ["crawl", "leansearch", *B, "--url", "leansearch="], None, "--url leansearch= is empty"),
    ("crawl-url-port", ["crawl", "leansearch", *B, "--url", "leansearch=http://127.0.0.1:99999"], None,
     "port 99999"),
    ("crawl-url-port-zero", ["crawl", "leansearch", *B, "--url", "leansearch=http://127.0.0.1:0"], None, "port 0"),
    ("crawl-url-garbage", ["crawl", "leansearch", *B, "--url", "leansearch=garbage"], None,
     "must start with http:// or https://"),
    ("crawl-url-ftp", ["crawl", "leansearch", *B, "--url", "leansearch=ftp://h/x"], None,
     "must start with http:// or https://"),
    ("crawl-url-no-host", ["crawl", "leansearch", *B, "--url", "leansearch=http://:8080/x"], None, "no host"),
    ("crawl-url-bad-port", ["crawl", "leansearch", *B, "--url", "leansearch=http://h:port"], None, "port"),
    ("crawl-url-no-equals", ["crawl", "leansearch", *B, "--url", "http://127.0.0.1:8080"], None,
     "must be ENGINE=VALUE"),
    ("crawl-url-other-engine", ["crawl", "leansearch", *B, "--url", "loogle=http://127.0.0.1:8080"], None,
     "not being crawled"),
    ("crawl-bench-missing", ["crawl", "leansearch", "--bench", "nope"], None, "no benchmark named 'nope'"),
    ("crawl-num-results-zero", ["crawl", "leansearch", *B, "--num-results", "0"], None, "--num-results"),
    ("crawl-margin-negative", ["crawl", "leansearch", *B, "--margin", "-1"], None, "--margin"),
    ("crawl-unknown-option", ["crawl", "leansearch", *B, "--fast"], None, "No such option"),
    # benchmarks
    ("bench-missing-file", ["bench", "load", "/nonexistent/b.json"], None, "does not exist"),
    ("bench-malformed-json", ["bench", "load", "{d}/bad.json"], None,
     "bad.json:2: invalid JSON (Expecting value at column 8)"),
    ("bench-not-a-benchmark", ["bench", "load", "{d}/list.json"], None, "list.json"),
    ("bench-empty-file", ["bench", "load", "{d}/empty.json"], None, "empty.json"),
    ("bench-directory", ["bench", "load", "{d}"], None, "is a directory"),
    ("bench-nothing", ["bench", "load"], None, "nothing to load"),
    # corpora
    ("corpus-missing-file", ["corpus", "load", "/nonexistent/c.jsonl", "--name", "x"], None, "does not exist"),
    ("corpus-bad-line", ["corpus", "load", "{d}/badline.jsonl", "--name", "x"], None,
     "badline.jsonl:2: invalid JSON (Expecting value at column 25)"),
    ("corpus-bad-gz-line", ["corpus", "load", "{d}/badgz.jsonl.gz", "--name", "x"], None,
     "badgz.jsonl.gz:2: invalid JSON (Expecting property name enclosed in double quotes at column 17)"),
    ("corpus-no-name-field", ["corpus", "load", "{d}/noname.jsonl", "--name", "x"], None, "noname.jsonl:1"),
    ("corpus-not-gzip", ["corpus", "load", "{d}/notgz.jsonl.gz", "--name", "x"], None,
     "notgz.jsonl.gz:1: invalid JSON (Expecting value at column 1)"),
    ("corpus-hf-no-revision", ["corpus", "load", "hf://owner/data", "--name", "x"], None, "revision"),
    ("corpus-no-name-option", ["corpus", "load", "{d}/tiny.jsonl"], None, "Missing option '--name'"),
    # scoring, reports, local runs
    ("score-unknown-bench", ["score", "--bench", "nope"], None, "no benchmark named 'nope'"),
    ("score-unknown-corpus", ["score", *B, "--corpus", "nope"], None, "nope"),
    ("score-unknown-subset", ["score", *B, "--subset", "nope"], None, "no subset named 'nope'"),
    ("report-json-missing", ["report", "--from-json", "{d}/absent.json", "--out", "{d}/r"], None, "absent.json"),
    ("report-json-malformed", ["report", "--from-json", "{d}/score.json", "--out", "{d}/r"], None, "score.json"),
    ("run-bm25-method", ["run", "bm25", *B, "--method", "nope"], None, "--method 'nope'"),
    ("run-bm25-bench", ["run", "bm25", "--bench", "nope"], None, "no benchmark named 'nope'"),
    ("status-unknown-bench", ["status", "--bench", "nope"], None, "no benchmark named 'nope'"),
    # sql, emulate, demo, the command line itself
    ("sql-empty", ["sql", "   "], None, "empty query"),
    ("sql-unknown-table", ["sql", "SELECT * FROM nope"], None, "SQL error: no such table: nope"),
    ("emulate-unknown-engine", ["emulate", "google"], None, "google"),
    ("emulate-bad-rate", ["emulate", "loogle", "--rate", "often"], None, "invalid rate 'often'"),
    ("demo-targets-zero", ["demo", "--targets", "0", "--out", "{d}/demo"], None, "--targets"),
    ("unknown-command", ["fly"], None, "No such command 'fly'"),
]


@pytest.mark.parametrize(("cid", "argv", "db", "text"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(cache: Path, monkeypatch, capsys, tmp_path, cid, argv, db, text) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may appear in the working directory either
    monkeypatch.setenv("ENGINES_CACHE_DIR", str(tmp_path / "engines-cache"))
    if db is None:
        url, watched = f"sqlite:///{cache / 'cache.db'}", cache / "cache.db"
    elif "://" in db or db.startswith("::"):
        url, watched = db, None
    else:
        url, watched = f"sqlite:///{(cache / db).resolve()}", cache / db
    monkeypatch.setenv("ENGINES_DATABASE_URL", url)
    before = _sha(watched) if watched else None
    listing = _listing(cache)
    code = cli.run([a.replace("{d}", str(cache)) for a in argv])
    out = capsys.readouterr()
    assert code != 0, (cid, out.out, out.err)
    assert "Traceback" not in out.err + out.out
    lines = out.err.splitlines()
    assert len(lines) == 1, out.err
    assert lines[0].startswith(("error: ", "engines sql: refused: ")), lines[0]
    assert "unexpected" not in lines[0], lines[0]
    assert text in lines[0], lines[0]
    if watched is not None:
        assert _sha(watched) == before
    assert _listing(cache) == listing
    assert list(tmp_path.iterdir()) == []


def test_there_are_at_least_forty_cases() -> None:
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


def _commands(group, path=()):  # noqa: ANN001
    yield path
    for name, cmd in getattr(group, "commands", {}).items():
        yield from _commands(cmd, (*path, name))


def test_every_help_prints(monkeypatch, capsys, tmp_path) -> None:
    import typer

    monkeypatch.chdir(tmp_path)
    root = typer.main.get_command(cli.app)
    paths = list(_commands(root))
    assert ("corpus", "load") in paths and ("db", "reader") in paths and ("sql",) in paths
    for path in paths:
        code = cli.run([*path, "--help"])
        out = capsys.readouterr()
        assert code == 0, (path, out.err)
        assert "Traceback" not in out.out + out.err and out.err == ""
        assert out.out.startswith(f"Usage: engines {' '.join(path)}".rstrip()), (path, out.out[:80])
    assert list(tmp_path.iterdir()) == []


def test_unexpected_errors_are_one_line_unless_debugging(monkeypatch, capsys) -> None:
    import cli.commands.core as core

    def boom(*_a, **_k):
        raise RuntimeError("kaput\nsecond line")

    monkeypatch.setattr(core, "get_db", boom)
    monkeypatch.delenv("ENGINES_DEBUG", raising=False)
    assert cli.run(["corpus", "list"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: unexpected RuntimeError: kaput second line (a bug; set ENGINES_DEBUG=1 "
                                "for the traceback and please report it)"]
    monkeypatch.setenv("ENGINES_DEBUG", "1")
    with pytest.raises(RuntimeError, match="kaput"):
        cli.run(["corpus", "list"])


def test_crawl_that_fails_to_start_records_failed_not_running(any_db_url, monkeypatch, capsys, tmp_path) -> None:
    """An error after the crawl's row exists (here: recovering archived bodies) ends the row
    as failed, with the reason; the command prints one line. A bad --url never gets that far."""
    import sqlalchemy as sa

    import crawler.crawl as run_mod
    from benchmarks import shipped_path
    from store.benchmarks import load_benchmark_file
    from store.errors import UserError
    from store.models import Crawl

    db = open_database(any_db_url)
    load_benchmark_file(db, shipped_path("MathlibMPR.json"))
    db.dispose()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENGINES_DATABASE_URL", any_db_url)
    argv = ["crawl", "leanexplore", "--bench", "mathlibmpr", "--url", "leanexplore=http://127.0.0.1:9"]

    assert cli.run([*argv[:-1], "leanexplore=http://127.0.0.1:99999"]) == 1
    assert "port 99999 is out of range" in capsys.readouterr().err

    def broken(*_a, **_k):
        raise UserError("the archive could not be read\nsecond line")

    monkeypatch.setattr(run_mod, "recover_unparsed", broken)
    assert cli.run(argv) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "error: the archive could not be read second line"
    assert "Traceback" not in err
    db = open_database(any_db_url)
    try:
        with db.session() as s:
            rows = s.execute(sa.select(Crawl.status, Crawl.summary, Crawl.finished_at)).all()
    finally:
        db.dispose()
    assert len(rows) == 1  # the port-99999 attempt left no row at all
    status, summary, finished = rows[0]
    assert status == "failed" and summary == {"error": "the archive could not be read second line"}
    assert finished is not None
