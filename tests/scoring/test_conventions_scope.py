"""Issue 34 items 4-6: a benchmark that resolves nothing, runs on their own benchmark
only, other harnesses' conventions (--uncovered, subsets of qids, --answered-by, the
import's counts) and published rows on another corpus. Real SQLite databases, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.support.conventions import DATA, _doc, _error, _example, _gold, _ok, _row, cli  # noqa: F401
from tests.support.scoring import (  # noqa: F401  (fixtures)
    answer_all, bench_queries, cache, cache_url, filler, gold_name, make_config, prepared_cache,
)


def _beir(root: Path, ids: list[str]) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": f"query number {i}"}) + "\n" for i in range(len(ids))))
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\t{cid}\t1\n" for i, cid in enumerate(ids)))
    return root


# --------------------------------------------------------- 4. resolves nothing


def test_benchmark_that_resolves_nothing_is_one_line(cli, tmp_path):
    """corpus-ids that are not declaration names, no corpus.jsonl: bench load says what
    would fix it (exit 1, nothing loaded); scored anyway (loaded before the corpus), n = 0
    is one line and exit 1 too, in score, report and plot."""
    beir = _beir(tmp_path / "beir", [f"doc-{i}" for i in range(5)])
    _ok(cli("corpus", "load", DATA / "corpus.jsonl", "--name", "divisors", "--revision", "028964f2c6f0"))
    _error(cli("bench", "load", beir, "--name", "ids"), "none of its 5 gold names", "corpus.jsonl", "nothing was loaded")
    assert "ids" not in _ok(cli("bench", "list")).stdout
    # Loaded into a database with no corpus yet (allowed: it cannot be checked), then scored.
    other = CliRunner()
    url = f"sqlite:///{tmp_path / 'b.db'}"

    def run(*a):
        return other.invoke(app, [str(x) for x in a], env={"ENGINES_DATABASE_URL": url})

    _ok(run("bench", "load", beir, "--name", "ids"))
    _ok(run("corpus", "load", DATA / "corpus.jsonl", "--name", "divisors", "--revision", "028964f2c6f0"))
    (tmp_path / "r.jsonl").write_text(json.dumps({"qid": "q0", "ranked": ["Nat.Perfect"]}) + "\n")
    _ok(run("run", "import", tmp_path / "r.jsonl", "--bench", "ids", "--name", "r"))
    for cmd in (["score"], ["report", "--out", tmp_path / "rep"], ["plot", "--out", tmp_path / "p.svg"]):
        _error(run(*cmd, "--bench", "ids"), "none of its 5 queries in scope has a gold name", "n = 0", "corpus.jsonl")


def test_imported_run_shows_only_on_its_own_benchmark(cli, tmp_path):
    """Two benchmarks sharing a query text: a run imported for one is not a row of the other."""
    _example(cli)
    bench = tmp_path / "other.jsonl"
    bench.write_text(json.dumps({"qid": "x1", "query": "n is perfect iff the sum of its proper divisors is n",
                                 "gold": ["Nat.perfect_iff_sum_properDivisors"]}) + "\n")
    _ok(cli("bench", "load", bench, "--name", "other"))
    _ok(cli("run", "import", DATA / "my-run.trec", "--bench", "byo-divisors", "--name", "my-run"))
    assert "my-run" in _ok(cli("score", "--bench", "byo-divisors")).stdout
    _error(cli("score", "--bench", "other"), "no system has answers")


# ------------------------------------------------ 5. other harnesses' conventions


def test_uncovered_zero_subset_of_qids_and_answered_by(cli, tmp_path):
    """--uncovered zero keeps the queries whose gold is not in the corpus in n, scored 0
    (drop × n_drop / n_zero), and says so; a subset from a list of qids; --answered-by."""
    _ok(cli("corpus", "load", DATA / "corpus.jsonl", "--name", "divisors", "--revision", "028964f2c6f0"))
    bench = tmp_path / "b.jsonl"
    rows = [{"qid": "a", "query": "divisors of n", "gold": ["Nat.divisors"]},
            {"qid": "b", "query": "n is perfect", "gold": ["Nat.Perfect"]},
            {"qid": "c", "query": "no such lemma", "gold": ["Not.In.This.Corpus"]}]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _ok(cli("bench", "load", bench, "--name", "b"))
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps({"qid": "a", "ranked": ["Nat.divisors", "Not.Here"]}) + "\n"
                   + json.dumps({"qid": "c", "ranked": ["Nat.Perfect", "Also.Not.Here"]}) + "\n")
    res = _ok(cli("run", "import", run, "--bench", "b", "--name", "part"))
    assert "2 of 3 queries answered (2 of 3 distinct query texts)" in res.stderr
    assert "corpus divisors@028964f2c6f0 does not hold 2 of the 4 distinct returned names" in res.stderr
    full = tmp_path / "full.jsonl"
    full.write_text("".join(json.dumps({"qid": q, "ranked": [g]}) + "\n"
                            for q, g in (("a", "Nat.divisors"), ("b", "Nat.Perfect"), ("c", "X"))))
    _ok(cli("run", "import", full, "--bench", "b", "--name", "full"))

    def doc(*extra):
        out = _ok(cli("score", "--bench", "b", "--json", "-", *extra))
        return json.loads(out.stdout), out

    drop, _ = doc()
    zero, out = doc("--uncovered", "zero")
    assert _row(drop, "full")["n"] == 2 and _row(drop, "full")["dropped"] == 1
    z = _row(zero, "full")
    assert z["n"] == 3 and z["dropped"] == 0 and z["uncovered"] == 1 and "uncovered scored 0 (1)" in z["badges"]
    for m in ("R@1", "MRR"):  # the other harness's figure = ours × n_drop / n_zero
        assert z["metrics"][m]["value"] == pytest.approx(_row(drop, "full")["metrics"][m]["value"] * 2 / 3)
    assert zero["scope"]["uncovered_qids"] == ["c"] and "stay in n, scored 0" in out.stderr
    _error(cli("score", "--bench", "b", "--uncovered", "keep"), "--uncovered 'keep'")
    # A subset of qids, as another harness scored them (unknown qid: refused at its line).
    qids = tmp_path / "qids.txt"
    qids.write_text("# theirs\nb\nc\n")
    res = _ok(cli("bench", "subset", "theirs", "--bench", "b", "--qids", qids))
    assert "subset theirs of b: 2 queries" in res.stderr
    sub, _ = doc("--subset", "theirs", "--uncovered", "zero")
    assert [q["qid"] for q in sub["queries"]] == ["b", "c"] and _row(sub, "full")["n"] == 2
    (tmp_path / "bad.txt").write_text("a\nzz\n")
    _error(cli("bench", "subset", "bad", "--bench", "b", "--qids", tmp_path / "bad.txt"), "bad.txt:2", "'zz'")
    # --answered-by: only the texts the partial run answered.
    ab, out = doc("--answered-by", "part")
    assert [q["qid"] for q in ab["queries"]] == ["a"] and ab["scope"]["answered_by"] == {"system": "part", "texts": 2}
    assert "--answered-by part" in out.stderr
    _ok(cli("report", "--bench", "b", "--answered-by", "part", "--uncovered", "zero", "--out", tmp_path / "rep"))
    page = (tmp_path / "rep" / "index.html").read_text("utf-8")
    assert "--answered-by" in page and "--uncovered zero" in page


# ------------------------------------------------------------ 6. published rows


def test_published_row_on_another_corpus_carries_the_badge(cache, cache_url, tmp_path):
    """Legendre m1 was computed on mathlib-4280: on the slice it appears only badged
    "different corpus", in the table, the JSON, the report and the plot."""
    from scoring.reference_rows import attach

    qs = bench_queries(cache, "mathlibqr")
    answer_all(cache, make_config(cache, "sys"), qs, lambda q: filler(q.id % 3) + [gold_name(q)])
    runner = CliRunner()
    args = ["--db", cache_url, "score", "--bench", "mathlibqr", "--published", "--json", "-"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    (src,) = json.loads(res.stdout)["published"]
    assert src["id"] == "legendre-m1" and src["different_corpus"] is True
    assert all(r["badges"] == ["different corpus"] for r in src["rows"])
    table = runner.invoke(app, args[:-2]).stdout
    assert "(published) different corpus" in table
    res = runner.invoke(app, ["--db", cache_url, "report", "--bench", "mathlibqr", "--published", "--out", tmp_path / "r"])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "r" / "index.html").read_text("utf-8")
    pub = page[page.index('id="published"'):]
    assert pub.count('<span class="badge diffcorpus">different corpus</span>') == len(src["rows"])
    res = runner.invoke(app, ["--db", cache_url, "plot", "--bench", "mathlibqr", "--published", "--out", tmp_path / "f.svg"])
    assert res.exit_code == 0, res.output
    assert "different corpus" in (tmp_path / "f.svg").read_text("utf-8")
    # Scored against the corpus the source names: no badge.
    doc = attach({"profile": "main", "benchmark": {"name": "mathlibqr"}, "subset": None, "scope": {},
                  "corpus": {"name": "mathlib-4280", "revision": "c5f07cc71d42"}})
    assert doc["published"][0]["rows"][0]["badges"] == [] and doc["published"][0]["different_corpus"] is False
