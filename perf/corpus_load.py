"""Corpus load speed: real Mathlib rows plus synthetic rows in the same schema, 250,379 by default.

Prints rows/s of `store.corpus.load_corpus` into a fresh SQLite file and a fresh
PostgreSQL schema (dropped afterwards; the server of --pg), and the ratio of load time to
the time of merely parsing the same JSON lines (json.loads over the decompressed file),
both measured in this run. The real rows come from --full (default: the shipped
11,651-row slice; the README's figures used the 250,379-row extracted Mathlib), the rest
are synthetic. Each time is the best of --repeat runs: the machine is shared,
and the best run is the one least disturbed by other processes. Goal (issue 13):
load/parse <= 3x on SQLite, <= 4x on PostgreSQL.

    python perf/corpus_load.py [--full PATH] [--rows 250379] [--backend sqlite|postgresql|both] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _scratch import DEFAULT_PG, SHIPPED_SLICE, open_text, scratch_url  # noqa: E402
from store.corpus import load_corpus  # noqa: E402
from store.db import open_database  # noqa: E402

DEFAULT_FULL = SHIPPED_SLICE
REAL_ROWS = 250_379
TARGET_ROWS = 310_579  # the LeanSearch v2 corpus size


def build_input(full: Path, rows: int, out: Path) -> tuple[int, int]:
    """Copy the real rows and append synthetic rows in the same schema (LSv2 keys, filled);
    returns (rows written, real rows among them)."""
    rng = random.Random(0)
    n = 0
    words = ["Nat", "Int", "Real", "Finset", "Group", "Ring", "Module", "Topology", "Measure", "Lattice"]
    with open_text(full) as src, gzip.open(out, "wt", encoding="utf-8", compresslevel=1) as dst:
        for line in src:
            if n >= rows:
                break
            dst.write(line)
            n += 1
        real = n
        i = 0
        while n < rows:
            ns = [rng.choice(words), f"synthetic_{i}"]
            row = {
                "name": ns,
                "module_name": ["Mathlib", "Synthetic", rng.choice(words)],
                "kind": rng.choice(["theorem", "definition", "instance", "abbrev"]),
                "type": f"∀ (a b : {ns[0]}), a + b = b + a",
                "index": n,
                "signature": " (a b : α) : a + b = b + a",
                "value": ":= by simp",
                "informal_name": f"Synthetic statement {i}",
                "informal_description": "A synthetic row in the LeanSearch v2 corpus schema. " * 4,
            }
            dst.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
            i += 1
    return n, real


def parse_only(path: Path) -> tuple[int, float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    n = 0
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                json.loads(line)
                n += 1
    return n, time.perf_counter() - t0, time.process_time() - c0


def measure(data: Path, backend: str, pg: str, repeat: int, real: int) -> dict[str, float]:
    """Best-of-``repeat`` parse and load times into fresh databases of ``backend``."""
    t_parse = t_load = c_parse = c_load = float("inf")
    rss_growth = 0.0
    rows = 0
    for _ in range(repeat):
        n_parse, t, c = parse_only(data)
        t_parse, c_parse = min(t_parse, t), min(c_parse, c)
        with scratch_url(backend, pg) as url:
            db = open_database(url)
            rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t0, c0 = time.perf_counter(), time.process_time()
            res = load_corpus(db, str(data), name="perf", revision="perf")
            t_load, c_load = min(t_load, time.perf_counter() - t0), min(c_load, time.process_time() - c0)
            rss_growth = max(rss_growth, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024)
            db.dispose()
        assert res.rows == n_parse, (res.rows, n_parse)
        rows = res.rows
    ratio = t_load / t_parse
    print(f"{backend}: {rows:,} rows ({real:,} real + {rows - real:,} synthetic), "
          f"best of {repeat}")
    print(f"  parse only:        {t_parse:6.2f} s  ({rows / t_parse:,.0f} rows/s)")
    print(f"  load (one txn):    {t_load:6.2f} s  ({rows / t_load:,.0f} rows/s)")
    print(f"  load / parse time: {ratio:.2f}x")
    print(f"  load / parse CPU:  {c_load / c_parse:.2f}x  (this process's CPU seconds {c_load:.2f} / {c_parse:.2f}"
          f"{'; the server works in its own process' if backend == 'postgresql' else ''})")
    print(f"  peak RSS growth during a load: {rss_growth:.0f} MiB")
    return {"parse": t_parse, "load": t_load, "ratio": ratio, "cpu_ratio": c_load / c_parse, "rows": rows, "rss_growth_mib": rss_growth}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", type=Path, default=DEFAULT_FULL,
                    help="real corpus rows (LSv2 schema, .jsonl or .jsonl.gz; default: the shipped slice)")
    ap.add_argument("--rows", type=int, default=REAL_ROWS,
                    help="rows to load: the real file, cut or padded with synthetic rows")
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--pg", default=os.environ.get("ENGINES_PERF_PG_URL", DEFAULT_PG),
                    help="PostgreSQL server URL; a scratch schema is created there and dropped")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if not args.full.exists():
        sys.exit(f"error: {args.full} not found; pass --full PATH to a corpus file (.jsonl or .jsonl.gz)")
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "corpus.jsonl.gz"
        _, real = build_input(args.full, args.rows, data)
        return {b: measure(data, b, args.pg, args.repeat, real) for b in backends}


if __name__ == "__main__":
    main()
