"""TREC export: reversible, collision-free DOCNOs (Unicode names included), the mapping
file, and ir_measures reading qrels + runs back to our figures on MathlibQR and MathlibMPR."""

from __future__ import annotations

import json
import random
import re

import pytest

import benchmarks
from scoring.export import MAPPING_FILE, docno, export_trec, name_of, safe_token
from scoring.results import score
from tests.support.scoring import (  # noqa: F401  (fixtures)
    answer_all, bench_queries, cache, cache_url, filler, gold_name, make_config, prepared_cache,
)


def _slice_names(db) -> list[str]:
    import sqlalchemy as sa

    from store.models import Declaration

    with db.session() as s:
        return sorted(set(s.execute(sa.select(Declaration.full_name)).scalars()))


def test_docnos_are_reversible_and_collision_free_on_the_slice(cache):
    names = _slice_names(cache)
    old: dict[str, set[str]] = {}
    for n in names:
        old.setdefault(safe_token(n), set()).add(n)
    # The old token map collapsed distinct Unicode names (issue 15 counted 61 groups).
    assert sum(1 for v in old.values() if len(v) > 1) == 61
    docs = [docno(n) for n in names]
    assert len(set(docs)) == len(names)
    assert all(name_of(d) == n for d, n in zip(docs, names))
    assert all(re.fullmatch(r"[\x21-\x7e]+", d) and not d.startswith("!") for d in docs)
    assert docno("Nat.succ_le_iff") == "Nat.succ_le_iff"  # ASCII names stay readable
    assert docno("a b!") == "a%20b%21" and name_of("!dup!3") is None


def _unicode_filler(q, n):
    return [f"Not.In.Corpus.λ{q.id}.{i}" if i % 2 else f"Not.In.Corpus.x{q.id}.{i}" for i in range(n)]


def _read_back(trec, sid):
    import ir_measures

    qrels = list(ir_measures.read_trec_qrels(str(trec / "qrels.txt")))
    run = list(ir_measures.read_trec_run(str(trec / f"run.{sid}.txt")))
    return qrels, run


@pytest.mark.parametrize("bench", ["mathlibqr", "mathlibmpr"])
def test_ir_measures_reads_back_our_figures(cache, tmp_path, bench):
    import ir_measures
    from ir_measures import AP, RR, P, R, nDCG

    qs = bench_queries(cache, bench)
    rng = random.Random(15)
    gold_all = {n.name for q in qs for u in q.gold_units for n in u.names}
    # Unicode corpus rows that are nobody's gold: under the old export, some collapsed onto
    # a gold DOCNO and scored as hits.
    distractors = [n for n in _slice_names(cache) if any(ord(c) > 127 for c in n) and n not in gold_all]
    assert len(distractors) > 100

    def ranking(q):
        if rng.random() < 0.05:
            return None  # unanswered: scored 0 on both sides
        names = _unicode_filler(q, rng.randint(0, 30)) + rng.sample(distractors, 5)
        rng.shuffle(names)
        for u in q.gold_units:
            if rng.random() < 0.7:
                nm = rng.choice(u.names).name
                names.insert(rng.randrange(len(names) + 1), nm)
        if names and rng.random() < 0.3:
            names.insert(1, names[0])
        return names

    cid = make_config(cache, "sys")
    answer_all(cache, cid, qs, ranking)
    res = score(cache, bench)
    doc = res.to_json()
    s = doc["systems"][0]
    if bench == "mathlibqr":  # MathlibMPR's premises happen to be ASCII
        assert any(any(ord(c) > 127 for names in qj["gold"] for nm in names for c in nm) for qj in doc["queries"])
    trec = tmp_path / "trec"
    paths = export_trec(cache, res, trec)
    assert (trec / MAPPING_FILE) in paths
    mapping = dict(
        ln.split("\t", 1) for ln in (trec / MAPPING_FILE).read_text(encoding="utf-8").splitlines() if not ln.startswith("#")
    )
    qrels, run = _read_back(trec, "sys")
    for r in run:
        assert r.doc_id in mapping
        if not r.doc_id.startswith("!"):
            assert mapping[r.doc_id] == name_of(r.doc_id)
    # Every qrels DOCNO decodes to one of its group's names.
    gold_by_qid = {qj["qid"]: qj["gold"] for qj in doc["queries"]}
    for qr in qrels:
        nm = name_of(qr.doc_id)
        assert nm is None or any(nm in names for names in gold_by_qid[qr.query_id])

    ks = (1, 5, 10, 50, 100)
    measures = [RR, AP] + [M @ k for k in ks for M in (nDCG, P)]
    got = {str(m): v for m, v in ir_measures.calc_aggregate(measures, qrels, run).items()}
    assert got["RR"] == pytest.approx(s["metrics"]["MRR"]["value"], abs=1e-9)
    assert got["AP"] == pytest.approx(s["metrics"]["MAP"]["value"], abs=1e-9)
    for k in ks:
        assert got[f"nDCG@{k}"] == pytest.approx(s["curves"]["nDCG"][k - 1], abs=1e-9)
        # P@k: single-gold tasks do not show the P curve; it is R@k / k there.
        ours_p = s["curves"]["P"][k - 1] if s["curves"]["P"] is not None else s["curves"]["R"][k - 1] / k
        assert got[f"P@{k}"] == pytest.approx(ours_p, abs=1e-9)
    # R@k per query: equal wherever the query's groups are disjoint (see scoring.export).
    per_r = {(m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc([R @ k for k in ks], qrels, run)}
    checked = 0
    for qj in doc["queries"]:
        pq = s["per_query"][qj["qid"]]
        if "credited" in pq:
            continue
        for k in ks:
            ours = sum(p is not None and p <= k for p in pq["positions"]) / len(pq["positions"])
            assert per_r.get((qj["qid"], f"R@{k}"), 0.0) == pytest.approx(ours, abs=1e-12)
            checked += 1
    assert checked == 5 * (len(doc["queries"]) - doc["overlapping_units"]) and checked >= 50
