"""Bring your own (issue 23): BEIR / JSONL benchmarks in ``engines bench load`` and run
files in ``engines run import`` / ``engines run drop``, through the CLI on real databases."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from cli.main import app
from store.db import open_database
from store.models import Answer, Benchmark, EngineConfig, Hit, Query
from tests.support.conventions import _error, _ok

DATA = Path(__file__).resolve().parents[1] / "data" / "byo"


@pytest.fixture
def cli(any_db_url):
    runner = CliRunner()

    def _run(*args: str):
        return runner.invoke(app, [str(a) for a in args], env={"ENGINES_DATABASE_URL": any_db_url})

    _run.url = any_db_url
    return _run


@pytest.fixture
def sqlite_cli(sqlite_url):
    runner = CliRunner()

    def _run(*args: str):
        return runner.invoke(app, [str(a) for a in args], env={"ENGINES_DATABASE_URL": sqlite_url})

    _run.url = sqlite_url
    return _run


def _count(url, model, *where):
    db = open_database(url)
    try:
        with db.session() as s:
            return s.scalar(sa.select(sa.func.count()).select_from(model).where(*where))
    finally:
        db.dispose()


def _example(cli):
    _ok(cli("corpus", "load", DATA / "corpus.jsonl", "--name", "divisors", "--revision", "028964f2c6f0"))
    return _ok(cli("bench", "load", DATA / "beir", "--name", "byo-divisors"))


# ---------------------------------------------------------------- benchmarks


def test_beir_directory_loads_with_styles_targets_and_gold_counts(cli):
    res = _example(cli)
    assert "loaded benchmark byo-divisors" in res.stderr and "queries 8" in res.stderr and "targets 4" in res.stderr
    assert "corpus divisors@028964f2c6f0 holds 4 of 4 gold names" in res.stderr
    db = open_database(cli.url)
    try:
        with db.session() as s:
            b = s.execute(sa.select(Benchmark).where(Benchmark.name == "byo-divisors")).scalar_one()
            assert b.task == "theorem-search" and b.meta["format"] == "beir" and b.meta["split"] == "test"
            qs = {q.qid: q for q in s.execute(sa.select(Query).where(Query.benchmark_id == b.id)).scalars()}
            assert {q.style for q in qs.values()} == {"natural", "lean"} and all(q.primary for q in qs.values())
            assert qs["q2-lean"].target_id == "q2" and qs["q2-lean"].text == "Perfect n ↔ ∑ i ∈ properDivisors n, i = n"
            assert [n.name for n in qs["q4-natural"].gold_units[0].names] == ["Nat.divisor_le"]
    finally:
        db.dispose()
    again = _ok(cli("bench", "load", DATA / "beir", "--name", "byo-divisors"))
    assert "already loaded benchmark byo-divisors" in again.stderr


def test_beir_corpus_ids_mapped_through_titles_split_and_task(sqlite_cli, tmp_path):
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    (root / "queries.jsonl").write_text(
        json.dumps({"_id": "1", "text": "add comm", "metadata": {"kind": "theorem", "difficulty": "easy"}}) + "\n"
        + json.dumps({"_id": "2", "text": "mul comm"}) + "\n", encoding="utf-8")
    (root / "corpus.jsonl").write_text(
        json.dumps({"_id": "d1", "title": "Nat.add_comm", "text": "a + b = b + a"}) + "\n"
        + json.dumps({"_id": "d2", "title": "Nat.mul_comm", "text": "a * b = b * a"}) + "\n"
        + json.dumps({"_id": "d3", "title": "Nat.mul_comm'", "text": ""}) + "\n", encoding="utf-8")
    (root / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n2\td2\t2\n2\td3\t1\n2\td1\t0\n")
    _error(sqlite_cli("bench", "load", root, "--name", "x"), "no qrels/test.tsv", "dev", "--split")
    _ok(sqlite_cli("bench", "load", root, "--name", "x", "--split", "dev"))
    _ok(sqlite_cli("bench", "load", root, "--name", "y", "--split", "dev", "--task", "theorem-search"))
    db = open_database(sqlite_cli.url)
    try:
        with db.session() as s:
            tasks = {n: t for n, t in s.execute(sa.select(Benchmark.name, Benchmark.task))}
            assert tasks == {"x": "premise-retrieval", "y": "theorem-search"}  # two gold units → premise retrieval
            q2 = s.execute(sa.select(Query).join(Benchmark).where(Benchmark.name == "x", Query.qid == "2")).scalar_one()
            assert [[n.name for n in u.names] for u in q2.gold_units] == [["Nat.mul_comm"], ["Nat.mul_comm'"]]
            q1 = s.execute(sa.select(Query).join(Benchmark).where(Benchmark.name == "x", Query.qid == "1")).scalar_one()
            assert (q1.kind, q1.difficulty, q1.style) == ("theorem", "easy", "default")
    finally:
        db.dispose()


def test_jsonl_benchmark_gold_groups_and_shared_text(sqlite_cli, tmp_path):
    path = tmp_path / "mine.jsonl"
    rows = [
        {"qid": "a", "query": "commutativity", "gold": ["Nat.add_comm"], "style": "informal", "target": "t1"},
        {"qid": "b", "query": "commutativity", "gold_groups": [["Nat.mul_comm", "Nat.mul_comm'"], ["Nat.succ"]]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = _ok(sqlite_cli("bench", "load", path, "--name", "mine"))
    assert "queries 2" in res.stderr and "no corpus loaded yet" in res.stderr
    db = open_database(sqlite_cli.url)
    try:
        with db.session() as s:
            b = s.execute(sa.select(Benchmark).where(Benchmark.name == "mine")).scalar_one()
            assert b.task == "premise-retrieval"
            qb = s.execute(sa.select(Query).where(Query.benchmark_id == b.id, Query.qid == "b")).scalar_one()
            assert [[n.name for n in u.names] for u in qb.gold_units] == [["Nat.mul_comm", "Nat.mul_comm'"], ["Nat.succ"]]
    finally:
        db.dispose()


BAD_BENCHMARKS = [
    ([{"qid": "a", "query": "x", "gold": ["A"]}, {"qid": "a", "query": "y", "gold": ["B"]}], [":2:", "duplicate qid 'a'"]),
    ([{"qid": "a", "query": "x", "gold": []}], [":1:", "no gold"]),
    ([{"qid": "a", "query": "x", "gold": ["A"]}, "{not json"], [":2:", "not a JSON line"]),
]


def test_jsonl_benchmark_refusals_write_nothing(sqlite_cli, tmp_path):
    for lines, needles in BAD_BENCHMARKS:
        path = tmp_path / "bad.jsonl"
        path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in lines), encoding="utf-8")
        _error(sqlite_cli("bench", "load", path, "--name", "bad"), *needles)
    assert _count(sqlite_cli.url, Benchmark) == 0


def test_external_benchmark_needs_a_name(sqlite_cli):
    _error(sqlite_cli("bench", "load", DATA / "beir"), "is a directory", "--name NAME")
    _error(sqlite_cli("bench", "load", DATA / "my-run.trec.jsonl"), "does not exist")


# ---------------------------------------------------------------------- runs


def _doc(cli, tmp_path, *extra):
    out = tmp_path / "score.json"
    _ok(cli("score", "--bench", "byo-divisors", "--json", out, *extra))
    return json.loads(out.read_text(encoding="utf-8"))


def test_trec_run_import_scored_beside_bm25_then_dropped(cli, tmp_path):
    _example(cli)
    _ok(cli("run", "bm25", "--bench", "byo-divisors", "--fields", "name,signature,docstring"))
    res = _ok(cli("run", "import", DATA / "my-run.trec", "--bench", "byo-divisors", "--name", "my-run",
                  "--source", "hand-written example"))
    assert "7 of 8 queries answered (7 of 8 distinct query texts), 70 hits; 1 query unanswered" in res.stderr
    assert "depth: 10 (the longest list)" in res.stderr
    assert "note: 1 of 7 queries have scores that disagree with their ranks" in res.stderr
    again = _ok(cli("run", "import", DATA / "my-run.trec", "--bench", "byo-divisors", "--name", "my-run"))
    assert "nothing to do" in again.stderr
    assert _count(cli.url, EngineConfig, EngineConfig.engine == "run") == 1
    doc = _doc(cli, tmp_path)
    mine = next(s for s in doc["systems"] if s["id"] == "my-run")
    assert mine["engine"] == "run" and mine["source"] == "hand-written example"
    assert mine["badges"] == ["incomplete", "k≤10", "imported"] and mine["unanswered"] == 1
    assert mine["params"]["format"] == "trec" and len(mine["params"]["sha256"]) == 64
    assert mine["resolution"]["not_in_corpus"] == 1  # Nat.Divisors.not_a_real_name keeps its rank
    # q3-natural: the gold is third, behind a name the corpus does not hold.
    assert mine["per_query"]["q3-natural"]["positions"] == [3]
    assert mine["per_query"]["q1-natural"]["positions"] == [2]
    assert mine["metrics"]["R@1"]["value"] == pytest.approx(4 / 8)
    bm25 = next(s for s in doc["systems"] if s["engine"] == "bm25")
    assert "imported" not in bm25["badges"] and bm25["source"] is None
    table = _ok(cli("score", "--bench", "byo-divisors")).stdout
    assert "imported (hand-written example)" in table
    _ok(cli("report", "--from-json", tmp_path / "score.json", "--out", tmp_path / "report"))
    assert "source: hand-written example" in (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    _ok(cli("plot", "--from-json", tmp_path / "score.json", "-o", tmp_path / "plot.svg"))
    assert "my-run [imported: hand-written example]" in (tmp_path / "plot.svg").read_text(encoding="utf-8")
    # A changed file under the same name is a new row, never an overwrite.
    changed = tmp_path / "my-run.trec"
    changed.write_text((DATA / "my-run.trec").read_text(encoding="utf-8") + "q4-lean Q0 Nat.divisor_le 1 1.0 my-run\n")
    _ok(cli("run", "import", changed, "--bench", "byo-divisors", "--name", "my-run"))
    assert _count(cli.url, EngineConfig, EngineConfig.engine == "run") == 2
    ids = sorted(s["id"] for s in _doc(cli, tmp_path)["systems"] if s["engine"] == "run")
    assert len(ids) == 2 and all(i.startswith("my-run#") for i in ids)
    hits_before = _count(cli.url, Hit)
    res = _ok(cli("run", "drop", "my-run"))
    assert "2 configuration(s), 15 answers, 141 hits" in res.stderr
    assert _count(cli.url, EngineConfig, EngineConfig.engine == "run") == 0
    assert _count(cli.url, Hit) == hits_before - 141 and _count(cli.url, EngineConfig) == 1  # bm25 stays
    _error(cli("run", "drop", "my-run"), "no imported run named 'my-run'")


def test_trec_rank_column_order_disagreement_note_and_gz(sqlite_cli, tmp_path):
    _example(sqlite_cli)
    lines = [
        "q1-lean Q0 Nat.Prime.properDivisors 7 1.0 t",  # rank 7 first in the file, but it is ranked last
        "q1-lean Q0 Nat.Prime.divisors 3 0.5 t",  # its score is lower than rank 7's: disagreement
        "q2-lean Q0 Nat.Perfect 1 2.0 t",
        "q2-lean Q0 Nat.perfect_iff_sum_properDivisors 2 1.0 t",
    ]
    path = tmp_path / "run.txt.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    res = _ok(sqlite_cli("run", "import", path, "--bench", "byo-divisors", "--name", "zipped"))
    assert "note: 1 of 2 queries have scores that disagree with their ranks" in res.stderr
    doc = _doc(sqlite_cli, tmp_path)
    z = next(s for s in doc["systems"] if s["id"] == "zipped")
    assert z["per_query"]["q1-lean"]["positions"] == [1]  # renumbered 1..n in rank order: divisors first
    assert z["per_query"]["q2-lean"]["positions"] == [2]
    assert "k≤2" in z["badges"]


def test_jsonl_run_by_qid_and_by_text_first_occurrence_and_cut(sqlite_cli, tmp_path):
    _example(sqlite_cli)
    rows = [
        {"qid": "q1-lean", "ranked": ["Nat.Perfect", "Nat.Perfect", "Nat.Prime.divisors"]},
        {"query": "every divisor of m is at most m", "ranked": [f"Not.Here.{i}" for i in range(250)] + ["Nat.divisor_le"]},
        {"qid": "q3-lean", "ranked": [["Nat", "divisors_eq_empty"]]},
    ]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = _ok(sqlite_cli("run", "import", path, "--bench", "byo-divisors", "--name", "js", "--format", "jsonl"))
    assert "1 lists longer than k_max = 200 were cut" in res.stderr
    doc = _doc(sqlite_cli, tmp_path)
    js = next(s for s in doc["systems"] if s["id"] == "js")
    assert js["per_query"]["q1-lean"]["positions"] == [3]  # a repeated name holds its rank
    assert js["per_query"]["q4-natural"]["positions"] == [None]  # cut at 200
    assert js["per_query"]["q3-lean"]["positions"] == [1]
    assert js["result_cap"] is None and _count(sqlite_cli.url, Hit) == 3 + 200 + 1


BAD_RUNS = [
    ('{"qid": "q1-lean", "ranked": ["A"]}\n{"qid": "nope", "ranked": ["B"]}\n', [":2:", "qid 'nope' is not in benchmark byo-divisors"]),
    ('{"qid": "q1-lean", "ranked": ["A"]}\n{"qid": "q2-lean", "ranked": "B"}\n', [":2:", "'ranked' must be a list"]),
    ('{"qid": "q1-lean", "ranked": ["A"]}\n{"query": "divisors p = {1, p}", "ranked": ["B"]}\n',
     [":2:", "'divisors p = {1, p}' has two different lists"]),
    ('{"qid": "q1-lean", "ranked": ["A"]}\n{"query": "what?", "ranked": ["B"]}\n', [":2:", "query text 'what?' is not in"]),
    ("q1-lean Q0 A 1 1.0 t\nq1-lean Q0 B 1 0.5 t\n", [":2:", "rank 1 repeated in query 'q1-lean'"]),
    ("q1-lean Q0 A 1 1.0 t\nq1-lean Q0 B two 0.5 t\n", [":2:", "rank 'two' must be an integer"]),
    ("q1-lean Q0 A 1 1.0\n", [":1:", "6 columns"]),
]


def test_bad_runs_are_refused_in_one_line_and_write_nothing(sqlite_cli, tmp_path):
    _example(sqlite_cli)
    for content, needles in BAD_RUNS:
        path = tmp_path / "bad.run"
        path.write_text(content, encoding="utf-8")
        _error(sqlite_cli("run", "import", path, "--bench", "byo-divisors", "--name", "bad"), *needles)
    assert _count(sqlite_cli.url, EngineConfig) == 0 and _count(sqlite_cli.url, Answer) == 0


def test_run_for_another_benchmark_and_engine_names_are_refused(sqlite_cli, tmp_path):
    _example(sqlite_cli)
    path = tmp_path / "other.trec"
    path.write_text("mathlibqr_1_q1a_lean Q0 Nat.add_comm 1 1.0 t\n", encoding="utf-8")
    _error(sqlite_cli("run", "import", path, "--bench", "byo-divisors", "--name", "x"), ":1:", "another benchmark")
    for name in ("leansearch", "bm25", "LeanFinder", "run"):
        _error(sqlite_cli("run", "import", DATA / "my-run.trec", "--bench", "byo-divisors", "--name", name), "engine's name")
    _ok(sqlite_cli("run", "bm25", "--bench", "byo-divisors", "--fields", "name"))
    _error(sqlite_cli("run", "drop", "bm25 (name)"), "not an imported run")
    assert _count(sqlite_cli.url, EngineConfig, EngineConfig.engine == "run") == 0


def test_our_own_export_is_read_back_through_docnos(sqlite_cli, tmp_path):
    """Placeholders (repeats) of engines score --trec come back as non-resolving names at
    their ranks; DOCNOs are decoded through docnos.tsv (also via --docnos from elsewhere)."""
    _example(sqlite_cli)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"qid": "q1-lean", "ranked": ["Nat.Perfect", "Nat.Perfect", "Nat.Prime.divisors", "ℕ.λ x"]}) + "\n")
    _ok(sqlite_cli("run", "import", path, "--bench", "byo-divisors", "--name", "orig"))
    trec = tmp_path / "trec"
    _ok(sqlite_cli("score", "--bench", "byo-divisors", "--trec", trec))
    run_file = trec / "run.orig.txt"
    assert "!dup!2" in run_file.read_text() and "%CE%BB" in run_file.read_text()
    moved = tmp_path / "elsewhere" / "run.orig.txt"
    moved.parent.mkdir()
    shutil.copy(run_file, moved)
    _ok(sqlite_cli("run", "import", moved, "--bench", "byo-divisors", "--name", "back", "--docnos", trec / "docnos.tsv"))
    doc = _doc(sqlite_cli, tmp_path)
    a, b = (next(s for s in doc["systems"] if s["id"] == n) for n in ("orig", "back"))
    assert a["per_query"] == b["per_query"] and a["metrics"] == b["metrics"] and a["result_cap"] == b["result_cap"] == 4
    db = open_database(sqlite_cli.url)
    try:
        with db.session() as s:
            names = list(s.execute(
                sa.select(Hit.name).join(Answer).join(EngineConfig).where(EngineConfig.label == "back").order_by(Hit.rank)
            ).scalars())
    finally:
        db.dispose()
    assert names == ["Nat.Perfect", "!dup!2", "Nat.Prime.divisors", "ℕ.λ x"]



def test_perf_script_runs_at_a_small_size():
    """perf/run_import.py cannot rot: it runs end to end at a tiny size (no timing asserted)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "perf" / "run_import.py"), "--queries", "30", "--names", "5"],
                          capture_output=True, text=True, cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "30 queries × 5 names = 150 hits" in proc.stdout and "ratio" in proc.stdout
