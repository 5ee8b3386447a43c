"""The demo's own archive round-trips (issue 22, item 1): ``engines export`` of a demo
database, ``engines import`` into a fresh one gives the same
scores; ``engines reparse`` re-parses the stand-in configurations; an import that fails
(a configuration this version cannot rebuild) leaves every table as it found it (SQLite
and PostgreSQL).

One short demo (2 targets, no dense row) is run in-process for the module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import sqlalchemy as sa

from engines.base import config_hash
from engines.registry import demo_engines
from typer.testing import CliRunner

from cli.main import app
from store.db import open_database
from store.models import Base, EngineConfig

TARGETS = 2


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory) -> tuple[Path, str]:
    from pipelines.demo import run_demo

    out = tmp_path_factory.mktemp("demo-bundle")
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("ENGINES_")}
    try:
        result = run_demo(out, dense=False, targets=TARGETS, say=lambda _m: None)
    finally:
        os.environ.update(saved)
    assert result.subset == f"demo-first-{TARGETS}"
    return out, f"sqlite:///{out / 'cache.db'}"


def _export(url: str, out: Path) -> Path:
    res = CliRunner().invoke(app, ["--db", url, "export", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def _prepare(url: str, *, corpus: bool = True) -> None:
    """What the demo scores with: MathlibQR, the slice and the demo's cut."""
    from benchmarks import SLICE_CORPUS, SLICE_CORPUS_NAME, SLICE_CORPUS_REVISION, shipped_path
    from pipelines.demo import demo_cut
    from store.benchmarks import load_benchmark_file
    from store.corpus import load_corpus

    db = open_database(url)
    try:
        load_benchmark_file(db, shipped_path("MathlibQR.json"))
        if corpus:
            load_corpus(db, str(SLICE_CORPUS), name=SLICE_CORPUS_NAME, revision=SLICE_CORPUS_REVISION)
        demo_cut(db, TARGETS)
    finally:
        db.dispose()


def _remote_scores(url: str) -> dict:
    from benchmarks import SLICE_CORPUS_NAME, SLICE_CORPUS_REVISION
    from scoring.document import build_score_json

    db = open_database(url)
    try:
        with db.session() as s:
            hashes = sorted(s.execute(sa.select(EngineConfig.config_hash)
                                      .where(EngineConfig.local.is_(False))).scalars())
        doc = build_score_json(db, "mathlibqr", corpus=f"{SLICE_CORPUS_NAME}@{SLICE_CORPUS_REVISION}",
                               systems=[h[:16] for h in hashes], subset=f"demo-first-{TARGETS}")
    finally:
        db.dispose()
    doc = json.loads(json.dumps(doc))
    doc.pop("generated_at", None)
    for sys_ in doc["systems"]:
        sys_.pop("latency_p95_ms", None)  # an import knows the exchange's elapsed time, not the answer's
    return doc


def _row_counts(url: str) -> dict[str, int]:
    db = open_database(url)
    try:
        with db.session() as s:
            return {t.name: s.scalar(sa.select(sa.func.count()).select_from(t)) for t in Base.metadata.sorted_tables}
    finally:
        db.dispose()


def test_demo_bundle_imports_into_a_fresh_database_with_equal_scores(demo_db, tmp_path, sqlite_url):
    # SQLite here; tests/archive/test_bundle.py round-trips a crawl on both backends.
    out, src = demo_db
    bundle = _export(src, tmp_path / "demo.warc.gz")
    _prepare(sqlite_url)
    res = CliRunner().invoke(app, ["import", "--db", sqlite_url, str(bundle)])
    assert res.exit_code == 0, res.output
    assert "error" not in res.output
    a, b = _remote_scores(src), _remote_scores(sqlite_url)
    assert [s["label"] for s in a["systems"]] == [s["label"] for s in b["systems"]]
    assert len(a["systems"]) == len(demo_engines()) and all("(stand-in)" in s["label"] for s in a["systems"])
    assert a == b


def test_reparse_handles_the_demo_standin_configurations(demo_db, tmp_path, monkeypatch):
    from archive.reparse import reparse
    from engines.registry import ENGINES

    out, src = demo_db
    copy = tmp_path / "copy.db"
    copy.write_bytes((out / "cache.db").read_bytes())
    # The environment's URL never enters a rebuilt adapter.
    monkeypatch.setenv("ENGINES_LEANSEARCH_URL", "http://127.0.0.1:9")
    db = open_database(f"sqlite:///{copy}")
    try:
        with db.session() as s:  # an older parser version: everything is re-parsed
            s.execute(sa.text("UPDATE parse_outcomes SET parser_version = 0"))
            s.commit()
        summary = reparse(db)
    finally:
        db.dispose()
    assert {r.engine for r in summary.results} == set(demo_engines())
    assert [r.skipped for r in summary.results] == [None] * len(demo_engines())
    assert all(r.exchanges > 0 and r.changed == 0 for r in summary.results)
    from archive.reparse import adapter_for_config

    db = open_database(f"sqlite:///{copy}")
    try:
        with db.session() as s:
            cfg = s.execute(sa.select(EngineConfig).where(EngineConfig.engine == "leansearch")).scalar_one()
            assert "stand_in" in cfg.params
            assert adapter_for_config(cfg).base_url == ENGINES["leansearch"].DEFAULT_URL.rstrip("/")
    finally:
        db.dispose()


def test_a_failing_import_leaves_the_database_as_it_found_it(demo_db, tmp_path, any_db_url, monkeypatch):
    out, _src = demo_db
    # A configuration this version cannot rebuild (a parameter no adapter knows).
    copy = tmp_path / "odd.db"
    copy.write_bytes((out / "cache.db").read_bytes())
    db = open_database(f"sqlite:///{copy}")
    try:
        with db.session() as s, s.begin():
            cfg = s.execute(sa.select(EngineConfig).where(EngineConfig.engine == "leanfinder")).scalar_one()
            cfg.params = {**cfg.params, "frobnicate": 3}
            # An honest bundle of such a configuration: its hash is that of its parameters
            # (a hash that does not match is refused earlier, as a forged bundle).
            cfg.config_hash = config_hash(cfg.params)
    finally:
        db.dispose()
    bundle = _export(f"sqlite:///{copy}", tmp_path / "odd.warc.gz")
    _prepare(any_db_url, corpus=False)
    before = _row_counts(any_db_url)
    res = CliRunner().invoke(app, ["--db", any_db_url, "import", str(bundle)])
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "frobnicate" in lines[0], res.output
    assert "nothing was imported" in lines[0]
    assert _row_counts(any_db_url) == before
    # Interrupted while parsing the exchanges into answers (after they were inserted):
    # nothing stays either.
    from archive.bundle import import_bundle

    good = _export(f"sqlite:///{out / 'cache.db'}", tmp_path / "good.warc.gz")
    calls = []

    def interrupted(*_a, **_k):
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr("archive.reparse.outcomes", interrupted)  # import parses with reparse's parse
    db = open_database(any_db_url)
    try:
        with pytest.raises(KeyboardInterrupt):
            import_bundle(db, good)
    finally:
        db.dispose()
    assert calls and _row_counts(any_db_url) == before
