"""Issue 33's engines at their real courtesy rates: 100 MathlibQR texts per engine against
each stand-in, crawled at once, each stand-in enforcing exactly that rate in its own process.

Engines and their default courtesy rates: ``leanpremise`` 6 / 30 s, ``leansearch-ps``
1 / s (batches of 8 texts), ``leandex`` 3 / 30 s (an SSE stream). Printed per engine, from
the server's own arrival times: requests, texts answered, achieved rate ÷ the limit
((N - 1) / span ÷ n / T; the ceiling is T / (T + margin)), violations counted by the
server (target 0) and the most arrivals in any window of T (must be ≤ n), and the wall
time ÷ the theoretical minimum (N - 1) · T / n of the slowest engine, measured in the same
run. At the real rates this takes about 17 minutes (leandex: 100 requests at 3 / 30 s).

Usage: python perf/new_engines_pacing.py [--queries 100] [--engines leanpremise,leansearch-ps,leandex]
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
from crawler.crawl import CrawlOptions, run_crawl  # noqa: E402
from engines.registry import ENGINES  # noqa: E402
from perf.crawl_pacing import _Quiet, _Server  # noqa: E402
from store.benchmarks import load_benchmark_file  # noqa: E402
from store.db import open_database  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--engines", default="leanpremise,leansearch-ps,leandex")
    args = ap.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in itertools.islice(fh, 2000)]
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(f"sqlite:///{Path(tmp) / 'cache.db'}")
        load_benchmark_file(db, shipped_path("MathlibQR.json"))
        rates = {e: ENGINES[e].defaults.rate for e in engines}
        servers = [_Server(e, rows, rates[e]) for e in engines]
        try:
            opts = CrawlOptions(engines=engines, bench="mathlibqr", urls={e: s.url for e, s in zip(engines, servers)},
                                limit=args.queries)
            t0 = time.perf_counter()
            summary = run_crawl(db, opts, _Quiet(every=1e9))
            wall = time.perf_counter() - t0
        finally:
            for srv in servers:
                srv.stop()
        db.dispose()
    print(f"new engines at their courtesy rates: {args.queries} texts each, crawled at once")
    minimum, total_viol = 0.0, 0
    for eng, srv, res in zip(engines, servers, summary.results):
        rate, ts = rates[eng], sorted(srv.stats["receive_times"])
        achieved = (len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 1 else float("nan")
        minimum = max(minimum, (len(ts) - 1) * rate.period / rate.n)
        total_viol += srv.stats["violations"]
        print(f"  {eng:14s} limit {rate}  requests {srv.stats['requests']:4d}  answered {res.answered_now:4d}  "
              f"achieved/allowed {achieved / (rate.n / rate.period):.4f}  violations {srv.stats['violations']}  "
              f"max in any {rate.period:g}s window {max_in_window(ts, rate.period)}/{rate.n}")
    print(f"  violations (total)        {total_viol}   target 0")
    print(f"  wall/theoretical minimum  {wall / minimum:.4f}   (wall {wall:.1f}s, minimum {minimum:.1f}s)")
    print(f"  exit code {summary.exit_code} (3 = work remains: {args.queries} of MathlibQR's texts, by design)")
    return 0 if total_viol == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
