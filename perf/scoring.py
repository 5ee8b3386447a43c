"""Scoring speed: 15 systems × 946 queries, every curve (k = 1 … 200) plus bootstrap CIs.

Ours: positions → per-query R@k / P@k / nDCG@k / Covered@k curves, RR, AP and 11-point
PR for every k, then macro means, 1000-resample percentile CIs on the R and nDCG curves
and on the table metrics (scoring.metrics + scoring.aggregate + scoring.bootstrap).

Baseline, measured in the same run on the same data: ir_measures (pytrec_eval backend)
computing the same per-query metrics at the same cutoffs — R@k, P@k, nDCG@k for
k = 1 … 200, RR and AP — from the equivalent run and qrels dicts. It computes no CIs
and no PR; we do more work than it does. The printed ratio is baseline time / our time
(> 1 means faster than ir_measures). Input building is not timed on either side.

    python perf/scoring.py [--systems 15] [--queries 946] [--repeat 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scoring import aggregate as agg  # noqa: E402
from scoring.bootstrap import Bootstrap  # noqa: E402
from scoring.metrics import K_MAX, QueryMatrix, per_query_curves  # noqa: E402


def make_data(n_systems: int, n_queries: int, seed: int = 0):
    """MathlibQR-like single-gold positions (≈ 75% found, skewed to the top) and the
    equivalent TREC-style run/qrels dicts."""
    rng = random.Random(seed)
    systems = []
    for s in range(n_systems):
        pos = np.zeros((n_queries, 1), dtype=np.int64)
        run: dict[str, dict[str, float]] = {}
        for q in range(n_queries):
            p = 0
            if rng.random() < 0.75:
                p = min(K_MAX, int(rng.paretovariate(0.8)))
            pos[q, 0] = p
            docs = {f"x{s}_{q}_{r}": float(K_MAX + 1 - r) for r in range(1, K_MAX + 1)}
            if p:
                del docs[f"x{s}_{q}_{p}"]
                docs["gold"] = float(K_MAX + 1 - p)
            run[f"q{q}"] = docs
        systems.append((pos, run))
    qrels = {f"q{q}": {"gold": 1} for q in range(n_queries)}
    return systems, qrels


def ours(systems, n_queries: int) -> list[dict]:
    boot = Bootstrap.draw(n_queries)
    out = []
    sizes = np.ones(n_queries, dtype=np.int64)
    kinds = np.zeros((n_queries, 1), dtype=np.int8)
    for pos, _ in systems:
        curves = per_query_curves(QueryMatrix(pos=pos, sizes=sizes, kinds=kinds), K_MAX)
        metrics = agg.summarize(curves, boot, agg.TABLE_METRICS + agg.SINGLE_GOLD_EXTRA, None)
        block = agg.curve_block(curves, boot, None, multi_gold=True)
        pr = agg.pr_block(curves)
        out.append({"metrics": metrics, "curves": block, "pr": pr, "p_at": curves.precision})
    return out


def baseline(systems, qrels) -> list[dict]:
    import ir_measures
    from ir_measures import AP, RR, P, R, nDCG

    measures = [RR, AP] + [M @ k for k in range(1, K_MAX + 1) for M in (R, P, nDCG)]
    out = []
    for _, run in systems:
        per_q: dict[str, dict[str, float]] = {}
        for res in ir_measures.iter_calc(measures, qrels, run):
            per_q.setdefault(str(res.measure), {})[res.query_id] = res.value
        out.append(per_q)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", type=int, default=15)
    ap.add_argument("--queries", type=int, default=946)
    ap.add_argument("--repeat", type=int, default=1, help="best of N for each side")
    args = ap.parse_args()
    systems, qrels = make_data(args.systems, args.queries)

    t_ours, t_base = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        mine = ours(systems, args.queries)
        t_ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        theirs = baseline(systems, qrels)
        t_base.append(time.perf_counter() - t0)

    # Same numbers, or the timing is meaningless.
    worst = 0.0
    for m, t in zip(mine, theirs):
        for k in (1, 10, 100, 200):
            for key, name in (("R", "R"), ("nDCG", "nDCG")):
                mean = float(np.mean(list(t[f"{name}@{k}"].values())))
                worst = max(worst, abs(mean - m["curves"][key][k - 1]))
            worst = max(worst, abs(float(np.mean(list(t[f"P@{k}"].values()))) - m["curves"]["P"][k - 1]))
        worst = max(worst, abs(float(np.mean(list(t["RR"].values()))) - m["metrics"]["MRR"]["value"]))
        worst = max(worst, abs(float(np.mean(list(t["AP"].values()))) - m["metrics"]["MAP"]["value"]))
    if worst > 1e-9:
        raise SystemExit(f"metric mismatch against ir_measures: {worst:.3g}")

    best_ours, best_base = min(t_ours), min(t_base)
    n_metric_values = args.systems * args.queries * (3 * K_MAX + 2)
    print(f"{args.systems} systems x {args.queries} queries, k = 1..{K_MAX}; best of {args.repeat}")
    print(f"ours (curves R/P/nDCG/Covered, RR, AP, PR + 1000-resample CIs): {best_ours * 1000:8.1f} ms")
    print(f"ir_measures (R/P/nDCG @1..200, RR, AP; no CIs):               {best_base * 1000:8.1f} ms"
          f"  ({n_metric_values / best_base:,.0f} values/s)")
    print(f"max |difference| of shared means: {worst:.2e}")
    print(f"ratio ir_measures / ours: {best_base / best_ours:.1f}x")


if __name__ == "__main__":
    main()
