"""Hand-worked metric values, the pure/vectorised agreement, and an ir_measures cross-check."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from scoring import metrics as m
from scoring.metrics import QueryMatrix, per_query_curves


def curves_of(positions, kinds=None, k_max=200):
    return per_query_curves(QueryMatrix.from_lists(positions, kinds), k_max)


# ----------------------------------------------------------------- single gold


@pytest.mark.parametrize("pos", [1, 2, 3, 7, 10, 50, 199, 200])
def test_single_gold_ndcg_is_inverse_log_at_every_k(pos):
    c = curves_of([[pos]])
    for k in range(1, 201):
        expected = 1.0 / math.log2(pos + 1) if pos <= k else 0.0
        assert m.ndcg_at_k([pos], k) == pytest.approx(expected, abs=1e-15)
        assert c.ndcg[0, k - 1] == pytest.approx(expected, abs=1e-15)
        assert c.recall[0, k - 1] == (1.0 if pos <= k else 0.0)


def test_single_gold_not_found_scores_zero_everywhere():
    c = curves_of([[None]])
    assert c.recall.sum() == 0 and c.ndcg.sum() == 0 and c.rr[0] == 0 and c.ap[0] == 0
    assert c.pr[0].tolist() == [0.0] * 11


def test_single_gold_rr_and_ap():
    assert m.reciprocal_rank([4]) == 0.25
    assert m.average_precision([4]) == 0.25
    c = curves_of([[4]])
    assert c.rr[0] == 0.25 and c.ap[0] == 0.25


# ------------------------------------------------------------------ multi gold


def test_three_units_hand_worked():
    ps = [2, None, 5]
    assert m.recall_at_k(ps, 1) == 0
    assert m.recall_at_k(ps, 2) == pytest.approx(1 / 3)
    assert m.recall_at_k(ps, 5) == pytest.approx(2 / 3)
    assert m.precision_at_k(ps, 2) == 0.5
    assert m.precision_at_k(ps, 5) == 0.4
    assert m.precision_at_k(ps, 10) == 0.2
    dcg5 = 1 / math.log2(3) + 1 / math.log2(6)
    idcg5 = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert m.ndcg_at_k(ps, 5) == pytest.approx(dcg5 / idcg5)
    # IDCG capped at min(k, |G|): at k = 2 only two ideal positions.
    assert m.ndcg_at_k(ps, 2) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert m.reciprocal_rank(ps) == 0.5
    assert m.average_precision(ps) == pytest.approx((1 / 2 + 2 / 5) / 3)  # = 0.3
    assert m.covered_at_k(ps, 200) == 0.0
    assert m.interpolated_pr(ps) == pytest.approx([0.5, 0.5, 0.5, 0.5, 0.4, 0.4, 0.4, 0, 0, 0, 0])

    c = curves_of([ps])
    assert c.recall[0, [0, 1, 4]].tolist() == pytest.approx([0, 1 / 3, 2 / 3])
    assert c.precision[0, [1, 4, 9]].tolist() == pytest.approx([0.5, 0.4, 0.2])
    assert c.ndcg[0, 4] == pytest.approx(dcg5 / idcg5)
    assert c.ap[0] == pytest.approx(0.3) and c.rr[0] == 0.5
    assert c.pr[0].tolist() == pytest.approx([0.5, 0.5, 0.5, 0.5, 0.4, 0.4, 0.4, 0, 0, 0, 0])


def test_pr_unreachable_levels_are_zero_not_carried_forward():
    # Two units, one found at 1: recall 0.5 reachable, above it nothing.
    c = curves_of([[1, None]])
    assert c.pr[0].tolist() == [1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    # Everything found: the 1.0 level is reachable, at the precision of the last find.
    c = curves_of([[1, 4]])
    assert c.pr[0].tolist() == pytest.approx([1] * 6 + [0.5] * 5)


def test_covered_strict_and_paper():
    kinds = ["original", "original", "alternative"]
    # Originals incomplete, alternative route complete at 3.
    ps = [1, None, 3]
    assert m.covered_at_k(ps, 200) == 0
    assert [m.covered_paper_at_k(ps, kinds, k) for k in (2, 3)] == [0, 1]
    # Originals complete at 2; strict also needs the alternative.
    ps2 = [1, 2, None]
    assert m.covered_paper_at_k(ps2, kinds, 2) == 1 and m.covered_at_k(ps2, 2) == 0
    c = curves_of([ps, ps2, [1, 2, 3]], [kinds] * 3)
    assert c.covered_paper[0, :3].tolist() == [0, 0, 1]
    assert c.covered_paper[1, :3].tolist() == [0, 1, 1]
    assert c.covered[1].sum() == 0
    assert c.covered[2, :3].tolist() == [0, 0, 1]


def test_covered_paper_route_emptied_by_resolution_is_not_covered():
    # Only an alternative unit survived resolution, not found: not covered.
    assert m.covered_paper_at_k([None], ["alternative"], 10) == 0
    assert m.covered_paper_at_k([5], ["alternative"], 10) == 1
    c = curves_of([[None], [5]], [["alternative"], ["alternative"]])
    assert c.covered_paper[:, 9].tolist() == [0, 1]


def test_positions_above_kmax_are_infinite():
    c = curves_of([[201]])
    assert c.recall.sum() == 0 and c.rr[0] == 0


# --------------------------------------------------------- properties, agreement


def random_queries(rng: random.Random, n: int, with_kinds: bool = False):
    queries, kinds = [], []
    for _ in range(n):
        g = rng.randint(1, 6)
        queries.append([rng.choice([None, rng.randint(1, 200), rng.randint(1, 12)]) for _ in range(g)])
        kinds.append([rng.choice(["original", "alternative"]) for _ in range(g)] if with_kinds else ["single"] * g)
    return queries, kinds


def test_covered_never_above_recall_and_values_in_unit_interval():
    rng = random.Random(7)
    qs, kinds = random_queries(rng, 300, with_kinds=True)
    c = curves_of(qs, kinds)
    assert (c.covered <= c.recall + 1e-15).all()
    for arr in (c.recall, c.ndcg, c.covered, c.covered_paper, c.rr, c.ap, c.pr):
        assert (arr >= 0).all() and (arr <= 1 + 1e-12).all()
    # Curves are monotone in k where they must be.
    assert (np.diff(c.recall, axis=1) >= 0).all() and (np.diff(c.covered, axis=1) >= 0).all()


def test_vectorised_driver_equals_pure_functions():
    rng = random.Random(11)
    qs, kinds = random_queries(rng, 120, with_kinds=True)
    c = curves_of(qs, kinds)
    for i, (ps, kd) in enumerate(zip(qs, kinds)):
        for k in (1, 2, 5, 10, 37, 100, 200):
            assert c.recall[i, k - 1] == pytest.approx(m.recall_at_k(ps, k), abs=1e-12)
            assert c.precision[i, k - 1] == pytest.approx(m.precision_at_k(ps, k), abs=1e-12)
            assert c.ndcg[i, k - 1] == pytest.approx(m.ndcg_at_k(ps, k), abs=1e-12)
            assert c.covered[i, k - 1] == m.covered_at_k(ps, k)
            assert c.covered_paper[i, k - 1] == m.covered_paper_at_k(ps, kd, k)
        assert c.rr[i] == pytest.approx(m.reciprocal_rank(ps), abs=1e-12)
        assert c.ap[i] == pytest.approx(m.average_precision(ps), abs=1e-12)
    for i in range(0, 120, 10):  # the pure PR is slow (200 k × 11 levels); a sample suffices
        assert c.pr[i].tolist() == pytest.approx(m.interpolated_pr(qs[i]), abs=1e-12)


def test_empty_gold_is_refused():
    with pytest.raises(ValueError, match="at least one gold unit"):
        QueryMatrix.from_lists([[1], []])


# ---------------------------------------------------------------- ir_measures


def test_agrees_with_ir_measures_on_random_runs():
    """R@k, P@k, nDCG@k, RR, AP against ir_measures (pytrec_eval) to 1e-9.

    Conventions coincide here because each gold unit is one document and runs carry no
    duplicates. Where they deliberately differ (not exercised): a unit with several
    interchangeable names (a premise group) is one relevant item for us but several
    qrels for trec_eval; a query the system never answered scores 0 for us, while
    plain trec_eval (without -c) leaves it out of the mean.
    """
    import ir_measures
    from ir_measures import AP, RR, P, R, nDCG

    rng = random.Random(2026)
    qrels, run, ours = [], [], []
    for q in range(150):
        qid = f"q{q}"
        n_docs = 300
        gold = rng.sample(range(n_docs), rng.randint(1, 8))
        length = rng.choice([0, 1, 3, 10, 25, 60, 200])
        ranked = rng.sample(range(n_docs), length)
        if rng.random() < 0.4 and length:  # plant gold near the top often enough to matter
            ranked[rng.randrange(min(length, 5))] = gold[0]
            ranked = list(dict.fromkeys(ranked))
        for d in gold:
            qrels.append(ir_measures.Qrel(qid, f"d{d}", 1))
        for r, d in enumerate(ranked, start=1):
            run.append(ir_measures.ScoredDoc(qid, f"d{d}", float(1000 - r)))  # strictly decreasing
        rank_of = {d: r for r, d in enumerate(ranked, start=1)}
        ours.append((qid, [rank_of.get(d) for d in gold], length))
    cutoffs = (1, 3, 5, 10, 20, 50, 100, 200)
    measures = [RR, AP] + [M @ k for k in cutoffs for M in (R, P, nDCG)]
    theirs: dict[tuple[str, str], float] = {}
    for res in ir_measures.iter_calc(measures, qrels, run):
        theirs[(res.query_id, str(res.measure))] = res.value
    c = curves_of([ps for _, ps, _ in ours])
    compared = 0
    for i, (qid, ps, length) in enumerate(ours):
        # An empty run: ir_measures reports 0 (as we do); plain trec_eval without -c would skip it.
        assert theirs[(qid, "RR")] == pytest.approx(c.rr[i], abs=1e-9)
        assert theirs[(qid, "AP")] == pytest.approx(c.ap[i], abs=1e-9)
        for k in cutoffs:
            assert theirs[(qid, f"R@{k}")] == pytest.approx(c.recall[i, k - 1], abs=1e-9)
            assert theirs[(qid, f"P@{k}")] == pytest.approx(c.precision[i, k - 1], abs=1e-9)
            assert theirs[(qid, f"nDCG@{k}")] == pytest.approx(c.ndcg[i, k - 1], abs=1e-9)
        compared += 1
    assert compared == 150
