"""A synthetic score document for report tests."""

from __future__ import annotations

import numpy as np
from scoring.report import SCHEMA


K_MAX = 200
STYLES = ("q1a_lean", "q1c_natural", "q3_nickname")
KINDS = ("theorem", "def", "structure")


def _metrics_from_positions(pos: np.ndarray, cap: int | None) -> dict:
    """Single-gold metrics from an array of positions (0 = not found)."""
    found = pos > 0
    out = {}
    for k in (1, 5, 10, 50, 100):
        out[f"R@{k}"] = None if cap and k > cap else float(np.mean(found & (pos <= k)))
    with np.errstate(divide="ignore"):
        gain = np.where(found & (pos <= 10), 1 / np.log2(pos + 1.0), 0.0)
    out["nDCG@10"] = float(np.mean(gain))
    rr = np.where(found, 1.0 / np.maximum(pos, 1), 0.0)
    out["MRR"] = float(np.mean(rr))
    out["MAP"] = float(np.mean(rr))
    return out


def synthetic_score(n_queries: int = 60, systems: tuple = ("leansearch", "bm25", "dense"), seed: int = 7,
                    banner: str | None = "development slice — not a result", caps: dict | None = None,
                    dropped_qids: tuple = ("Q3_q1a_lean",), unanswered: dict | None = None) -> dict:
    rng = np.random.default_rng(seed)
    caps = caps or {"leansearch": 50}
    unanswered = unanswered or {}
    queries = []
    for i in range(n_queries):
        tid = f"Q{i}"
        style = STYLES[i % len(STYLES)]
        queries.append({
            "qid": f"{tid}_{style}", "text": f"query {i} about <b>lattices</b> & \"joins\"",
            "style": style, "kind": KINDS[i % len(KINDS)], "difficulty": "Easy" if i % 2 else "Hard",
            "gold": [[f"Mathlib.Decl{i}"]],
        })
    scored = [q for q in queries if q["qid"] not in dropped_qids]
    ks = list(range(1, K_MAX + 1))
    out_systems = []
    for si, name in enumerate(systems):
        cap = caps.get(name)
        limit = cap or K_MAX
        pos = rng.integers(0, limit + 1, size=len(scored)) * (rng.random(len(scored)) < 0.8 - 0.15 * si)
        pos = np.where(rng.random(len(scored)) < 0.3, 1, pos)
        pos[pos == 0] = 0
        for qid in unanswered.get(name, ()):
            pos[[q["qid"] for q in scored].index(qid)] = 0
        m = _metrics_from_positions(pos, cap)
        boots = rng.integers(0, len(scored), size=(200, len(scored)))
        metrics = {}
        for key, v in m.items():
            if v is None:
                metrics[key] = {"value": None, "ci": None}
            else:
                metrics[key] = {"value": v, "ci": [max(0.0, v - 0.05), min(1.0, v + 0.05)]}
        R, nd = [], []
        for k in ks:
            if cap and k > cap:
                R.append(None)
                nd.append(None)
                continue
            hit = (pos > 0) & (pos <= k)
            R.append(float(hit.mean()))
            with np.errstate(divide="ignore"):
                nd.append(float(np.where(hit, 1 / np.log2(pos + 1.0), 0).mean()))
        def band(ys, d):
            return [None if y is None else min(1.0, max(0.0, y + d)) for y in ys]
        breakdowns = {}
        for dim in ("style", "kind", "difficulty"):
            groups: dict = {}
            for q, p in zip(scored, pos):
                groups.setdefault(q[dim], []).append(p)
            breakdowns[dim] = {}
            for v, ps in groups.items():
                ps = np.array(ps)
                mm = _metrics_from_positions(ps, cap)
                breakdowns[dim][v] = {"n": int(len(ps)), "nDCG@10": mm["nDCG@10"], "R@10": mm["R@10"]}
        per_query = {q["qid"]: {"positions": [int(p) if p else None], "rr": (1 / p) if p else 0.0}
                     for q, p in zip(scored, pos)}
        badges = []
        if cap:
            badges.append(f"k≤{cap}")
        if unanswered.get(name):
            badges.append("incomplete")
        local = name in ("bm25", "dense")
        params = {"k1": 1.2, "b": 0.75, "renderer_hash": "r3nd3r"} if name == "bm25" else {"num_results": 50}
        out_systems.append({
            "id": f"{name}:e0", "engine": name, "config_hash": f"{si:02d}" + "ab" * 31, "params": params, "epoch": 0,
            "local": local, "licence": "CC-BY-NC-4.0" if name == "dense" else None, "result_cap": cap,
            "n": len(scored), "dropped": n_queries - len(scored), "unanswered": len(unanswered.get(name, ())),
            "badges": badges, "latency_p95_ms": None if local else 123.4,
            "resolution": {"resolved": 100, "not_in_corpus": 3}, "coverage": 1.0,
            "metrics": metrics,
            "curves": {"k": ks, "R": R, "R_lo": band(R, -0.05), "R_hi": band(R, 0.05),
                       "nDCG": nd, "nDCG_lo": band(nd, -0.04), "nDCG_hi": band(nd, 0.04), "P": None, "Covered": None},
            "pr": {"recall": None, "precision": None},
            "breakdowns": breakdowns,
            "per_query": per_query,
        })
    return {
        "schema": SCHEMA, "generated_at": "2026-11-30T12:00:00Z", "code_version": "0.1.0+test",
        "k_max": K_MAX, "bootstrap": {"resamples": 1000, "seed": 20260101, "ci": 0.95}, "profile": "main",
        "benchmark": {"name": "mathlibqr", "task": "theorem-search", "sha256": "0ce0" + "0" * 60, "n_queries": n_queries},
        "corpus": {"name": "mathlib-slice", "revision": "028964f2c6f0", "sha256": "e81e" + "1" * 60,
                   "row_count": 11651, "slice": True},
        "subset": None, "banner": banner, "systems": out_systems, "queries": queries,
        "comparisons": [{"a": "bm25:e0", "b": "dense:e0", "metric": "nDCG@10", "diff": 0.0123,
                         "ci": [-0.01, 0.03], "p": 0.21}],
    }
