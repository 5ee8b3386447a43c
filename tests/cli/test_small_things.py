"""Issue 34, item 13: the small things a careful user trips over, each with the command
that showed it: ``--version``, a plain ``--db`` path, a missing PostgreSQL database, a
wrong kind of file, verify's and publish's corpus hints, ``report`` with no answers, TREC
export names, the crawl lock file, Loogle's error text."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from cli import main as cli
from tests.support.postgres import PG_BASE_URL

ROOT = Path(__file__).resolve().parents[2]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.run(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version(capsys) -> None:
    from engines import __version__

    code, out, err = _run(capsys, "--version")
    assert code == 0, err
    assert re.fullmatch(rf"engines {re.escape(__version__)}(\+g[0-9a-f]+)?\n", out), out


def test_a_plain_db_path_is_a_sqlite_file(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENGINES_DATABASE_URL", raising=False)
    code, _, err = _run(capsys, "--db", "cache.db", "db", "upgrade")
    assert code == 0, err
    assert (tmp_path / "cache.db").is_file()
    (tmp_path / "sub").mkdir()
    code, _, err = _run(capsys, "db", "upgrade", "--db", str(tmp_path / "sub" / "x.sqlite"))
    assert code == 0, err
    assert (tmp_path / "sub" / "x.sqlite").is_file()
    code, _, err = _run(capsys, "db", "current", "--db", "sub/x.sqlite")
    assert code == 0, err


@pytest.mark.postgres
def test_a_missing_postgres_database_says_how_to_create_it(capsys) -> None:
    from sqlalchemy.engine import make_url

    name = f"engines_missing_{uuid.uuid4().hex[:8]}"
    base = make_url(PG_BASE_URL)
    url = base.set(database=name).render_as_string(hide_password=False)
    code, _, err = _run(capsys, "--db", url, "db", "current")
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"database '{name}' does not exist" in lines[0]
    assert f"createdb -h {base.host} -p {base.port or 5432} -U {base.username} {name}" in lines[0]
    assert f'CREATE DATABASE "{name}";' in lines[0]


# ------------------------------------------------------------- a wrong kind of file


def _warc(path: Path) -> Path:
    """A one-record WARC/1.1 file, gzipped per record as warcio writes it."""
    import gzip

    payload = b"hello"
    record = (b"WARC/1.1\r\nWARC-Type: resource\r\nWARC-Record-ID: <urn:uuid:12345678-1234-1234-1234-123456789abc>"
              b"\r\nWARC-Target-URI: urn:x\r\nWARC-Date: 2026-01-01T00:00:00Z\r\nContent-Type: text/plain\r\n"
              b"Content-Length: %d\r\n\r\n%s\r\n\r\n" % (len(payload), payload))
    path.write_bytes(gzip.compress(record))
    return path


def test_a_wrong_kind_of_file_is_named_as_what_it_is(tmp_path: Path, capsys) -> None:
    import gzip

    url = f"sqlite:///{tmp_path / 'cache.db'}"
    assert _run(capsys, "--db", url, "bench", "load", "--shipped")[0] == 0
    warc = _warc(tmp_path / "x.warc.gz")
    run = tmp_path / "r.trec"
    run.write_text("O1 Q0 Lattice 1 2.0 mine\nO1 Q0 Foo 2 1.0 mine\n")
    run_gz = tmp_path / "r.trec.gz"
    run_gz.write_bytes(gzip.compress(run.read_bytes()))
    corpus = tmp_path / "c.jsonl.gz"
    corpus.write_bytes(gzip.compress(b'{"name": ["Foo"], "module_name": ["M"], "kind": "theorem", '
                                     b'"signature": "", "type": null}\n'))
    db_file = tmp_path / "cache.db"
    cases = [
        (["run", "import", str(warc), "--bench", "mathlibqr", "--name", "t"], "this is a WARC bundle, not a run",
         f"engines import {warc}"),
        (["bench", "load", str(run)], "this is a TREC run, not a benchmark", f"engines run import {run}"),
        (["bench", "load", str(run_gz)], "this is a TREC run, not a benchmark", "engines run import"),
        (["bench", "load", str(warc)], "this is a WARC bundle, not a benchmark", "engines import"),
        (["corpus", "load", str(run_gz), "--name", "c"], "this is a TREC run, not a corpus", "engines run import"),
        (["run", "import", str(corpus), "--bench", "mathlibqr", "--name", "t"],
         "this is a corpus (LeanSearch v2 JSONL), not a run", f"engines corpus load {corpus}"),
        (["import", str(run)], "this is a TREC run, not a WARC bundle", "engines run import"),
        (["import", str(db_file)], "this is a SQLite database, not a WARC bundle", f"--db {db_file}"),
        (["bench", "load", str(db_file)], "this is a SQLite database, not a benchmark", "--db"),
    ]
    for argv, what, how in cases:
        code, out, err = _run(capsys, "--db", url, *argv)
        assert code != 0, (argv, out)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and what in lines[0] and how in lines[0], (argv, err[:500])


# ------------------------------------------------------------------- the crawl lock


def test_the_crawl_lock_file_is_removed_at_exit_and_ignored_by_git(tmp_path: Path) -> None:
    from crawler.lock import AlreadyCrawling, CrawlLock

    lock = CrawlLock(str(tmp_path / "my.sqlite"))
    lock.acquire()
    assert lock.path.is_file()
    other = CrawlLock(str(tmp_path / "my.sqlite"))
    with pytest.raises(AlreadyCrawling):
        other.acquire()
    lock.release()
    assert not lock.path.exists()
    other.acquire()  # a new file, locked
    assert lock.path.is_file()
    with pytest.raises(AlreadyCrawling):
        CrawlLock(str(tmp_path / "my.sqlite")).acquire()
    other.release()
    assert list(tmp_path.iterdir()) == []
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "data/my.sqlite.crawl.lock"])
    assert ignored.returncode == 0


def test_a_crawl_leaves_no_lock_file(sqlite_url: str, tmp_path: Path, capsys) -> None:
    """Through the command: a crawl that stops (here: its host does not resolve) removes its lock."""
    assert _run(capsys, "--db", sqlite_url, "bench", "load", "--shipped")[0] == 0
    code, _, err = _run(capsys, "--db", sqlite_url, "crawl", "leansearch", "--bench", "mathlibqr",
                        "--url", "leansearch=http://nonexistent.invalid")
    assert code == 3, err
    assert not list(tmp_path.glob("*.crawl.lock"))


# ------------------------------------------------------------- Loogle's error text


def test_loogle_error_text_is_shown_once_and_as_written(tmp_path: Path) -> None:
    """Loogle's real in-band errors (tests/data/real-responses/loogle), and one over two lines
    with both quote kinds: the crawl's line names the engine once and quotes Loogle verbatim."""
    import json

    from crawler.fetch import RetryPolicy
    from crawler.crawl import CrawlOptions, Reporter, run_crawl
    from engines.base import Rate
    from engines.emulate import StandIn
    from store.benchmarks import load_benchmark_file
    from store.db import open_database

    real = ROOT / "tests" / "data" / "real-responses" / "loogle"
    bodies = {"(((": (real / "parse-error.json").read_bytes(),
              "exists_infinite_primes": (real / "unknown-identifier-suggestions.json").read_bytes(),
              "two lines": json.dumps({"error": "unknown constant 'Foo.bar'\n  in \"Foo\"\\baz"}).encode()}
    want = {"<input>:1:3: unexpected end of input; expected ')'",
            "unknown identifier 'exists_infinite_primes'",
            "unknown constant 'Foo.bar' in \"Foo\"\\baz"}
    items = [{"id": f"l{i}", "full_name": "Nat.add_comm", "q1c_natural": t} for i, t in enumerate(bodies)]
    (tmp_path / "b.json").write_text(json.dumps(items))
    corpus = [{"name": ["Nat", "add_comm"], "module_name": ["Mathlib"], "kind": "theorem", "signature": "",
               "type": None, "value": None, "docstring": None}]

    class Lines(Reporter):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def log(self, message: str) -> None:
            self.lines.append(message)

    db = open_database(f"sqlite:///{tmp_path / 'cache.db'}")
    try:
        load_benchmark_file(db, tmp_path / "b.json", name="lg", allow_modified=True)
        canned = lambda texts, req: (200, {"content-type": "application/json"}, bodies[texts[0]])  # noqa: E731
        with StandIn("loogle", corpus, rate=Rate(20, 0.5), canned=canned).in_thread() as srv:
            rep = Lines()
            run_crawl(db, CrawlOptions(engines=["loogle"], bench="lg", rates={"*": Rate(20, 0.5)},
                                       urls={"loogle": srv.url}, margin=0.05,
                                       policy=RetryPolicy(backoff_initial=0.02, backoff_max=0.1)), rep)
    finally:
        db.dispose()
    errors = [line for line in rep.lines if "query error" in line]
    assert len(errors) == 3, rep.lines
    for line in errors:
        assert line.startswith("loogle: query error: ") and line.endswith(" (not retried)"), line
        assert "loogle: loogle" not in line
    assert {line.removeprefix("loogle: query error: ").removesuffix(" (not retried)") for line in errors} == want


# --------------------------------------------------------- report with no answers


def test_report_with_no_answers_exits_non_zero_like_score_and_plot(tmp_path: Path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    assert _run(capsys, "--db", url, "bench", "load", "--shipped")[0] == 0
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"name": ["Lattice"], "module_name": ["M"], "kind": "class", "signature": "", "type": null}\n')
    assert _run(capsys, "--db", url, "corpus", "load", str(corpus), "--name", "c")[0] == 0  # holds a gold name
    for argv in (["score", "--bench", "mathlibqr"], ["plot", "--bench", "mathlibqr", "--out", str(tmp_path / "p.png")],
                 ["report", "--bench", "mathlibqr", "--out", str(tmp_path / "r")]):
        code, out, err = _run(capsys, "--db", url, *argv)
        assert code != 0, (argv, out, err)
        assert len(err.strip().splitlines()) == 1 and re.search("no system has answers|no scored rows", err), err
    assert not (tmp_path / "r").exists()  # nothing half-written


# ------------------------------------------------------------ TREC export names


def test_trec_export_file_names_carry_no_colon(tmp_path: Path) -> None:
    from archive.runs import import_run
    from scoring.export import export_trec
    from scoring.results import score
    from store.db import open_database
    from tests.support.runs import _database, _small_inputs
    from tests.support.scoring import answer_all, bench_queries, make_config

    inputs = _small_inputs(tmp_path)
    db = _database(f"sqlite:///{tmp_path / 'a.db'}", inputs)
    qs = bench_queries(db, "mathlibqr")
    for label in ("dense:mini", "dense_mini"):
        answer_all(db, make_config(db, label), qs, lambda q: [u.names[0].name for u in q.gold_units])
    result = score(db, "mathlibqr", resamples=20)
    paths = export_trec(db, result, tmp_path / "trec")
    db.dispose()
    runs = sorted(p.name for p in paths if p.name.startswith("run."))
    assert len(runs) == 2 and not any(":" in name for name in runs), runs
    tags = {p.read_text().split()[5] for p in paths if p.name.startswith("run.")}
    assert {t.split(":")[0] for t in tags} == {"dense", "dense_mini"} and len(tags) == 2  # the tag keeps the id
    fresh = _database(f"sqlite:///{tmp_path / 'b.db'}", inputs)
    try:
        for p in paths:
            if p.name.startswith("run."):
                import_run(fresh, p, bench="mathlibqr", name=p.stem, source="round trip")
    finally:
        fresh.dispose()


# ----------------------------------------------- progress of long imports and loads


def test_slow_progress_says_nothing_for_a_quick_step_and_ticks_on_stderr_for_a_slow_one(monkeypatch, capsys):
    import time

    from cli.commands import common

    monkeypatch.setattr(common, "SLOW_AFTER_LOG", 0.2)
    monkeypatch.setattr(common, "SLOW_EVERY_LOG", 0.1)
    with common.slow_progress("quick"):
        pass
    with common.slow_progress("slow"):
        time.sleep(0.55)
    out = capsys.readouterr()
    assert out.out == "" and "quick" not in out.err
    lines = out.err.splitlines()
    assert 2 <= len(lines) <= 5 and all(re.fullmatch(r"slow: \d+ s", ln) for ln in lines), lines


def test_run_import_and_bench_load_show_progress_on_stderr_only(tmp_path: Path, monkeypatch, capsys) -> None:
    import json
    import time

    import benchmarks
    import archive.runs
    from cli.commands import common, core

    monkeypatch.setattr(common, "SLOW_AFTER_LOG", 0.05)
    real_import, real_load = archive.runs.import_run, core.load_benchmark_file

    def slowly(fn):
        def wrapped(*a, **kw):
            time.sleep(0.3)  # a large file's parse, in a test's time
            return fn(*a, **kw)
        return wrapped

    monkeypatch.setattr(archive.runs, "import_run", slowly(real_import))
    monkeypatch.setattr(core, "load_benchmark_file", slowly(real_load))
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    qr = tmp_path / "qr.json"
    qr.write_text(json.dumps(json.loads(benchmarks.shipped_path("MathlibQR.json").read_text("utf-8"))[:3]))
    code, out, err = _run(capsys, "--db", url, "bench", "load", str(qr), "--allow-modified", "--name", "qr3")
    assert code == 0, err
    assert out == "" and re.search(rf"^loading benchmark {re.escape(str(qr))} \(0\.0 MB\): 0 s$", err, re.M), err
    run = tmp_path / "r.trec"
    eng = sa.create_engine(url)
    with eng.connect() as conn:
        qid = conn.execute(sa.text("SELECT qid FROM queries ORDER BY id LIMIT 1")).scalar_one()
    eng.dispose()
    run.write_text(f"{qid} Q0 Lattice 1 2.0 mine\n")
    code, out, err = _run(capsys, "--db", url, "run", "import", str(run), "--bench", "qr3", "--name", "mine")
    assert code == 0, err
    assert out == "" and re.search(rf"^importing run {re.escape(str(run))} \(0\.0 MB\): 0 s$", err, re.M), err
