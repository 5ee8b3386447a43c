"""Extrapolated RBO and top-k Jaccard: hand-worked values, and agreement with independent
implementations on random lists of uneven lengths."""

from __future__ import annotations

import random

import pytest

from scoring.rbo import jaccard_at, rbo_ext


def reference_rbo_ext(S: list, L: list, p: float) -> float:
    """Eq. (32) of Webber, Moffat & Zobel (2010) term by term, overlaps by set intersection."""
    if not S and not L:
        return 1.0
    if not S or not L:
        return 0.0
    if len(S) > len(L):
        S, L = L, S
    s, l = len(S), len(L)

    def X(d: int) -> int:
        return len(set(S[:d]) & set(L[:d]))

    first = sum(X(d) / d * p**d for d in range(1, l + 1))
    second = sum(X(s) * (d - s) / (s * d) * p**d for d in range(s + 1, l + 1))
    return (1 - p) / p * (first + second) + ((X(l) - X(s)) / l + X(s) / s) * p**l


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (list("abc"), list("abc"), 1.0),  # (1-p)(1+p+p²) + p³ = 1
        (list("abc"), list("xyz"), 0.0),
        (list("ab"), list("ba"), 0.9),  # X = 0, 2: (0.1/0.9)·0.81 + 0.81
        (list("a"), list("ab"), 1.0),  # a prefix: the extrapolation agrees everywhere
        (list("a"), list("ba"), 0.45),  # 0.1/0.9·(0.405) + (1/2)·0.81
        (list("ab"), list("ac"), 0.55),  # X = 1, 1: 0.1/0.9·(0.9 + 0.405) + (1/2)·0.81
        ([], [], 1.0),
        ([], list("a"), 0.0),
    ],
)
def test_hand_worked_values(a, b, expected) -> None:
    assert rbo_ext(a, b, 0.9) == pytest.approx(expected, abs=1e-12)
    assert rbo_ext(b, a, 0.9) == pytest.approx(expected, abs=1e-12)  # symmetric


def test_uneven_length_hand_worked() -> None:
    # S = [a, b], L = [c, a, d, b]: X1..X4 = 0, 1, 1, 2, X_s = X_2 = 1.
    p = 0.9
    first = 0 + 1 / 2 * p**2 + 1 / 3 * p**3 + 2 / 4 * p**4
    second = 1 * 1 / (2 * 3) * p**3 + 1 * 2 / (2 * 4) * p**4
    expected = (1 - p) / p * (first + second) + ((2 - 1) / 4 + 1 / 2) * p**4
    assert rbo_ext(list("ab"), list("cadb"), p) == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.63225, abs=1e-12)  # 0.140175 + 0.75 · 0.6561


def test_matches_reference_on_random_lists() -> None:
    rng = random.Random(1)
    for _ in range(400):
        pool = list(range(rng.randint(1, 60)))
        a = rng.sample(pool, rng.randint(0, len(pool)))
        b = rng.sample(pool, rng.randint(0, len(pool)))
        p = rng.choice([0.5, 0.8, 0.9, 0.95])
        assert abs(rbo_ext(a, b, p) - reference_rbo_ext(a, b, p)) < 1e-9, (a, b, p)


def test_matches_rbo_package_on_random_lists() -> None:
    """The `rbo` package on PyPI (an independent implementation of Eq. 32) as a second oracle.

    It pins numpy<2, so it is not in the `test` extra; the test runs where it is installed.
    """
    rbo = pytest.importorskip("rbo")
    rng = random.Random(2)
    for _ in range(300):
        pool = [f"n{i}" for i in range(rng.randint(2, 50))]
        a = rng.sample(pool, rng.randint(1, len(pool)))
        b = rng.sample(pool, rng.randint(1, len(pool)))
        theirs = rbo.RankingSimilarity(a, b).rbo_ext(p=0.9)
        assert abs(rbo_ext(a, b, 0.9) - theirs) < 1e-9, (a, b)


def test_duplicates_keep_first_rank_and_p_checked() -> None:
    assert rbo_ext(list("aab"), list("ab")) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        rbo_ext(["a"], ["a"], 1.0)


def test_jaccard_top_k() -> None:
    assert jaccard_at(list("abcd"), list("cdef"), k=4) == pytest.approx(2 / 6)
    assert jaccard_at(list("abcd"), list("abxy"), k=2) == 1.0
    assert jaccard_at([], []) == 1.0 and jaccard_at(["a"], []) == 0.0
