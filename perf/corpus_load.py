"""Corpus load speed: the real 250,379-row extracted Mathlib plus synthetic rows up to 310,579.

Prints rows/s of `store.corpus.load_corpus` into a fresh SQLite file (or the database in
ENGINES_PERF_DATABASE_URL) and the ratio of load time to the time of merely parsing the
same JSON lines (json.loads over the decompressed file), both measured in this run.

    python perf/corpus_load.py [--full PATH] [--rows 310579]
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

from store.corpus import load_corpus  # noqa: E402
from store.db import open_database  # noqa: E402

DEFAULT_FULL = ROOT.parent / "shared" / "data" / "mathlib-full" / "declarations.jsonl.gz"
TARGET_ROWS = 310_579  # the LeanSearch v2 corpus size


def build_input(full: Path, rows: int, out: Path) -> int:
    """Copy the real rows and append synthetic rows in the same schema (LSv2 keys, filled)."""
    rng = random.Random(0)
    n = 0
    words = ["Nat", "Int", "Real", "Finset", "Group", "Ring", "Module", "Topology", "Measure", "Lattice"]
    with gzip.open(full, "rt", encoding="utf-8") as src, gzip.open(out, "wt", encoding="utf-8", compresslevel=1) as dst:
        for line in src:
            dst.write(line)
            n += 1
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
    return n


def parse_only(path: Path) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = 0
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                json.loads(line)
                n += 1
    return n, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", type=Path, default=DEFAULT_FULL)
    ap.add_argument("--rows", type=int, default=TARGET_ROWS)
    args = ap.parse_args()
    if not args.full.exists():
        sys.exit(f"error: {args.full} not found; pass --full PATH to the extracted declarations.jsonl.gz")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "corpus.jsonl.gz"
        total = build_input(args.full, args.rows, data)
        url = os.environ.get("ENGINES_PERF_DATABASE_URL") or f"sqlite:///{Path(tmp) / 'perf.db'}"
        db = open_database(url)
        n_parse, t_parse = parse_only(data)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        res = load_corpus(db, str(data), name="perf", revision="perf")
        t_load = time.perf_counter() - t0
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        db.dispose()
    assert res.rows == total == n_parse, (res.rows, total, n_parse)
    print(f"database:          {db.dialect}")
    print(f"rows:              {res.rows:,} (250,379 real + {res.rows - 250_379:,} synthetic)")
    print(f"parse only:        {t_parse:6.2f} s  ({n_parse / t_parse:,.0f} rows/s)")
    print(f"load (one txn):    {t_load:6.2f} s  ({res.rows / t_load:,.0f} rows/s)")
    print(f"load / parse time: {t_load / t_parse:.2f}x")
    print(f"peak RSS growth during load: {(rss1 - rss0) / 1024:.0f} MiB (max RSS {rss1 / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
