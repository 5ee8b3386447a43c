"""Scoring at 10× scale (issue 13, goal 5): `engines score` end to end on a synthetic database.

Builds, seeded, a database of S systems × Q queries × H hits (default 10 × 9,460 × 100:
9.46M hit rows, written unresolved like crawled hits) and the same at Q/10 queries, then
runs ``engines score --style all`` on each in a child process, cold (hits resolved and
positions computed and stored by this run) and warm (positions reused). Printed:

- wall time of each and the ratio large ÷ small (goal: ≤ 12×, i.e. linear);
- the child's peak RSS (goal: ≤ 4 GB);
- where a cold score's time goes: read (queries, stored positions, counts, latencies),
  resolve (the UPDATE that resolves names), positions (reading hits, computing and
  storing positions), metrics (positions → curves, CIs, breakdowns);
- the metric part alone (positions → every curve k = 1…200 and 1000-resample CI, as
  perf/scoring.py's "ours") against ranx computing only nDCG@10, R@10, MRR and MAP on
  the same runs in memory (goal: ours ≥ 3× faster). ranx is numba-compiled: it is
  warmed up on a tiny run first, and its Qrels/Run construction is not timed.

    python perf/score_scale.py [--queries 9460] [--systems 10] [--hits 100] [--backend sqlite|postgresql]

Needs ranx for the last comparison (pip install 'engines[perf]'); without it that line is skipped.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _scratch import DEFAULT_PG, scratch_url  # noqa: E402

STYLES = ("q1a_lean", "q1b_latex", "q1c_natural", "q2_slogan", "q3_nickname")
BENCH = "synthqr"
CORPUS_ROWS = 40_000


def gold_name(i: int) -> str:
    return f"Synth.Topic{i % 61}.decl_{i}"


def make_positions(n_systems: int, n_queries: int, n_hits: int, seed: int) -> np.ndarray:
    """Gold rank per (system, query): ≈ 75 % found, skewed to the top; 0 = not returned."""
    rng = np.random.default_rng(seed)
    found = rng.random((n_systems, n_queries)) < 0.75
    ranks = np.minimum(n_hits, np.floor(rng.pareto(0.8, (n_systems, n_queries)) + 1)).astype(np.int64)
    return np.where(found, ranks, 0)


def build(url: str, n_systems: int, n_queries: int, n_hits: int, seed: int = 0) -> dict[str, float]:
    """The synthetic database: corpus, benchmark, S systems' answers. Returns timings."""
    from store.benchmarks import load_benchmark_file, query_sha256
    from store.corpus import load_corpus
    from store.db import open_database
    from store.writes import AnswerRow, HitRow, add_answers, ensure_config

    n_targets = -(-n_queries // len(STYLES))
    rng = random.Random(seed)
    db = open_database(url)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            corpus = Path(tmp) / "corpus.jsonl.gz"
            rows = max(CORPUS_ROWS, 2 * n_targets)
            with gzip.open(corpus, "wt", encoding="utf-8", compresslevel=1) as fh:
                for i in range(rows):
                    fh.write(json.dumps({"name": gold_name(i).split("."), "kind": "theorem", "type": "True"}) + "\n")
            load_corpus(db, str(corpus), name="synth", revision="0")
            bench = Path(tmp) / "bench.json"
            items, texts = [], []
            for t in range(n_targets):
                styles = STYLES[: min(len(STYLES), n_queries - t * len(STYLES))]
                item = {"id": f"t{t}", "full_name": gold_name(t), "kind": "theorem", "difficulty": "easy"}
                for st in styles:
                    item[st] = f"query {t} in style {st}"
                    texts.append(item[st])
                items.append(item)
            bench.write_text(json.dumps(items), encoding="utf-8")
            load_benchmark_file(db, bench, name=BENCH, allow_modified=True)
        assert len(texts) == n_queries
        shas = [query_sha256(t) for t in texts]
        gold_of = [i // len(STYLES) for i in range(n_queries)]
        positions = make_positions(n_systems, n_queries, n_hits, seed)
        t0 = time.perf_counter()
        written = 0
        for s_ in range(n_systems):
            with db.session() as s, s.begin():
                cfg = ensure_config(s, engine=f"synth{s_}", endpoint_version="1", params={"s": s_},
                                    config_hash=f"synth-{s_}", label=f"synth{s_:02d}")
                s.flush()
                cid = cfg.id
            batch: list[AnswerRow] = []
            for q in range(n_queries):
                gold = gold_of[q]
                picks = rng.sample(range(rows), n_hits)
                names = [gold_name(j) if j != gold else gold_name((j + 1) % rows) for j in picks]
                p = int(positions[s_, q])
                if p:
                    names[p - 1] = gold_name(gold)
                for r in range(0, n_hits, 20):  # 5 % of the names are not in the corpus
                    if r != p - 1:
                        names[r] = f"Elsewhere.name_{q}_{r}"
                hits = [HitRow(rank=r + 1, name=nm, raw={"score": 1.0 / (r + 1)}) for r, nm in enumerate(names)]
                batch.append(AnswerRow(config_id=cid, query_text=texts[q], query_sha256=shas[q], hits=hits,
                                       latency_ms=10.0 + q % 7))
                if len(batch) == 500:
                    with db.session() as s, s.begin():
                        add_answers(s, batch)
                    written += sum(len(a.hits) for a in batch)
                    batch = []
            if batch:
                with db.session() as s, s.begin():
                    add_answers(s, batch)
                written += sum(len(a.hits) for a in batch)
        t_hits = time.perf_counter() - t0
    finally:
        db.dispose()
    return {"hits": written, "write_s": t_hits}


# --------------------------------------------------------------- the child: one `engines score`

# phase -> (module, the names it calls there): the scope reads in scoring.scope, the system
# list in scoring.systems, each row's reads and its scoring in scoring.results.
PHASES = {
    "read": (("scoring.scope", ("load_queries", "names_in_corpus")), ("scoring.systems", ("_find_systems",)),
             ("scoring.results", ("read_positions", "resolution_counts", "answer_latencies"))),
    "resolve": (("scoring.results", ("resolve_hits",)),),
    "positions": (("scoring.results", ("ensure_positions",)),),
    "metrics": (("scoring.results", ("_score_system",)),),
}


def child(url: str, out: str) -> None:
    """Run `engines score` in this process with a timer around each phase's functions."""
    import importlib

    from cli.main import app

    spent = {k: 0.0 for k in PHASES}

    def timed(phase, fn):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[phase] += time.perf_counter() - t
        return wrapper

    for phase, places in PHASES.items():
        for mod, names in places:
            m = importlib.import_module(mod)
            for nm in names:
                setattr(m, nm, timed(phase, getattr(m, nm)))
    t0 = time.perf_counter()
    try:
        app(["--db", url, "score", "--bench", BENCH, "--style", "all"], standalone_mode=False)
    finally:
        wall = time.perf_counter() - t0
    Path(out).write_text(json.dumps({"wall": wall, **spent}))


def run_score(url: str) -> dict[str, float]:
    """`engines score` in a child process: wall, phases, and the child's peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "t.json"
        proc = subprocess.Popen([sys.executable, __file__, "--child", url, "--child-out", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")})
        _, status, usage = os.wait4(proc.pid, 0)
        err = proc.stderr.read()
        proc.stderr.close()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"engines score failed ({proc.returncode}):\n{err[-2000:]}")
        res = json.loads(out.read_text())
    res["peak_rss_mib"] = usage.ru_maxrss / 1024
    return res


# ------------------------------------------------------------------- metrics alone vs ranx


def metrics_vs_ranx(n_systems: int, n_queries: int, n_hits: int, seed: int = 0, *,
                    skip_ranx: bool = False) -> dict[str, float]:
    from scoring import aggregate as agg
    from scoring.bootstrap import Bootstrap
    from scoring.metrics import K_MAX, QueryMatrix, per_query_curves

    positions = make_positions(n_systems, n_queries, n_hits, seed)
    boot = Bootstrap.draw(n_queries)
    sizes = np.ones(n_queries, dtype=np.int64)
    kinds = np.zeros((n_queries, 1), dtype=np.int8)
    t0 = time.perf_counter()
    ours = []
    for s_ in range(n_systems):
        curves = per_query_curves(QueryMatrix(pos=positions[s_][:, None], sizes=sizes, kinds=kinds), K_MAX)
        metrics = agg.summarize(curves, boot, agg.TABLE_METRICS + agg.SINGLE_GOLD_EXTRA, None)
        agg.curve_block(curves, boot, None, multi_gold=True)
        agg.pr_block(curves)
        ours.append(metrics)
    t_ours = time.perf_counter() - t0
    try:
        if skip_ranx:
            raise ImportError
        from ranx import Qrels, Run, evaluate
    except ImportError:
        return {"ours": t_ours}
    qrels = Qrels({f"q{q}": {"gold": 1} for q in range(n_queries)})
    runs = []
    for s_ in range(n_systems):
        run = {}
        for q in range(n_queries):
            p = int(positions[s_, q])
            docs = {f"d{q}_{r}": float(n_hits + 1 - r) for r in range(1, n_hits + 1)}
            if p:
                del docs[f"d{q}_{p}"]
                docs["gold"] = float(n_hits + 1 - p)
            run[f"q{q}"] = docs
        runs.append(Run(run))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's type-safety notes about ranx's own casts
        evaluate(qrels, runs[0], ["ndcg@10", "recall@10", "mrr", "map"])  # compiled for these shapes, untimed
        t0 = time.perf_counter()
        theirs = [evaluate(qrels, run, ["ndcg@10", "recall@10", "mrr", "map"]) for run in runs]
        t_ranx = time.perf_counter() - t0
    worst = 0.0
    for m, t in zip(ours, theirs):
        for mine, their in (("nDCG@10", "ndcg@10"), ("R@10", "recall@10"), ("MRR", "mrr"), ("MAP", "map")):
            worst = max(worst, abs(m[mine]["value"] - t[their]))
    if worst > 1e-9:
        raise SystemExit(f"metric mismatch against ranx: {worst:.3g}")
    return {"ours": t_ours, "ranx": t_ranx, "worst": worst}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=9460)
    ap.add_argument("--systems", type=int, default=10)
    ap.add_argument("--hits", type=int, default=100)
    ap.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--pg", default=os.environ.get("ENGINES_PERF_PG_URL", DEFAULT_PG))
    ap.add_argument("--skip-ranx", action="store_true", help="skip the comparison with ranx (numba compiles for ~10 s)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.child_out)
        return {}
    sizes = {"small": max(5, args.queries // 10), "large": args.queries}
    res: dict = {}
    for key, nq in sizes.items():
        with scratch_url(args.backend, args.pg) as url:
            built = build(url, args.systems, nq, args.hits)
            cold = run_score(url)
            warm = run_score(url)
        res[key] = {"queries": nq, "build": built, "cold": cold, "warm": warm}
        print(f"{key}: {args.systems} systems × {nq:,} queries × {args.hits} hits = {built['hits']:,} hit rows "
              f"({args.backend}; written at {built['hits'] / built['write_s']:,.0f} hits/s)")
        for kind in ("cold", "warm"):
            r = res[key][kind]
            other = r["wall"] - sum(r[p] for p in PHASES)
            print(f"  {kind:<5} score {r['wall']:7.2f} s   peak RSS {r['peak_rss_mib']:7.0f} MiB   "
                  + "  ".join(f"{p} {r[p]:.2f}" for p in PHASES) + f"  other {other:.2f}")
    for kind in ("cold", "warm"):
        ratio = res["large"][kind]["wall"] / res["small"][kind]["wall"]
        res[f"ratio_{kind}"] = ratio
        print(f"  {kind} wall ratio large/small: {ratio:.2f}x   (queries ×{sizes['large'] / sizes['small']:.0f}; "
              "goal ≤ 12x)")
    peak = max(res[k][kind]["peak_rss_mib"] for k in sizes for kind in ("cold", "warm"))
    res["peak_rss_mib"] = peak
    print(f"  peak RSS of any score: {peak:,.0f} MiB (goal ≤ 4096 MiB)")
    m = metrics_vs_ranx(args.systems, args.queries, args.hits, skip_ranx=args.skip_ranx)
    res["metrics"] = m
    if "ranx" in m:
        print(f"  metric part alone, {args.systems} × {args.queries:,}: ours (every curve k=1..200 + CIs) "
              f"{m['ours']:.2f} s, ranx (nDCG@10, R@10, MRR, MAP) {m['ranx']:.2f} s: ranx/ours "
              f"{m['ranx'] / m['ours']:.1f}x (goal ≥ 3x; same means within {m['worst']:.0e})")
    else:
        why = "skipped" if args.skip_ranx else "not installed (pip install 'engines[perf]')"
        print(f"  metric part alone: ours {m['ours']:.2f} s; ranx {why}")
    return res


if __name__ == "__main__":
    main()
