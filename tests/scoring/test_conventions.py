"""Issue 34 items 1-3: run files as other tools write them, scored by conventions a user
can see and choose — the depth a run was asked for, the order of a TREC run, the formats
people already have (BOM, ranx JSON, JSONL scores, stdin, ``--json -``). Through the CLI
on real databases; the scores of an imported run are checked against ir_measures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from store.db import open_database
from store.models import EngineConfig
from tests.support.scoring import (  # noqa: F401  (fixtures)
    answer_all, bench_queries, cache, cache_url, gold_name, prepared_cache,
)
from tests.support.conventions import DATA, _doc, _error, _example, _gold, _ok, _row, cli  # noqa: F401  (fixtures)

BOM = "\ufeff"
QIDS = [f"q{i}-{st}" for i in range(1, 5) for st in ("lean", "natural")]


# ------------------------------------------------------------------ 1. depth


def test_short_lists_depth_from_what_was_asked(cli, tmp_path):
    """A run of at most 3 names a query: by default its depth is the longest list (k≤3,
    nDCG@10 undefined, listed after the ranked rows with a note in the table, JSON and
    report); --depth 10 says it was asked for 10, and it is ranked like trec_eval's."""
    _example(cli)
    _ok(cli("run", "bm25", "--bench", "byo-divisors", "--fields", "name"))
    gold = _gold(cli)
    run = tmp_path / "three.trec"
    run.write_text("".join(f"{q} Q0 {n} {r} {4 - r} t\n" for q in QIDS
                           for r, n in enumerate(["Not.A.Name", gold[q], "Nat.divisors"], start=1)))
    res = _ok(cli("run", "import", run, "--bench", "byo-divisors", "--name", "three"))
    assert "depth: 3 (the longest list); metrics at k > 3 are undefined" in res.stderr
    assert "--depth 10" in res.stderr
    doc, out = _doc(cli)
    three = doc["systems"][-1]
    assert three["id"] == "three" and three["metrics"]["nDCG@10"]["value"] is None and "k≤3" in three["badges"]
    assert "nDCG@10 is undefined" in three["order_note"] and "--depth 10" in three["order_note"]
    assert "note: three is listed after the ranked rows: nDCG@10 is undefined" in out.stderr
    table = _ok(cli("score", "--bench", "byo-divisors")).stdout
    assert table.index("bm25") < table.index("three")
    _ok(cli("report", "--bench", "byo-divisors", "--out", tmp_path / "rep"))
    assert "three is listed after the ranked rows" in (tmp_path / "rep" / "index.html").read_text("utf-8")
    # Asked for 10: every metric to k = 10 is defined; the gold at rank 2 everywhere.
    _error(cli("run", "import", run, "--bench", "byo-divisors", "--name", "ten", "--depth", "2"),
           "--depth 2", "lists 3 names", "--depth 3 or more")
    res = _ok(cli("run", "import", run, "--bench", "byo-divisors", "--name", "ten", "--depth", "10"))
    assert "depth: 10 (--depth)" in res.stderr
    doc, _ = _doc(cli)
    ten = _row(doc, "ten")
    assert ten["result_cap"] == 10 and ten["metrics"]["nDCG@10"]["value"] == pytest.approx(1 / 1.584962500721156)
    assert ten["metrics"]["R@10"]["value"] == 1.0 and ten["metrics"]["R@50"]["value"] is None
    assert "order_note" not in ten and doc["systems"][-1]["id"] == "three"
    # The same file again with another --depth: the depth is updated, nothing else.
    res = _ok(cli("run", "import", run, "--bench", "byo-divisors", "--name", "ten", "--depth", "200"))
    assert "depth set to k_max" in res.stderr and "depth: complete to k_max = 200" in res.stderr
    assert _row(_doc(cli)[0], "ten")["metrics"]["R@100"]["value"] == 1.0


def test_crawled_depth_is_num_results_capped_by_the_service(cache):
    """A crawled configuration's depth is its num_results (min the service's cap)."""
    from engines.base import config_hash
    from scoring.results import score
    from scoring.systems import depth
    from store.writes import ensure_config

    assert depth("leanexplore", {"num_results": 20}, None) == 20
    assert depth("leansearch", {"num_results": 100}, 50) == 50
    assert depth("bm25", {"num_results": 20}, None, local=True) is None
    qs = bench_queries(cache, "mathlibqr")[:30]
    for engine, asked, cap in (("leanexplore", 20, None), ("leansearch", 100, 50)):
        with cache.session() as s, s.begin():
            params = {"num_results": asked}
            cid = ensure_config(s, engine=engine, endpoint_version="v2", params=params,
                                config_hash=config_hash({"engine": engine, **params}), label=engine,
                                result_cap=cap).id
        answer_all(cache, cid, qs, lambda q: [gold_name(q)])
    doc = score(cache, "mathlibqr", systems=["leanexplore", "leansearch"]).to_json()
    le, ls = (_row(doc, n) for n in ("leanexplore", "leansearch"))
    assert le["result_cap"] == 20 and "k≤20" in le["badges"] and le["metrics"]["R@50"]["value"] is None
    assert ls["result_cap"] == 50 and ls["metrics"]["R@50"]["value"] is not None


# ------------------------------------------------------------------ 2. order


def test_constant_rank_column_needs_order_score_ties_as_trec_eval(cli, tmp_path):
    """Every rank 0: refused, naming --order score; with it, lists sort by score and ties
    break by DOCNO descending, as trec_eval (pytrec_eval through ir_measures) does."""
    import ir_measures
    from ir_measures import RR, R, nDCG

    _example(cli)
    gold = _gold(cli)
    lines = []
    for i, q in enumerate(QIDS):
        # The gold ties with "Aaa.first" (sorts before it: trec_eval puts it after) on even
        # queries and with "Zzz.last" (sorts after it: trec_eval puts it first) on odd ones.
        tie = "Aaa.first" if i % 2 == 0 else "Zzz.last"
        lines += [f"{q} Q0 Top.one 0 9.5 t", f"{q} Q0 {tie} 0 5 t", f"{q} Q0 {gold[q]} 0 5.0 t", f"{q} Q0 Low.x 0 1 t"]
    run = tmp_path / "constant.trec"
    run.write_text("\n".join(lines) + "\n")
    _error(cli("run", "import", run, "--bench", "byo-divisors", "--name", "c"), "rank 0 repeated", "--order score")
    # Depth 10: trec_eval scores nDCG@10 of a 4-name list as a complete ranking.
    res = _ok(cli("run", "import", run, "--bench", "byo-divisors", "--name", "c", "--order", "score", "--depth", "10"))
    assert "ordered by score" in res.stderr
    doc, _ = _doc(cli, "--system", "c")
    per = _row(doc, "c")["per_query"]
    assert [per[q]["positions"] for q in QIDS] == [[2], [3]] * 4
    qrels = [ir_measures.Qrel(q, gold[q], 1) for q in QIDS]
    scored = [ir_measures.ScoredDoc(c[0], c[2], float(c[4])) for c in (ln.split() for ln in lines)]
    theirs = ir_measures.calc_aggregate([nDCG @ 10, R @ 1, R @ 5, RR], qrels, scored)
    m = _row(doc, "c")["metrics"]
    assert m["nDCG@10"]["value"] == pytest.approx(theirs[nDCG @ 10], abs=1e-12)
    assert m["R@1"]["value"] == pytest.approx(theirs[R @ 1]) and m["R@5"]["value"] == pytest.approx(theirs[R @ 5])
    assert m["MRR"]["value"] == pytest.approx(theirs[RR], abs=1e-12)
    # --order score reads other lists from the same bytes: its own configuration.
    _ok(cli("run", "import", DATA / "my-run.trec", "--bench", "byo-divisors", "--name", "m"))
    _ok(cli("run", "import", DATA / "my-run.trec", "--bench", "byo-divisors", "--name", "m", "--order", "score"))
    ids = sorted(s["id"] for s in _doc(cli)[0]["systems"] if s["id"].startswith("m#"))
    assert len(ids) == 2


# ------------------------------------------------------------------ 3. formats


def test_byte_order_marks_are_accepted_everywhere(cli, tmp_path):
    """A UTF-8 BOM at the start of a TREC run, a JSONL run, BEIR queries.jsonl and the
    qrels header (Windows editors write one) is skipped, not a qid or a broken line."""
    _ok(cli("corpus", "load", DATA / "corpus.jsonl", "--name", "divisors", "--revision", "028964f2c6f0"))
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "queries.jsonl").write_text(BOM + (DATA / "beir" / "queries.jsonl").read_text("utf-8"), "utf-8")
    (beir / "qrels" / "test.tsv").write_text(BOM + (DATA / "beir" / "qrels" / "test.tsv").read_text("utf-8"), "utf-8")
    res = _ok(cli("bench", "load", beir, "--name", "byo-divisors"))
    assert "queries 8" in res.stderr and "holds 4 of 4 gold names" in res.stderr
    trec = tmp_path / "bom.trec"
    trec.write_text(BOM + (DATA / "my-run.trec").read_text("utf-8"), "utf-8")
    _ok(cli("run", "import", trec, "--bench", "byo-divisors", "--name", "bom-trec"))
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_text(BOM + json.dumps({"qid": "q1-lean", "ranked": ["Nat.Perfect"]}) + "\n", "utf-8")
    res = _ok(cli("run", "import", jsonl, "--bench", "byo-divisors", "--name", "bom-jsonl"))
    assert "(jsonl)" in res.stderr
    doc, _ = _doc(cli)
    assert _row(doc, "bom-trec")["n"] == 8 and _row(doc, "bom-trec")["unanswered"] == 1


def test_ranx_json_jsonl_scores_and_stdin(cli, tmp_path):
    """ranx's ``{qid: {doc: score}}`` and JSONL lines with ``scores`` are ranked by score;
    ``-`` reads the run from standard input; ``--json -`` writes the JSON to stdout."""
    _example(cli)
    gold = _gold(cli)
    ranx = {q: {"Zzz.other": 0.5, gold[q]: 0.5, "Top.one": 0.9} for q in QIDS}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(ranx))
    res = _ok(cli("run", "import", path, "--bench", "byo-divisors", "--name", "ranx"))
    assert "(ranx)" in res.stderr and "8 of 8 queries answered" in res.stderr
    lines = "".join(json.dumps({"qid": q, "scores": {"Top.one": 2, gold[q]: 1.5}}) + "\n" for q in QIDS)
    res = _ok(cli("run", "import", "-", "--bench", "byo-divisors", "--name", "piped", input=lines.encode()))
    assert "(jsonl)" in res.stderr
    doc, res = _doc(cli)
    assert not (Path.cwd() / "-").exists()
    assert [_row(doc, "ranx")["per_query"][q]["positions"] for q in QIDS] == [[3]] * 8  # tie: Zzz.other first
    assert [_row(doc, "piped")["per_query"][q]["positions"] for q in QIDS] == [[2]] * 8
    assert "ranx" in res.stderr and "system" in res.stderr  # the table went to stderr
    with open_database(cli.url).session() as s:
        cfg = s.execute(sa.select(EngineConfig).where(EngineConfig.label == "piped")).scalar_one()
        assert cfg.params["sha256"] == __import__("hashlib").sha256(lines.encode()).hexdigest()
    _error(cli("run", "import", "-", "--bench", "byo-divisors", "--name", "empty", input=b""), "standard input")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"qid": "q1-lean", "scores": {"A": "high"}}) + "\n")
    _error(cli("run", "import", bad, "--bench", "byo-divisors", "--name", "bad"), "bad.jsonl:1", "not a number")
