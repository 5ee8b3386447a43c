"""MAMUT profiles on a tiny data.json-style fixture (exact values by hand), and the
``mamut-sklearn`` reading checked against scikit-learn itself."""

from __future__ import annotations

import json
import math
import random

import pytest

from scoring.mamut import labels_from_positions, mamut_query, profile_query, sklearn_query

# Same shape as MAMUT's seed file (aieng-lab/math-mutator, data/data.json; docs/BENCHMARKS.md
# §10.2): versions are true variants, no-versions
# hand-made near misses (string entries there name another identity; they are skipped).
FIXTURE = [
    {
        "id": "Pythagorean Theorem",
        "names": ["Pythagorean Theorem", "Pythagoras"],
        "tag": "formula",
        "versions": [
            {"formula": "a^2+b^2=c^2", "variables": ["a", "b", "c"]},
            {"formula": "c^2=a^2+b^2", "variables": ["a", "b", "c"]},
            {"formula": "c=\\sqrt{a^2+b^2}", "variables": ["a", "b", "c"]},
        ],
        "no-versions": [{"formula": "a^2+2^b=c^2", "variables": []}, {"formula": "a^2-b^2=c^2", "variables": []},
                        "Binomial Formula"],
    },
    {
        "id": "Binomial Formula",
        "names": ["Binomial Formula"],
        "tag": "formula",
        "versions": [{"formula": "(a+b)^2=a^2+2ab+b^2", "variables": []},
                     {"formula": "(a+b)^2=a^2+b^2+2ab", "variables": []}],
        "no-versions": [{"formula": "(a+b)^2=a^2+b^2", "variables": []}],
    },
]


def pools(data):
    """name → formula retrieval: the query is an identity's first name, the pool every
    formula of the file, relevant = that identity's versions."""
    all_formulas = []
    for item in data:
        all_formulas += [(v["formula"], item["id"], True) for v in item["versions"]]
        all_formulas += [(v["formula"], item["id"], False) for v in item["no-versions"] if isinstance(v, dict)]
    out = {}
    for item in data:
        out[item["names"][0]] = {f: (ident == item["id"] and ok) for f, ident, ok in all_formulas}
    return out


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps(FIXTURE), encoding="utf-8")
    return json.loads(path.read_text(encoding="utf-8"))


# A "system": hand-chosen rankings (a real one would be an engine's returned list).
RUNS = {
    "Pythagorean Theorem": ["a^2+2^b=c^2", "a^2+b^2=c^2", "(a+b)^2=a^2+b^2", "c^2=a^2+b^2"],
    "Binomial Formula": ["(a+b)^2=a^2+b^2+2ab", "(a+b)^2=a^2+b^2"],
}


def test_mamut_card_recipe_by_hand(data):
    pool = pools(data)
    assert len(pool["Pythagorean Theorem"]) == 8  # 5 versions + 3 dict no-versions
    got = {}
    for q, ranked in RUNS.items():
        labels = [int(pool[q][f]) for f in ranked]
        got[q] = mamut_query(labels, sum(pool[q].values()))
    p = got["Pythagorean Theorem"]  # labels 0 1 0 1, |gold| = 3
    # Issue 15: the card's recipe divides by 10 (it was 2 / min(10, 4 returned) = 0.5).
    assert p["P@10"] == 0.2
    assert p["nDCG"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3) + 0.5))
    assert p["AP"] == pytest.approx((1 / 2 + 2 / 4) / 3)
    assert p["precision"] == 0.5 and p["recall"] == pytest.approx(2 / 3) and p["F1"] == pytest.approx(4 / 7)
    b = got["Binomial Formula"]  # labels 1 0, |gold| = 2
    assert b["P@10"] == 0.1 and b["AP"] == 0.5
    assert b["nDCG"] == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert b["precision"] == b["recall"] == b["F1"] == 0.5


def test_mamut_idcg_is_capped_at_ten_as_the_card_says():
    # 12 golds all returned first: DCG over 12 positions, IDCG over 10 → above 1, by recipe.
    r = mamut_query([1] * 12, 12)
    expected = sum(1 / math.log2(i + 1) for i in range(1, 13)) / sum(1 / math.log2(i + 1) for i in range(1, 11))
    assert r["nDCG"] == pytest.approx(expected) and r["nDCG"] > 1
    assert mamut_query([], 3) == {"P@10": 0.0, "nDCG": 0.0, "AP": 0.0, "precision": 0.0, "recall": 0.0, "F1": 0.0}


def test_mamut_sklearn_reading_by_hand_and_against_sklearn(data):
    from sklearn.metrics import average_precision_score, ndcg_score

    pool = pools(data)
    q = "Pythagorean Theorem"
    ranked = RUNS[q]
    labels = [int(pool[q][f]) for f in ranked]
    tail = [f for f in pool[q] if f not in ranked]
    tail_neg = sum(1 for f in tail if not pool[q][f])
    r = sklearn_query(labels, sum(pool[q].values()), tail_negatives=tail_neg)
    # By hand: thresholds 4 > 3 > 2 > 1 > 0 (tail of 1 relevant + 3 not, tied).
    assert r["AP"] == pytest.approx(1 / 6 + 1 / 6 + 1 / 8)
    tail_dcg = 0.25 * sum(1 / math.log2(i + 1) for i in range(5, 9))
    assert r["nDCG"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(5) + tail_dcg) / (1 + 1 / math.log2(3) + 0.5))
    # scikit-learn on the same pool with rank-derived scores and a tied tail.
    scores = {f: float(len(ranked) - i) for i, f in enumerate(ranked)}
    y_true = [int(pool[q][f]) for f in pool[q]]
    y_score = [scores.get(f, 0.0) for f in pool[q]]
    assert r["AP"] == pytest.approx(average_precision_score(y_true, y_score), abs=1e-12)
    assert r["nDCG"] == pytest.approx(ndcg_score([y_true], [y_score]), abs=1e-12)


def test_mamut_sklearn_matches_sklearn_on_random_pools():
    from sklearn.metrics import average_precision_score, ndcg_score

    rng = random.Random(3)
    for _ in range(200):
        size = rng.randint(2, 40)
        y = [int(rng.random() < 0.3) for _ in range(size)]
        if not any(y):
            y[rng.randrange(size)] = 1
        order = list(range(size))
        rng.shuffle(order)
        m = rng.randint(0, size)
        returned = order[:m]
        labels = [y[i] for i in returned]
        rest = [i for i in range(size) if i not in set(returned)]
        tail_neg = sum(1 for i in rest if not y[i])
        r = sklearn_query(labels, sum(y), tail_negatives=tail_neg)
        score = [0.0] * size
        for rank, i in enumerate(returned):
            score[i] = float(size - rank)
        assert r["AP"] == pytest.approx(average_precision_score(y, score), abs=1e-12)
        assert r["nDCG"] == pytest.approx(ndcg_score([y], [score]), abs=1e-12)


def test_profiles_from_stored_positions():
    # Positions [2, None, 4] with 4 returned = the Pythagoras run above.
    assert labels_from_positions([2, None, 4], 4) == [0, 1, 0, 1]
    r = profile_query("mamut", [2, None, 4], 4)
    assert r["AP"] == pytest.approx(1 / 3) and r["P@10"] == 0.2 and r["recall"] == pytest.approx(2 / 3)
    s = profile_query("mamut-sklearn", [2, None, 4], 4)
    assert s["AP"] == pytest.approx(1 / 6 + 1 / 6 + (1 / 3) * (3 / 5))  # tail = the one missing gold
    with pytest.raises(ValueError, match="unknown MAMUT profile"):
        profile_query("mamut-x", [1], 1)


def test_mamut_sklearn_unanswered_or_empty_scores_zero():
    # Before issue 15 an empty list left the golds as an all-tied pool: nDCG = AP = 1.0.
    assert sklearn_query([], 2) == {"nDCG": 1.0, "AP": 1.0}  # the raw reading, kept as the oracle does
    assert profile_query("mamut-sklearn", [None, None], 0) == {"nDCG": 0.0, "AP": 0.0}
    assert profile_query("mamut-sklearn", [None], 0, answered=False, pool_size=50) == {"nDCG": 0.0, "AP": 0.0}
    # An answered list with no gold still ranks the tail: the pool decides.
    r = profile_query("mamut-sklearn", [None], 3, pool_size=10)
    # returned 3 non-golds; tail = 1 gold + 6 negatives tied over slots 4…10.
    tail_dcg = (1 / 7) * sum(1 / math.log2(i + 1) for i in range(4, 11))
    assert r["nDCG"] == pytest.approx(tail_dcg)
    assert r["AP"] == pytest.approx(1 / 10)


def test_mamut_sklearn_pool_is_the_whole_corpus_and_matches_sklearn():
    from sklearn.metrics import average_precision_score, ndcg_score

    # Positions [2, None, 4] with 4 returned, pool of 12 corpus rows: 12 - 4 - 1 = 7 tail negatives.
    r = profile_query("mamut-sklearn", [2, None, 4], 4, pool_size=12)
    y = [0, 1, 0, 1] + [1] + [0] * 7
    score = [4.0, 3.0, 2.0, 1.0] + [0.0] * 8
    assert r["AP"] == pytest.approx(average_precision_score(y, score), abs=1e-12)
    assert r["nDCG"] == pytest.approx(ndcg_score([y], [score]), abs=1e-12)
    # Tail negatives cost: the same run on a bigger pool scores lower.
    assert profile_query("mamut-sklearn", [2, None, 4], 4, pool_size=1000)["AP"] < r["AP"]
