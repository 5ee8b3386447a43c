"""Units that share a returned row (METHODOLOGY.md): hand-worked cases, the pure and the
vectorised layers agreeing, every figure in [0, 1], and MathlibMPR's overlapping items
scored from a real database."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from scoring.matching import credit_positions, has_overlap, match_rows
from scoring.metrics import (
    QueryMatrix, average_precision, covered_at_k, interpolated_pr, ndcg_at_k, per_query_curves,
    precision_at_k, recall_at_k, reciprocal_rank,
)
from scoring.positions import unit_positions
from tests.support.scoring import (  # noqa: F401  (fixtures)
    answer_all, bench_queries, cache, cache_url, make_config, prepared_cache,
)

L3 = 1 / math.log2(3)
L5 = 1 / math.log2(5)

# Two premise groups sharing the name "s" (an alternative route reuses a lemma).
UNITS = [("a", "s"), ("s", "b")]


def figures(ranked, units, k):
    pos = unit_positions(ranked, units)
    cr = credit_positions(ranked, units)
    return pos, cr, {
        "R": recall_at_k(pos, k), "P": precision_at_k(pos, k, cr), "nDCG": ndcg_at_k(pos, k, cr),
        "AP": average_precision(pos, cr), "RR": reciprocal_rank(pos), "Cov": covered_at_k(pos, k),
    }


def test_one_row_hitting_two_groups_is_credited_once():
    ranked = [(1, "s")]
    pos, cr, f = figures(ranked, UNITS, 1)
    assert pos == [1, 1] and cr == [1]
    # The plain formulas give P@1 = 2 and nDCG@1 = 2 here.
    assert precision_at_k(pos, 1) == 2.0 and ndcg_at_k(pos, 1) == 2.0
    # Recall-type: both groups count (what the proof needs); precision-type: one row, one credit.
    assert f["R"] == 1.0 and f["Cov"] == 1.0 and f["RR"] == 1.0
    assert f["P"] == 1.0 and f["nDCG"] == 1.0
    assert f["AP"] == 0.5  # (1/|G|) · 1/1
    assert ndcg_at_k(pos, 2, cr) == pytest.approx(1 / (1 + L3))
    assert precision_at_k(pos, 2, cr) == 0.5


def test_a_later_row_augments_the_matching():
    # s at 1 takes group 0 first; a at 2 belongs to group 0 only, so s moves to group 1.
    assert match_rows([(1, "s"), (2, "a")], UNITS) == {1: 1, 2: 0}
    pos, cr, f = figures([(1, "s"), (2, "a")], UNITS, 2)
    assert pos == [1, 1] and cr == [1, 2]
    assert f["P"] == 1.0 and f["nDCG"] == pytest.approx(1.0) and f["AP"] == 1.0
    assert precision_at_k(pos, 1, cr) == 1.0  # h₁(1) = 1 already


def test_duplicates_of_a_shared_row_do_not_credit_its_second_group():
    ranked = [(1, "s"), (2, "s"), (3, "x"), (4, "b")]
    pos, cr, f = figures(ranked, UNITS, 4)
    assert pos == [1, 1] and cr == [1, 4]
    assert precision_at_k(pos, 2, cr) == 0.5  # the repeat at 2 earns nothing
    assert f["P"] == 0.5 and f["AP"] == pytest.approx((1 / 1 + 2 / 4) / 2)
    assert f["nDCG"] == pytest.approx((1 + L5) / (1 + L3))


def test_three_groups_one_shared_by_all():
    units = [("s",), ("s",), ("s", "t")]
    ranked = [(1, "s"), (2, "t")]
    pos, cr, f = figures(ranked, units, 2)
    assert pos == [1, 1, 1] and cr == [1, 2]
    assert f["R"] == 1.0 and f["Cov"] == 1.0
    assert precision_at_k(pos, 1, cr) == 1.0 and f["P"] == 1.0
    assert f["AP"] == pytest.approx((1 + 1) / 3)
    # IDCG@2 caps at min(2, |G| = 3) = 2 positions.
    assert f["nDCG"] == pytest.approx(1.0)
    assert ndcg_at_k(pos, 3, cr) == pytest.approx((1 + L3) / (1 + L3 + 0.5))


def test_disjoint_units_are_unchanged():
    units = [("a",), ("b",), ("c",)]
    ranked = [(2, "b"), (1, "x"), (5, "a"), (6, "b")]
    pos = unit_positions(ranked, units)
    cr = credit_positions(ranked, units)
    assert not has_overlap(units) and has_overlap(UNITS)
    assert cr == sorted(p for p in pos if p is not None)
    for k in (1, 2, 5, 10):
        assert precision_at_k(pos, k, cr) == precision_at_k(pos, k)
        assert ndcg_at_k(pos, k, cr) == ndcg_at_k(pos, k)
    assert average_precision(pos, cr) == average_precision(pos)


def _random_case(rng: random.Random):
    vocab = [f"n{i}" for i in range(8)]
    units = [tuple(rng.sample(vocab, rng.randint(1, 3))) for _ in range(rng.randint(1, 5))]
    ranked = [(r, rng.choice(vocab + ["junk", None])) for r in range(1, rng.randint(0, 15) + 1)]
    return units, ranked


def test_property_every_figure_in_unit_interval_and_layers_agree():
    rng = random.Random(15)
    cases = [_random_case(rng) for _ in range(400)]
    positions = [unit_positions(r, u, 20) for u, r in cases]
    credits = [credit_positions(r, u, 20) for u, r in cases]
    curves = per_query_curves(QueryMatrix.from_lists(positions, None, credits), k_max=20)
    overlaps = 0
    for i, ((units, ranked), pos, cr) in enumerate(zip(cases, positions, credits)):
        overlaps += has_overlap(units)
        # h₁ never exceeds either side of the bipartite graph, nor h.
        assert len(cr) <= min(len(units), sum(p is not None for p in pos))
        for k in (1, 3, 7, 20):
            vals = {
                "R": recall_at_k(pos, k), "P": precision_at_k(pos, k, cr), "nDCG": ndcg_at_k(pos, k, cr),
                "Cov": covered_at_k(pos, k),
            }
            for name, v in vals.items():
                assert 0.0 <= v <= 1.0 + 1e-12, (name, units, ranked, k, v)
            assert curves.precision[i, k - 1] == pytest.approx(vals["P"])
            assert curves.ndcg[i, k - 1] == pytest.approx(vals["nDCG"])
            assert curves.recall[i, k - 1] == pytest.approx(vals["R"])
        assert 0.0 <= average_precision(pos, cr) <= 1.0 + 1e-12
        assert curves.ap[i] == pytest.approx(average_precision(pos, cr))
        assert curves.rr[i] == pytest.approx(reciprocal_rank(pos))
        assert np.allclose(curves.pr[i], interpolated_pr(pos, 20, cr))
    assert overlaps > 100  # the generator really exercises shared names
    for arr in (curves.recall, curves.precision, curves.ndcg, curves.covered, curves.ap, curves.pr):
        assert arr.min() >= 0.0 and arr.max() <= 1.0 + 1e-12


def _max_matching(rows: list[list[int]]) -> int:
    def best(i: int, used: frozenset) -> int:
        if i == len(rows):
            return 0
        out = best(i + 1, used)
        for j in rows[i]:
            if j not in used:
                out = max(out, 1 + best(i + 1, used | {j}))
        return out
    return best(0, frozenset())


def test_matching_is_maximum_against_brute_force():
    rng = random.Random(7)
    for _ in range(300):
        units, ranked = _random_case(rng)
        got = match_rows(ranked, units)
        seen, rows = set(), []
        for r, n in sorted((r, n) for r, n in ranked if n is not None):
            if n not in seen:  # first occurrences only
                seen.add(n)
                rows.append((r, [j for j, u in enumerate(units) if n in u]))
        for k in range(1, 16):
            assert sum(1 for r in got if r <= k) == _max_matching([js for r, js in rows if r <= k])


# ------------------------------------------------------------- real database, MathlibMPR


def test_mathlibmpr_overlapping_items_from_the_database(cache):
    from scoring.results import score

    qs = bench_queries(cache, "mathlibmpr")
    shared = {}
    for q in qs:
        count: dict[str, int] = {}
        for u in q.gold_units:
            for nm in {n.name for n in u.names}:
                count[nm] = count.get(nm, 0) + 1
        names = [nm for nm, c in count.items() if c > 1]
        if names:
            shared[q.id] = names[0]
    assert len(shared) == 6  # METHODOLOGY.md: six MathlibMPR items

    cid = make_config(cache, "sharer")
    # Only the shared premise, at rank 1, then a duplicate of it.
    answer_all(cache, cid, qs, lambda q: [shared[q.id], shared[q.id]] if q.id in shared else ["Not.There"])
    doc = score(cache, "mathlibmpr").to_json()
    s = doc["systems"][0]
    by_qid = {q.qid: q for q in qs}
    over = [qj for qj in doc["queries"] if by_qid[qj["qid"]].id in shared
            and sum(shared[by_qid[qj["qid"]].id] in g for g in qj["gold"]) > 1]
    assert doc["overlapping_units"] == doc["scope"]["overlapping_units"] >= len(over) > 0
    for qj in over:
        pq = s["per_query"][qj["qid"]]
        assert pq["credited"] == [1]
        assert sum(p == 1 for p in pq["positions"]) >= 2
    n = s["n"]
    # One credited row per overlapping query at rank 1: P@5 = (1/5) · |over| / n, never above 1.
    assert s["metrics"]["P@5"]["value"] == pytest.approx(len(over) / 5 / n)
    for name, m in s["metrics"].items():
        if m["value"] is not None:
            assert 0.0 <= m["value"] <= 1.0


def test_shared_with_narrows_a_group_to_its_shared_names(cache, tmp_path):
    import sqlalchemy as sa

    from scoring.results import score
    from store.models import Declaration

    qs = bench_queries(cache, "mathlibmpr")
    with cache.session() as s:
        present = set(s.execute(sa.select(Declaration.full_name)).scalars())
    # A query with a group holding two names in the corpus, and at least one other group.
    pick = None
    for q in qs:
        units = [[n.name for n in u.names if n.name in present] for u in q.gold_units]
        units = [u for u in units if u]
        two = [u for u in units if len(u) >= 2]
        if two and len(units) >= 2:
            pick = (q, two[0], next(u for u in units if u is not two[0]))
            break
    assert pick is not None
    q, group, other = pick
    first, second = group[0], group[1]
    # The snapshot holds the group's second name only, and none of the other group's names.
    lst = tmp_path / "snapshot.txt"
    lst.write_text(second + "\n", encoding="utf-8")
    cid = make_config(cache, "narrow")
    answer_all(cache, cid, [q], lambda _: [first, "Not.There", second] + list(other))
    full = score(cache, "mathlibmpr", systems=["narrow"]).to_json()
    qj_full = next(x for x in full["queries"] if x["qid"] == q.qid)
    j = next(i for i, names in enumerate(qj_full["gold"]) if first in names)
    assert full["systems"][0]["per_query"][q.qid]["positions"][j] == 1
    doc = score(cache, "mathlibmpr", systems=["narrow"], shared_with=[str(lst)]).to_json()
    qj = next(x for x in doc["queries"] if x["qid"] == q.qid)
    # Before issue 15 the whole group was kept (hit by `first` at rank 1) and every other
    # group of the query was dropped; now the group is narrowed to `second`, hit at rank 3.
    assert qj["gold"] == [[second]]
    pq = doc["systems"][0]["per_query"][q.qid]
    assert pq["positions"] == [3] and pq["credited"] == [3]
    assert doc["systems"][0]["metrics"]["MRR"]["value"] == pytest.approx(1 / 3 / doc["systems"][0]["n"])
