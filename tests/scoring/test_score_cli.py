"""`engines score` through typer's CliRunner against a real SQLite cache (shipped
benchmarks, real Mathlib slice, answers written with store.writes.add_answer)."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.support.scoring import (  # noqa: F401  (fixtures)
    answer_all, bench_queries, cache, cache_url, filler, gold_name, make_config, prepared_cache,
)

runner = CliRunner()


@pytest.fixture(scope="module")
def populated_file(prepared_cache, tmp_path_factory):
    """Three systems with seeded random rankings: gold somewhere in the top 60 or missing,
    duplicates and unresolvable names mixed in; one capped at 50, one missing answers.
    Built once per module; each test gets its own copy of the file."""
    from store.db import open_database

    path = tmp_path_factory.mktemp("score-cli") / "populated.db"
    shutil.copyfile(prepared_cache, path)
    db = open_database(f"sqlite:///{path}")
    qs = bench_queries(db, "mathlibqr")
    rng = random.Random(5)

    def ranking_for(seed: int, cap: int | None, skip: float):
        r = random.Random(seed)

        def ranking(q):
            if r.random() < skip:
                return None
            names = filler(r.randint(0, 60), tag=str(q.id))
            if r.random() < 0.75:
                names.insert(r.randrange(len(names) + 1), gold_name(q))
            if names and r.random() < 0.3:
                names.insert(1, names[0])  # a duplicate keeps its slot
            return names[:cap] if cap else names
        return ranking

    answer_all(db, make_config(db, "alpha"), qs, ranking_for(1, None, 0.0), latency=lambda q: rng.uniform(10, 100))
    answer_all(db, make_config(db, "beta", result_cap=50, licence="CC-BY-NC-4.0"), qs, ranking_for(2, 50, 0.0))
    answer_all(db, make_config(db, "gamma", local=True), qs, ranking_for(3, None, 0.1))
    with db.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db.dispose()
    return path


@pytest.fixture
def populated(populated_file, tmp_path):
    dst = tmp_path / "cache.db"
    shutil.copyfile(populated_file, dst)
    return f"sqlite:///{dst}"


def invoke(url, *args):
    return runner.invoke(app, ["--db", url, "score", *args])


def test_table_json_and_trec_roundtrip(populated, tmp_path):
    import ir_measures
    from ir_measures import AP, RR, P, R, nDCG

    out_json = tmp_path / "score.json"
    trec = tmp_path / "trec"
    res = invoke(populated, "--bench", "mathlibqr", "--json", str(out_json), "--trec", str(trec),
                 "--by", "difficulty", "--compare", "alpha", "beta")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "DEVELOPMENT SLICE — NOT A RESULT" in out
    for sid in ("alpha", "beta", "gamma"):
        assert sid in out
    assert "k≤50" in out and "incomplete" in out and "CC-BY-NC-4.0" in out
    assert "by difficulty" in out and "paired bootstrap" in out
    assert "922" in out and "24" in out  # n and dropped beside every row

    doc = json.loads(out_json.read_text(encoding="utf-8"))
    assert doc["schema"] == "engines.score/1" and doc["profile"] == "main"
    assert doc["bootstrap"]["resamples"] == 1000 and isinstance(doc["bootstrap"]["seed"], int)
    for key in ("generated_at", "code_version", "k_max", "benchmark", "corpus", "subset", "banner",
                "systems", "queries", "comparisons"):
        assert key in doc
    systems = {s["id"]: s for s in doc["systems"]}
    assert set(systems) == {"alpha", "beta", "gamma"}
    for s in systems.values():
        for key in ("engine", "config_hash", "params", "epoch", "local", "licence", "result_cap", "n", "dropped",
                    "unanswered", "badges", "latency_p95_ms", "resolution", "coverage", "metrics", "curves",
                    "pr", "breakdowns", "per_query"):
            assert key in s
        assert set(s["curves"]) >= {"k", "R", "R_lo", "R_hi", "nDCG", "nDCG_lo", "nDCG_hi", "P", "Covered"}
        assert len(s["pr"]["precision"]) == 11
    assert systems["gamma"]["unanswered"] > 0 and systems["gamma"]["local"] is True
    assert systems["beta"]["metrics"]["R@100"]["value"] is None
    assert {c["metric"] for c in doc["comparisons"]} >= {"nDCG@10", "R@10", "MRR"}

    # The TREC files, read back by ir_measures, give our numbers (unanswered queries
    # have no run lines; ir_measures scores them 0, as we do).
    qrels = list(ir_measures.read_trec_qrels(str(trec / "qrels.txt")))
    assert len(qrels) == 922
    for sid, s in systems.items():
        path = trec / f"run.{sid}.txt"
        lines = path.read_text(encoding="utf-8").splitlines()
        by_q: dict[str, list[float]] = {}
        for ln in lines:
            qid, _, _, _, sc, tag = ln.split()
            assert tag == sid
            by_q.setdefault(qid, []).append(float(sc))
        assert all(all(a > b for a, b in zip(v, v[1:])) for v in by_q.values())  # strictly decreasing
        run = list(ir_measures.read_trec_run(str(path)))
        ks = (1, 5, 10, 50) + (() if s["result_cap"] else (100,))
        measures = [RR, AP] + [M @ k for k in ks for M in (R, nDCG)] + [P @ 10]
        agg = ir_measures.calc_aggregate(measures, qrels, run)
        got = {str(m): v for m, v in agg.items()}
        assert got["RR"] == pytest.approx(s["metrics"]["MRR"]["value"], abs=1e-9)
        assert got["AP"] == pytest.approx(s["metrics"]["MAP"]["value"], abs=1e-9)
        for k in ks:
            assert got[f"R@{k}"] == pytest.approx(s["metrics"][f"R@{k}"]["value"], abs=1e-9)
            assert got[f"nDCG@{k}"] == pytest.approx(s["curves"]["nDCG"][k - 1], abs=1e-9)
        assert got["P@10"] == pytest.approx(s["curves"]["R"][9] / 10, abs=1e-9)


def test_shared_with_name_list_adds_coverage_column(populated, tmp_path):
    lst = tmp_path / "engine-snapshot.txt"
    lst.write_text("Lattice\nGaloisConnection.l_iSup\n", encoding="utf-8")
    res = invoke(populated, "--bench", "mathlibqr", "--shared-with", str(lst), "--snapshot", f"alpha={lst}")
    assert res.exit_code == 0, res.output
    assert "coverage" in res.stdout and "different corpus" in res.stdout
    assert "0.010" in res.stdout  # 2 of 200 gold names in alpha's snapshot


def test_subset_system_filter_and_profile(populated):
    res = invoke(populated, "--bench", "mathlibqr", "--subset", "shared171", "--system", "alpha")
    assert res.exit_code == 0, res.output
    assert "alpha" in res.stdout and "beta" not in res.stdout and "800" in res.stdout
    res = invoke(populated, "--bench", "mathlibqr", "--profile", "mamut")
    assert res.exit_code == 0, res.output
    assert "P@10" in res.stdout and "F1" in res.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bench", "nope"], "no benchmark named 'nope'"),
        (["--bench", "mathlibqr", "--compare", "alpha", "ghost"], "--compare: no system 'ghost'"),
        (["--bench", "mathlibqr", "--by", "colour"], "--by 'colour'"),
        (["--bench", "mathlibqr", "--subset", "nope"], "no subset named 'nope'"),
        (["--bench", "mathlibqr", "--snapshot", "alpha"], "expected SYSTEM=CORPUS_OR_FILE"),
        (["--bench", "mathlibqr", "--shared-with", "missing.txt"], "name list missing.txt does not exist"),
    ],
)
def test_errors_are_one_line(populated, args, message):
    res = invoke(populated, *args)
    assert res.exit_code == 1
    assert message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.output


def test_empty_database_says_what_to_do(cache_url):
    res = invoke(cache_url, "--bench", "mathlibqr")
    assert res.exit_code == 1  # issue 22: like engines plot, nothing to rank is a failure
    assert "no system has answers" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error: ")
