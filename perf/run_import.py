"""Importing a run (issue 23): ``archive.runs.import_run`` vs its floor.

Builds a JSONL benchmark of Q queries and a TREC run of Q × N names (names drawn from a
pool of 50,000, as engines repeat names across queries), then times, in one scratch
database:

- floor: reading and parsing the file in Python (split each line, group by qid, order
  by rank) plus the bulk hit write of the same rows (``store.writes.write_hit_rows``,
  the path every writer ends in: executemany on SQLite, COPY on PostgreSQL) for answers
  created beforehand (not timed);
- import: ``import_run`` end to end (parse, checks against the benchmark, configuration,
  answers, hits; one transaction).

Prints both and the ratio import / floor (wall clock; and this process's CPU, which on
SQLite includes the database's own work), measured in this run. Goal: ≤ 1.5×.

    python perf/run_import.py [--queries 10000] [--names 100] [--backend sqlite|postgresql|both]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _scratch import scratch_url  # noqa: E402
from store.benchmarks import load_external, query_sha256  # noqa: E402
from store.db import open_database  # noqa: E402
from store.models import Answer, Hit  # noqa: E402
from store.names import normalize_name  # noqa: E402
from archive.runs import import_run  # noqa: E402
from store.writes import AnswerRow, add_answers, ensure_config, write_hit_rows  # noqa: E402


def make_files(tmp: Path, n_queries: int, n_names: int) -> tuple[Path, Path]:
    rng = random.Random(23)
    pool = [f"Mathlib.Topic{i % 97}.lemma_{i}" for i in range(50_000)]
    bench = tmp / "bench.jsonl"
    with open(bench, "w", encoding="utf-8") as fh:
        for q in range(n_queries):
            fh.write(json.dumps({"qid": f"q{q}", "query": f"query number {q}", "gold": [pool[q % len(pool)]]}) + "\n")
    run = tmp / "run.trec"
    with open(run, "w", encoding="utf-8") as fh:
        for q in range(n_queries):
            picks = rng.sample(pool, n_names)
            fh.write("".join(f"q{q} Q0 {nm} {r} {n_names + 1 - r} perf\n" for r, nm in enumerate(picks, start=1)))
    return bench, run


def floor(db, run: Path, texts: dict[str, str]) -> tuple[float, float, int]:
    """Read + parse in Python, then the bulk hit write of the same rows; wall s, CPU s, rows."""
    with db.session() as s, s.begin():
        cfg = ensure_config(s, engine="perf", endpoint_version="1", params={}, config_hash="perf-floor")
        s.flush()
        ids = add_answers(s, [AnswerRow(config_id=cfg.id, query_text=t, query_sha256=query_sha256(t), hits=[])
                              for t in texts.values()])
        answer_of = dict(zip(texts, ids))
    t0, c0 = time.perf_counter(), time.process_time()
    per: dict[str, list[tuple[int, str]]] = {}
    with open(run, encoding="utf-8") as fh:
        for line in fh:
            qid, _, doc, rank, _, _ = line.split()
            per.setdefault(qid, []).append((int(rank), doc))
    norm: dict[str, str | None] = {}
    rows = []
    for qid, ranked in per.items():
        aid = answer_of[qid]
        ranked.sort()
        for rank, name in ranked:
            n = norm.get(name)
            if n is None:
                n = norm[name] = normalize_name(name)
            rows.append((aid, rank, name, n, None, None, None, None))
    with db.session() as s, s.begin():
        write_hit_rows(s.connection(), rows)
    return time.perf_counter() - t0, time.process_time() - c0, len(rows)


def measure(backend: str, n_queries: int, n_names: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp, scratch_url(backend) as url:
        bench, run = make_files(Path(tmp), n_queries, n_names)
        db = open_database(url)
        try:
            load_external(db, bench, name="perf-bench")
            texts = {f"q{q}": f"query number {q}" for q in range(n_queries)}
            t_floor, c_floor, rows = floor(db, run, texts)
            with db.session() as s, s.begin():  # the floor's rows go; the import writes into the same tables
                s.execute(sa.delete(Hit).execution_options(synchronize_session=False))
                s.execute(sa.delete(Answer).execution_options(synchronize_session=False))
            t0, c0 = time.perf_counter(), time.process_time()
            res = import_run(db, run, bench="perf-bench", name="perf-run", source="perf/run_import.py")
            t_import, c_import = time.perf_counter() - t0, time.process_time() - c0
            assert res.hits == rows, (res.hits, rows)
        finally:
            db.dispose()
    return {"backend": backend, "queries": n_queries, "names": n_names, "hits": rows,
            "floor_s": t_floor, "import_s": t_import, "ratio": t_import / t_floor,
            "floor_cpu_s": c_floor, "import_cpu_s": c_import, "cpu_ratio": c_import / c_floor}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--names", type=int, default=100)
    ap.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="sqlite")
    args = ap.parse_args()
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    for b in backends:
        r = measure(b, args.queries, args.names)
        print(f"{r['backend']}: {r['queries']:,} queries × {r['names']} names = {r['hits']:,} hits: "
              f"floor (read+parse + bulk hit write) {r['floor_s']:.2f} s, import_run {r['import_s']:.2f} s, "
              f"ratio {r['ratio']:.2f}× (goal ≤ 1.5×); this process's CPU: floor {r['floor_cpu_s']:.2f} s, "
              f"import {r['import_cpu_s']:.2f} s, ratio {r['cpu_ratio']:.2f}×")


if __name__ == "__main__":
    main()
