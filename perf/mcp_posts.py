"""POSTs per answered query of an MCP crawl against a budget that counts every POST.

A ``leanexplore-mcp`` stand-in (the official SDK's server, stateful with SSE, as the hosted
FastMCP 1.x app runs by default) enforces N POSTs per T seconds counting *every* POST —
the discover probe, initialize, the initialized notification, tools/list and each
tools/call (ENGINE-APIS.md §10.10) — and answers 429 with Retry-After over it. The crawler
crawls Q MathlibQR query texts at the same rate. Printed: POSTs the server saw, queries
answered, their ratio (target ≤ 1.05; a fresh SDK ``auto`` client spends 5 POSTs by its
first answer, 1 per further call on the session: (Q + 4) / Q, the baseline printed in the
same run), 429s (target 0), the most POSTs in any window of T (≤ N) and the wall time
against the minimum (POSTs − 1) · T / N.

Usage: python perf/mcp_posts.py [--n 30] [--period 60] [--queries 100]
(the defaults are the real budget: about 3.5 minutes; ``--period 3`` scales it down).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import SLICE_CORPUS, shipped_path  # noqa: E402
from crawler.pacing import max_in_window  # noqa: E402
from crawler.crawl import CrawlOptions, Reporter, run_crawl  # noqa: E402
from engines.base import Rate  # noqa: E402
from engines.emulate import StandIn  # noqa: E402
from store.benchmarks import load_benchmark_file  # noqa: E402
from store.db import open_database  # noqa: E402


class _Quiet(Reporter):
    def __init__(self) -> None:
        super().__init__(every=1e9)

    def log(self, message: str) -> None:
        pass


def measure(n: int, period: float, queries: int, variant: str = "stateful-sse") -> dict:
    rate = Rate(n, period)
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in itertools.islice(fh, 400)]
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(f"sqlite:///{Path(tmp) / 'mcp.db'}")
        try:
            load_benchmark_file(db, shipped_path("MathlibQR.json"))
            with StandIn("leanexplore-mcp", rows, rate=rate, variant=variant) as srv:
                t0 = time.perf_counter()
                opts = CrawlOptions(engines=["leanexplore-mcp"], bench="mathlibqr", rates={"*": rate},
                                    urls={"leanexplore-mcp": srv.url}, limit=queries)
                summary = run_crawl(db, opts, _Quiet())
                wall = time.perf_counter() - t0
                stats = srv.stats
            answered = summary.results[0].counts.answered
        finally:
            db.dispose()
    posts = sum(1 for e in stats.log if e["method"] == "POST")
    return {"posts": posts, "answered": answered, "ratio": posts / max(1, answered),
            "sdk_auto_baseline": (answered + 4) / max(1, answered), "http_429": stats.statuses.get(429, 0),
            "max_in_window": max_in_window(stats.receive_times, period), "n": n,
            "wall_s": wall, "min_wall_s": (posts - 1) * period / n, "exit_code": summary.exit_code}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--period", type=float, default=60.0)
    ap.add_argument("--queries", type=int, default=100)
    args = ap.parse_args(argv)
    r = measure(args.n, args.period, args.queries)
    print(f"leanexplore-mcp at {args.n} POST / {args.period:g} s, {args.queries} queries:")
    print(f"  POSTs {r['posts']}, answered {r['answered']}: {r['ratio']:.3f} POSTs per answered query "
          f"(target <= 1.05; a fresh SDK auto client: {r['sdk_auto_baseline']:.3f})")
    print(f"  HTTP 429: {r['http_429']} (target 0); most POSTs in any {args.period:g} s: {r['max_in_window']} "
          f"(<= {args.n})")
    print(f"  wall {r['wall_s']:.1f} s vs minimum {r['min_wall_s']:.1f} s ({r['wall_s'] / max(r['min_wall_s'], 1e-9):.2f}x); "
          f"exit {r['exit_code']}")
    return 0 if r["ratio"] <= 1.05 and r["http_429"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
