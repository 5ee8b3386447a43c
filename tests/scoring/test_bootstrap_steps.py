"""The fast metric path (issue 13, goal 5) against the plain definitions it replaces.

- Bootstrap.step_means (a curve's resampled means through its steps) against the dense
  product ``weights @ x``: equal up to float summation order, exactly equal for 0/1 curves;
- Bootstrap.row_bounds against ``np.percentile``: the same floats;
- per_query_curves' one-gold shortcut against its general path, and its PR interpolation
  against the max over every k;
- summarize / curve_block: table CIs are the curve bands at that k, and both match the
  dense bootstrap.
"""

from __future__ import annotations

import numpy as np
import pytest

from scoring import aggregate as agg
from scoring.bootstrap import Bootstrap
from scoring.metrics import _EPS, PR_LEVELS, QueryMatrix, per_query_curves


def single_gold(n: int, seed: int, k_hits: int = 100) -> QueryMatrix:
    rng = np.random.default_rng(seed)
    found = rng.random(n) < 0.75
    pos = np.where(found, np.minimum(k_hits, np.floor(rng.pareto(0.8, n) + 1)), 0).astype(np.int64)
    return QueryMatrix(pos=pos[:, None], sizes=np.ones(n, np.int64), kinds=np.zeros((n, 1), np.int8))


def multi_gold(n: int, seed: int, credit: bool) -> QueryMatrix:
    rng = np.random.default_rng(seed)
    width = 5
    sizes = rng.integers(1, width + 1, n)
    valid = np.arange(width)[None, :] < sizes[:, None]
    pos = np.where(valid & (rng.random((n, width)) < 0.6), rng.integers(1, 260, (n, width)), 0)
    kinds = np.where(valid, rng.integers(0, 3, (n, width)), -1).astype(np.int8)
    cr = None
    if credit:  # a credited rank per found unit at most, some units sharing a row
        cr = np.sort(np.where(valid & (rng.random((n, width)) < 0.7), pos, 0), axis=1)[:, ::-1].copy()
    return QueryMatrix(pos=pos, sizes=sizes, kinds=kinds, credit=cr)


def dense_means(boot: Bootstrap, x: np.ndarray) -> np.ndarray:
    return boot.weights @ x / boot.n


@pytest.mark.parametrize("n", [1, 3, 40, 500])
def test_step_means_equal_the_dense_product(n):
    boot = Bootstrap.draw(n)
    c = per_query_curves(single_gold(n, n))
    for field in ("recall", "ndcg", "covered", "precision"):
        x = getattr(c, field)
        rows, at = boot.step_means(x)
        got = rows[at].T  # (resamples, K)
        if field in ("recall", "covered"):  # 0/1: integer sums, any order gives the same floats
            assert np.array_equal(got, dense_means(boot, x))
        else:
            assert np.abs(got - dense_means(boot, x)).max() < 1e-13
    # Curves that also fall (nDCG with several units), with credits, and arbitrary ones.
    m = per_query_curves(multi_gold(n, n + 1, credit=True))
    rng = np.random.default_rng(n)
    arbitrary = np.round(rng.random((n, 30)) * 3) / 3 * (rng.random((n, 30)) < 0.3)
    for x in (m.ndcg, m.recall, m.precision, m.covered_paper, arbitrary, np.zeros((n, 7))):
        rows, at = boot.step_means(x)
        assert rows.shape[0] <= x.shape[1] + 1
        assert np.abs(rows[at].T - dense_means(boot, x)).max() < 1e-13


def test_step_means_chunk_and_column_sharing():
    """Columns with more changes than one gathered chunk, and the memo of column counts
    shared by two curves that change at the same places, give the same means."""
    import scoring.bootstrap as bs

    n = 300
    boot = Bootstrap.draw(n, resamples=50)
    c = per_query_curves(single_gold(n, 7, k_hits=3))  # ≈ 75 % of queries change at k = 1 … 3
    want = {f: boot.step_means(getattr(c, f)) for f in ("recall", "ndcg")}
    old = bs._STEP_CHUNK
    bs._STEP_CHUNK = 16
    try:
        for f in ("recall", "ndcg"):
            rows, at = boot.step_means(getattr(c, f), c.steps[f])
            assert np.array_equal(at, want[f][1])
            assert np.abs(rows - want[f][0]).max() < 1e-15
        assert boot.__dict__["_counts_memo"][0] is c.steps["recall"][0]
    finally:
        bs._STEP_CHUNK = old


@pytest.mark.parametrize("k_max", [200, 7, 1])
def test_one_gold_steps_are_what_a_scan_finds(k_max):
    n = 400
    c = per_query_curves(single_gold(n, 3), k_max)
    assert c.steps is not None
    boot = Bootstrap.draw(n)
    for f in ("recall", "ndcg"):
        x = getattr(c, f)
        qs, ks, vals = c.steps[f]
        diff = np.diff(x, axis=1, prepend=0.0)
        assert np.array_equal(np.sort(qs * k_max + ks), np.flatnonzero(diff))
        assert np.array_equal(vals, diff[qs, ks])
        assert (np.diff(ks) >= 0).all()
        hinted, scanned = boot.step_means(x, c.steps[f]), boot.step_means(x)
        assert np.array_equal(hinted[0], scanned[0]) and np.array_equal(hinted[1], scanned[1])


def test_row_bounds_are_numpys_percentiles():
    rng = np.random.default_rng(11)
    for trial in range(400):
        resamples = int(rng.choice([1, 2, 5, 39, 40, 41, 999, 1000]))
        ci = float(rng.choice([0.95, 0.9, 0.5, 0.999]))
        rows = rng.integers(0, 6, (3, resamples)) / 7.0 if trial % 2 else rng.random((3, resamples))
        boot = Bootstrap(np.zeros((resamples, 2)), resamples, 0, ci)
        alpha = (1.0 - ci) / 2.0
        want = np.percentile(rows, [100 * alpha, 100 * (1 - alpha)], axis=1)
        lo, hi = boot.row_bounds(rows.copy())
        assert np.array_equal(lo, want[0]) and np.array_equal(hi, want[1])
    nan = np.array([[0.1, np.nan, 0.3] * 10])
    lo, hi = Bootstrap(np.zeros((30, 2)), 30, 0, 0.95).row_bounds(nan)
    assert np.isnan(lo[0]) and np.isnan(hi[0])


@pytest.mark.parametrize("k_max", [200, 5])
def test_one_gold_shortcut_equals_the_general_path(k_max):
    qm = single_gold(700, 5)
    # The same queries padded to two units: the general (cumulative-sum) path.
    padded = QueryMatrix(pos=np.hstack([qm.pos, np.zeros_like(qm.pos)]), sizes=qm.sizes,
                         kinds=np.hstack([qm.kinds, np.full_like(qm.kinds, -1)]))
    fast, general = per_query_curves(qm, k_max), per_query_curves(padded, k_max)
    assert fast.steps is not None and general.steps is None
    for f in ("recall", "precision", "ndcg", "covered", "covered_paper", "rr", "ap", "pr"):
        a, b = getattr(fast, f), getattr(general, f)
        assert a.dtype == b.dtype and np.array_equal(a, b), f


@pytest.mark.parametrize("credit", [False, True])
def test_pr_is_the_max_over_every_k(credit):
    for k_max in (200, 12):
        c = per_query_curves(multi_gold(600, 9, credit), k_max)
        for i, r in enumerate(PR_LEVELS):
            want = np.where(c.recall >= r - _EPS, c.precision, 0.0).max(axis=1)
            assert np.array_equal(c.pr[:, i], want)
    c = per_query_curves(single_gold(600, 2))
    for i, r in enumerate(PR_LEVELS):
        assert np.array_equal(c.pr[:, i], np.where(c.recall >= r - _EPS, c.precision, 0.0).max(axis=1))


@pytest.mark.parametrize("multi", [False, True])
def test_table_cis_are_the_curve_bands_and_match_the_dense_bootstrap(multi):
    n = 300
    qm = multi_gold(n, 4, credit=True) if multi else single_gold(n, 4)
    c = per_query_curves(qm)
    boot = Bootstrap.draw(n)
    names = list(agg.TABLE_METRICS) + list(agg.MULTI_GOLD_EXTRA if multi else agg.SINGLE_GOLD_EXTRA)
    table = agg.summarize(c, boot, names, None)
    block = agg.curve_block(c, boot, None, multi)
    for name in names:
        x = agg.per_query(c, name)
        lo, hi = boot.interval(x)  # the dense definition
        assert table[name]["value"] == x.mean()
        assert table[name]["ci"] == pytest.approx([lo, hi], abs=1e-13, rel=0)
        fam, k = agg.canonical(name)
        if fam in ("R", "nDCG"):
            assert table[name]["ci"] == [block[f"{fam}_lo"][k - 1], block[f"{fam}_hi"][k - 1]]
    for fam, arr in (("R", c.recall), ("nDCG", c.ndcg)):
        lo, hi = boot.interval(arr)
        assert np.abs(np.asarray(block[f"{fam}_lo"]) - lo).max() < 1e-13
        assert np.abs(np.asarray(block[f"{fam}_hi"]) - hi).max() < 1e-13
    # A cap hides k > N in the bands; another bootstrap is not served from the cache.
    capped = agg.curve_block(c, boot, 10, multi)
    assert capped["R_lo"][9] is not None and capped["R_lo"][10] is None
    other = Bootstrap.draw(n, seed=1)
    want = other.interval(c.recall)[0].tolist()
    assert agg.curve_block(c, other, None, multi)["R_lo"] == pytest.approx(want, abs=1e-13)


def test_sparse_means_of_rr_and_ap():
    n = 500
    c = per_query_curves(single_gold(n, 8))
    boot = Bootstrap.draw(n)
    for field in ("rr", "ap"):
        qs, ks, vals = c.steps[field]
        x = getattr(c, field)
        assert np.array_equal(vals, x[qs]) and not x[np.setdiff1d(np.arange(n), qs)].any()
        assert np.abs(boot.sparse_means(c.steps[field]) - dense_means(boot, x)).max() < 1e-13
