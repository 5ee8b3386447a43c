"""``engines demo`` end to end, and ``engines report`` on what it wrote.

The demo runs as a real subprocess in a temporary directory: real loopback stand-ins,
the real crawler, BM25, the scorer, the HTML report. ``--targets`` keeps it to the first
few MathlibQR targets (all their styles) so the test stays short; the full benchmark
differs only in the number of texts. The dense row is left out here (encoding the
slice takes minutes on CPU; the local-engine tests cover it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from cli.main import app
from pipelines.demo import BANNER, DEMO_ENGINES, StepResult, DemoResult, _run_step, _Skip
from store.db import open_database
from store.models import Answer, EngineConfig, Exchange, Query, Benchmark

TARGETS = 6

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINES_")}
    env["ENGINES_CACHE_DIR"] = str(tmp / "engines-cache")
    return env


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], cwd=cwd, env=_env(cwd),
        capture_output=True, text=True, timeout=300, check=False,
    )


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    proc = _run(["demo", "--targets", str(TARGETS), "--no-dense"], tmp)
    return tmp, proc


def _answers_by_engine(db_url: str) -> dict[str, int]:
    db = open_database(db_url)
    try:
        with db.session() as s:
            rows = s.execute(
                sa.select(EngineConfig.engine, sa.func.count(Answer.id))
                .join(Answer, Answer.config_id == EngineConfig.id).group_by(EngineConfig.engine)
            ).all()
        return {engine: n for engine, n in rows}
    finally:
        db.dispose()


def _expected_texts(db_url: str) -> tuple[int, int]:
    """(distinct query texts, queries) of the first TARGETS MathlibQR targets, from the DB."""
    db = open_database(db_url)
    try:
        with db.session() as s:
            bid = s.scalar(sa.select(Benchmark.id).where(Benchmark.name == "mathlibqr"))
            rows = s.execute(sa.select(Query.target_id, Query.query_sha256).where(Query.benchmark_id == bid)
                             .order_by(Query.id)).all()
    finally:
        db.dispose()
    targets: list[str] = []
    for tid, _ in rows:
        if tid not in targets:
            targets.append(tid)
    keep = set(targets[:TARGETS])
    return len({sha for tid, sha in rows if tid in keep}), sum(1 for tid, _ in rows if tid in keep)


def test_demo_runs_end_to_end(demo_run):
    tmp, proc = demo_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    out_dir = tmp / "engines-demo"
    db_url = f"sqlite:///{out_dir / 'cache.db'}"
    # it says where things are and what to do next
    assert f"database: sqlite:///{(out_dir / 'cache.db').resolve()}" in proc.stdout
    assert f"report:   {(out_dir / 'report' / 'index.html').resolve()}" in proc.stdout
    assert "engines crawl leansearch leanexplore leanfinder --bench mathlibqr" in proc.stdout
    assert BANNER.upper() in proc.stdout and BANNER in proc.stderr  # stdout: as the score table
    # the user's cache.db in the working directory is never touched
    assert not (tmp / "cache.db").exists()

    n_texts, n_queries = _expected_texts(db_url)
    answers = _answers_by_engine(db_url)
    for engine in (*DEMO_ENGINES, "bm25"):
        assert answers.get(engine) == n_texts, (engine, answers)
    # the stand-ins were crawled over HTTP: one archived exchange per text, all 200
    db = open_database(db_url)
    try:
        with db.session() as s:
            ex = s.execute(sa.select(EngineConfig.engine, Exchange.status_code, Exchange.url)
                           .join(Exchange, Exchange.config_id == EngineConfig.id)).all()
    finally:
        db.dispose()
    for engine in DEMO_ENGINES:
        mine = [e for e in ex if e.engine == engine]
        assert len(mine) >= n_texts
        assert {e.status_code for e in mine} == {200}
        assert all(e.url.startswith("http://127.0.0.1:") for e in mine)

    page = (out_dir / "report" / "index.html").read_text("utf-8")
    score = json.loads((out_dir / "report" / "report.json").read_text("utf-8"))
    assert score["banner"] == BANNER
    assert 'class="banner"' in page and BANNER.upper() in page
    assert score["subset"] == f"demo-first-{TARGETS}"
    assert score["benchmark"]["name"] == "mathlibqr"
    assert len(score["queries"]) + len(score["scope"]["dropped_qids"]) == n_queries
    engines = sorted(s["engine"] for s in score["systems"])
    assert engines == sorted((*DEMO_ENGINES, "bm25"))
    for s in score["systems"]:
        assert s["unanswered"] == 0 and "incomplete" not in s["badges"]
        assert f'data-system="{s["id"]}"' in page
    leansearch = next(s for s in score["systems"] if s["engine"] == "leansearch")
    assert "k≤50" in leansearch["badges"]
    # the demo asks the scorer for one paired comparison: LeanSearch's stand-in against BM25
    assert {(c["a"], c["b"]) for c in score["comparisons"]} == {(leansearch["id"], "bm25")}
    assert 'id="comparisons"' in page
    # the printed leaderboard carries the scorer's numbers
    for s in score["systems"]:
        v = s["metrics"]["nDCG@10"]["value"]
        assert re.search(rf"^{re.escape(s['id'])}\s+{s['n']}\s+{v:.3f}\s", proc.stdout, re.M), s["id"]


def test_demo_rerun_fetches_nothing_again(demo_run):
    tmp, proc = demo_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    db_url = f"sqlite:///{tmp / 'engines-demo' / 'cache.db'}"
    db = open_database(db_url)
    try:
        with db.session() as s:
            before = s.scalar(sa.select(sa.func.count(Exchange.id)))
    finally:
        db.dispose()
    # The stand-ins' usual ports are taken this time: they start elsewhere, and their
    # configurations are still the same (identity without the port), so nothing is sent.
    import socket

    from pipelines.demo import DEMO_PORTS

    held = []
    for port in DEMO_PORTS.values():
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            held.append(sock)
        except OSError:
            sock.close()  # taken already (another demo running): just as good
    try:
        again = _run(["demo", "--targets", str(TARGETS), "--no-dense"], tmp)
    finally:
        for sock in held:
            sock.close()
    assert again.returncode == 0, again.stderr[-3000:]
    assert not any(f"on http://127.0.0.1:{p}/" in again.stderr or f"on http://127.0.0.1:{p} " in again.stderr
                   for p in DEMO_PORTS.values() if held)
    db = open_database(db_url)
    try:
        with db.session() as s:
            after = s.scalar(sa.select(sa.func.count(Exchange.id)))
            configs = s.scalar(sa.select(sa.func.count(EngineConfig.id)))
    finally:
        db.dispose()
    assert after == before  # every text was answered already: nothing is sent twice
    assert configs == len(DEMO_ENGINES) + 1  # other ports, the same configurations
    db = open_database(db_url)
    try:
        with db.session() as s:
            labels = set(s.execute(sa.select(EngineConfig.label).where(EngineConfig.local.is_(False))).scalars())
    finally:
        db.dispose()
    assert labels == {f"{e} (stand-in)" for e in DEMO_ENGINES}  # by engine, not by loopback URL
    assert "0 now, 0 requests" in again.stderr


def test_report_command_from_demo_db_and_from_json(demo_run, tmp_path):
    tmp, proc = demo_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    db_url = f"sqlite:///{tmp / 'engines-demo' / 'cache.db'}"
    demo_score = json.loads((tmp / "engines-demo" / "report" / "report.json").read_text("utf-8"))
    leanfinder = next(s["id"] for s in demo_score["systems"] if s["engine"] == "leanfinder")
    runner = CliRunner()
    res = runner.invoke(app, ["--db", db_url, "report", "--bench", "mathlibqr", "--subset", f"demo-first-{TARGETS}",
                              "--corpus", "mathlib-slice", "--out", str(tmp_path / "r1"),
                              "--compare", "bm25", leanfinder])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == str(tmp_path / "r1" / "index.html")
    score = json.loads((tmp_path / "r1" / "report.json").read_text("utf-8"))
    assert {s["id"] for s in score["systems"]} == {s["id"] for s in demo_score["systems"]}
    for s in score["systems"]:
        d = next(x for x in demo_score["systems"] if x["id"] == s["id"])
        assert s["metrics"]["nDCG@10"] == d["metrics"]["nDCG@10"]
    assert {(c["a"], c["b"]) for c in score["comparisons"]} == {("bm25", leanfinder)}
    # --from-json renders a finished score file without a database
    res = runner.invoke(app, ["report", "--from-json", str(tmp_path / "r1" / "report.json"), "--out", str(tmp_path / "r2")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "r2" / "report.json").read_text("utf-8")) == score
    assert (tmp_path / "r2" / "index.html").read_text("utf-8").count('class="system-row"') == len(score["systems"])


def test_report_command_errors(tmp_path, sqlite_url):
    runner = CliRunner()
    res = runner.invoke(app, ["--db", sqlite_url, "report", "--out", str(tmp_path / "r")])
    assert res.exit_code != 0 and "--bench" in res.output
    res = runner.invoke(app, ["report", "--from-json", str(tmp_path / "nope.json"), "--out", str(tmp_path / "r")])
    assert res.exit_code != 0 and "does not exist" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "other/1"}', encoding="utf-8")
    res = runner.invoke(app, ["report", "--from-json", str(bad), "--out", str(tmp_path / "r")])
    assert res.exit_code != 0 and "schema" in res.output
    assert not (tmp_path / "r" / "index.html").exists()
    runner.invoke(app, ["--db", sqlite_url, "db", "upgrade"])  # report reads a database, never creates one
    res = runner.invoke(app, ["--db", sqlite_url, "report", "--bench", "nosuch", "--out", str(tmp_path / "r")])
    assert res.exit_code != 0 and "nosuch" in res.output


@pytest.mark.postgres
def test_demo_on_postgres(pg_url, tmp_path):
    """`engines demo --db URL` puts everything in that database (here a PostgreSQL schema)."""
    proc = _run(["demo", "--db", pg_url, "--targets", "2", "--no-dense", "--out", "pgdemo"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "pgdemo" / "cache.db").exists()
    answers = _answers_by_engine(pg_url)
    assert set(answers) == {*DEMO_ENGINES, "bm25"}
    assert len(set(answers.values())) == 1 and next(iter(answers.values())) > 0
    assert BANNER.upper() in (tmp_path / "pgdemo" / "report" / "index.html").read_text("utf-8")


def test_a_missing_part_is_a_printed_note_not_a_crash():
    said: list[str] = []
    result = DemoResult(out_dir=Path("."), db_url="sqlite://")

    def missing() -> str:
        import engines.no_such_part  # noqa: F401

        return "unreachable"

    def skip() -> str:
        raise _Skip("nothing to do")

    assert not _run_step(result, "missing", missing, say=said.append)
    assert not _run_step(result, "skip", skip, say=said.append)
    assert _run_step(result, "fine", lambda: "done", say=said.append)
    assert [s.ok for s in result.steps] == [False, False, True]
    assert "not available in this installation" in result.steps[0].note
    assert said[0].startswith("  SKIP missing") and said[2].startswith("  ok   fine")
    assert isinstance(result.steps[2], StepResult) and result.steps[2].note == "done"


def test_demo_report_in_headless_chromium(demo_run, tmp_path):
    """The page the demo wrote, as a browser lays it out; screenshot kept in test-artifacts/."""
    from tests.support.browser import PROBE, run_chromium

    tmp, proc = demo_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = tmp / "engines-demo" / "report" / "index.html"
    score = json.loads((page.parent / "report.json").read_text("utf-8"))
    probed = page.parent / "probe.html"
    probed.write_text(page.read_text("utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = run_chromium(tmp_path, probed.as_uri(), "--dump-dom", "--virtual-time-budget=5000")
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout.decode("utf-8"), re.S)
    assert m, "the probe script did not run"
    probe = json.loads(m.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert probe["board_rows"] == len(score["systems"]) == len(DEMO_ENGINES) + 1
    curves = {c["metric"]: c for c in probe["curves"]}
    assert {"R", "nDCG"} <= set(curves)
    for c in curves.values():
        assert len(c["lines"]) == len(score["systems"]) and all(length > 20 for length in c["lines"])
    assert probe["query_rows"] == len(score["queries"])
    assert BANNER.upper() in probe["banner"]

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "demo-report.png"
    res = run_chromium(tmp_path, page.as_uri(), f"--screenshot={shot}")
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    assert shot.stat().st_size > 20_000


def test_dense_vectors_cached_needs_same_model_renderer_and_corpus(tmp_path, monkeypatch):
    from benchmarks import SLICE_CORPUS
    from pipelines.demo import DENSE_MODEL, dense_vectors_cached
    from engines.local.render import renderer_hash
    from store.corpus import sha256_file

    monkeypatch.setenv("ENGINES_CACHE_DIR", str(tmp_path / "cache"))
    assert not dense_vectors_cached()
    entry = tmp_path / "cache" / "dense" / "abc"
    entry.mkdir(parents=True)
    meta = {"model": DENSE_MODEL, "corpus_sha256": sha256_file(SLICE_CORPUS), "renderer_hash": renderer_hash()}
    (entry / "meta.json").write_text(json.dumps({**meta, "renderer_hash": "0" * 64}), encoding="utf-8")
    assert not dense_vectors_cached()  # vectors of another renderer do not count
    (entry / "meta.json").write_text(json.dumps({**meta, "corpus_sha256": "1" * 64}), encoding="utf-8")
    assert not dense_vectors_cached()  # nor of another corpus
    (entry / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    assert dense_vectors_cached()


def test_demo_adds_the_dense_row_from_cached_vectors(tmp_path):
    """With the slice's vectors in the cache, the default demo runs the dense row: the real
    model encodes the queries and exact search runs over the cached vectors. The vectors
    here are random unit vectors written under the real cache key (encoding the slice
    takes minutes on CPU), so only the wiring is checked, not the row's quality."""
    import numpy as np

    from benchmarks import SLICE_CORPUS
    from pipelines.demo import DENSE_MODEL
    from engines.local import dense
    from engines.local.render import renderer_hash
    from store.corpus import sha256_file

    class _Docs:  # what the cache key reads from a CorpusDocs
        sha256 = sha256_file(SLICE_CORPUS)

        def __len__(self) -> int:
            return 11_651

    spec = dense.resolve_model(DENSE_MODEL)
    key = dense.vectors_key(spec, _Docs(), "float32")
    entry = tmp_path / "engines-cache" / "dense" / key[:24]
    entry.mkdir(parents=True)
    vecs = np.random.default_rng(0).standard_normal((11_651, 384)).astype(np.float32)
    np.save(entry / "vectors.npy", vecs / np.linalg.norm(vecs, axis=1, keepdims=True))
    (entry / "meta.json").write_text(json.dumps({
        "key": key, "model": DENSE_MODEL, "corpus_sha256": _Docs.sha256, "rows": 11_651, "dim": 384,
        "dtype": "float32", "renderer_hash": renderer_hash(),
    }), encoding="utf-8")

    proc = _run(["demo", "--targets", "2", "--out", "dd"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"ok   run dense {DENSE_MODEL}" in proc.stderr
    assert "index cached" in proc.stderr  # the cached vectors were used, nothing was encoded
    score = json.loads((tmp_path / "dd" / "report" / "report.json").read_text("utf-8"))
    dense_rows = [s for s in score["systems"] if s["engine"].startswith("dense:")]
    assert len(dense_rows) == 1 and dense_rows[0]["unanswered"] == 0 and dense_rows[0]["local"]
    assert dense_rows[0]["params"]["query_format"] == "none"
    answers = _answers_by_engine(f"sqlite:///{tmp_path / 'dd' / 'cache.db'}")
    assert answers[f"dense:{DENSE_MODEL}"] == answers["bm25"] > 0


def test_demo_out_holds_every_file(tmp_path):
    """--out DIR: database, report and caches all under DIR; nothing in the working directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINES_")}
    proc = subprocess.run([sys.executable, "-m", "cli.main", "demo", "--targets", "2", "--no-dense",
                           "--out", "mine"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    out = tmp_path / "mine"
    assert (out / "cache.db").is_file() and (out / "report" / "index.html").is_file()
    assert any((out / "cache" / "bm25").iterdir())  # the BM25 index cache
    assert not (tmp_path / ".engines").exists()


def test_demo_standins_rank_differently():
    """Each stand-in weights other corpus fields: over MathlibQR's first queries their top 10s differ."""
    import itertools

    from benchmarks import SLICE_CORPUS, shipped_path
    from engines.emulate.scorer import DEFAULT_WEIGHTS, ENGINE_WEIGHTS, LexicalIndex, load_rows

    rows = load_rows(SLICE_CORPUS)
    idx = {e: LexicalIndex(rows, w) for e, w in ENGINE_WEIGHTS.items()}
    queries = [q for item in json.loads(shipped_path("MathlibQR.json").read_text("utf-8"))[:40]
               for k, q in item.items() if k.startswith("q") and isinstance(q, str)][:60]
    assert len(queries) >= 40
    for a, b in itertools.combinations(DEMO_ENGINES, 2):
        differ = sum([r.index for r, _ in idx[a].search(q, 10)] != [r.index for r, _ in idx[b].search(q, 10)]
                     for q in queries)
        assert differ >= len(queries) // 2, (a, b, differ)
    assert DEFAULT_WEIGHTS not in ENGINE_WEIGHTS.values()


def test_demo_report_has_no_published_rows(demo_run):
    """Issue 22 item 7: the demo's report shows no published reference rows (they need
    --published, and were computed on another corpus than the demo's slice)."""
    import json

    tmp, proc = demo_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = tmp / "engines-demo" / "report"
    assert json.loads((report / "report.json").read_text("utf-8")).get("published") == []
    page = (report / "index.html").read_text("utf-8")
    assert 'id="published"' not in page and 'class="published"' not in page


def test_demo_publishes_a_bundle_that_verifies(demo_run):
    """The demo writes engines-demo/leaderboard.warc.gz beside its report, prints the verify
    command, the page shows the bundle's sha256 and that command, and the command, run as
    printed, re-derives every figure (the shipped slice is found by its sha256)."""
    import hashlib

    tmp, proc = demo_run
    bundle = tmp / "engines-demo" / "leaderboard.warc.gz"
    assert bundle.is_file()
    sha = hashlib.sha256(bundle.read_bytes()).hexdigest()
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("verify:"))
    command = line.split(":", 1)[1].strip()
    assert command == "engines verify engines-demo/leaderboard.warc.gz"
    page = (tmp / "engines-demo" / "report" / "index.html").read_text("utf-8")
    assert sha in page and command in page
    verified = _run(command.split()[1:], tmp)
    assert verified.returncode == 0, verified.stdout + verified.stderr[-2000:]
    n = len(DEMO_ENGINES) + 1  # the stand-ins and BM25 (no dense)
    assert re.fullmatch(rf"verified: {n} systems, \d+ figures equal", verified.stdout.splitlines()[0])
