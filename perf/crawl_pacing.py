"""Crawl pacing efficiency: how close the crawler runs to a courtesy limit without breaking it.

Two stand-in engines (LeanSearch and LeanExplore APIs) on loopback, each enforcing a
scaled limit of 20 requests per 2 s, are crawled at once by ``crawler.crawl`` for 300
MathlibQR query texts each, into a fresh SQLite cache. The stand-ins run in their own
processes (as real servers would), so their work does not compete with the crawler for
the GIL. Printed, per engine and together:

- achieved rate ÷ allowed rate, from the server's own arrival times:
  ((N - 1) / (last arrival - first arrival)) ÷ (n / T)   — the ceiling is T / (T + margin)
  (every n-th send waits for the window plus the safety margin; 0.952 at 20/2s with the
  default 100 ms margin); target ≥ 0.99 × that ceiling;
- violations counted by the server (requests over its sliding window) — target 0,
  and the most arrivals seen in any window of length T (must be ≤ n);
- wall time ÷ theoretical minimum, where the minimum is (N - 1) · T / n (strict
  spacing at exactly the allowed rate, the same for both engines since they run
  concurrently) — the baseline is computed in the same run from the same N, n, T.

Usage: python perf/crawl_pacing.py [--n 20] [--period 2] [--queries 300]
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import SLICE_CORPUS, shipped_path  # noqa: E402
from crawler.pacing import default_margin, max_in_window  # noqa: E402
from crawler.crawl import CrawlOptions, Reporter, run_crawl  # noqa: E402
from engines.base import Rate  # noqa: E402
from engines.emulate import StandIn  # noqa: E402
from store.benchmarks import load_benchmark_file  # noqa: E402
from store.db import open_database  # noqa: E402


def _serve(engine: str, rows: list, rate: Rate, port_q, stop_ev, stats_q) -> None:
    """A stand-in in its own process, like a real server: its work never competes with the
    crawler for the GIL. Reports its own view (arrivals, violations) when told to stop."""
    with StandIn(engine, rows, rate=rate).in_thread() as srv:
        port_q.put(srv.url)
        stop_ev.wait()
        st = srv.stats
        stats_q.put({"requests": st.requests, "violations": st.violations, "receive_times": list(st.receive_times)})


class _Server:
    def __init__(self, engine: str, rows: list, rate: Rate) -> None:
        ctx = mp.get_context("spawn")
        self._q, self._stats_q, self._stop = ctx.Queue(), ctx.Queue(), ctx.Event()
        self.proc = ctx.Process(target=_serve, args=(engine, rows, rate, self._q, self._stop, self._stats_q),
                                daemon=True)
        self.proc.start()
        self.url = self._q.get(timeout=60)
        self.stats: dict = {}

    def stop(self) -> None:
        self._stop.set()
        self.stats = self._stats_q.get(timeout=30)
        self.proc.join(timeout=30)


class _Quiet(Reporter):
    def log(self, message: str) -> None:
        if message.startswith("error"):
            print(message, file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--period", type=float, default=2.0)
    ap.add_argument("--queries", type=int, default=300)
    args = ap.parse_args()
    rate = Rate(args.n, args.period)

    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in itertools.islice(fh, 2000)]
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'cache.db'}"
        db = open_database(url)
        load_benchmark_file(db, shipped_path("MathlibQR.json"))
        engines = ("leansearch", "leanexplore")
        servers = [_Server(e, rows, rate) for e in engines]
        try:
            opts = CrawlOptions(engines=list(engines), bench="mathlibqr", rates={"*": rate},
                                urls={e: srv.url for e, srv in zip(engines, servers)}, limit=args.queries)
            t0 = time.perf_counter()
            summary = run_crawl(db, opts, _Quiet(every=1e9))
            wall = time.perf_counter() - t0
        finally:
            for srv in servers:
                srv.stop()
        with db.engine.connect() as conn:
            sends = conn.exec_driver_sql("SELECT host, sent_at FROM send_log ORDER BY sent_at").all()
        db.dispose()
    # wall clock (send_log) -> the servers' perf_counter (CLOCK_MONOTONIC, shared by processes)
    offset = time.time() - time.perf_counter()

    allowed = rate.n / rate.period
    minimum = (args.queries - 1) * rate.period / rate.n
    print(f"crawl pacing: {len(engines)} engines at once, {args.queries} queries each, limit {rate} per engine")
    ratios = []
    for eng, srv, res in zip(engines, servers, summary.results):
        ts = sorted(srv.stats["receive_times"])
        achieved = (len(ts) - 1) / (ts[-1] - ts[0])
        ratios.append(achieved / allowed)
        print(f"  {eng:12s} requests {srv.stats['requests']:4d}  answered {res.answered_now:4d}  "
              f"achieved/allowed {achieved / allowed:.4f}  violations {srv.stats['violations']}  "
              f"max in any {rate.period:g}s window {max_in_window(ts, rate.period)}/{rate.n}  "
              f"span {ts[-1] - ts[0]:.2f}s")
        host = srv.url.split("//", 1)[1].split("/", 1)[0]
        mine = [t - offset for h, t in sends if h == host]
        if len(mine) == len(ts):
            # Arrival delay relative to the recorded send time, minus its minimum: the jitter
            # the pacing margin must absorb (compressed gaps on the server's side).
            d = sorted(a - b for a, b in zip(ts, mine))
            j = [x - d[0] for x in d]
            print(f"  {'':12s} arrival jitter: median {j[len(j) // 2] * 1e3:.1f} ms, p99 "
                  f"{j[int(0.99 * (len(j) - 1))] * 1e3:.1f} ms, max {j[-1] * 1e3:.1f} ms "
                  f"(pacing margin {default_margin(rate) * 1e3:.0f} ms)")
    total_viol = sum(s.stats["violations"] for s in servers)
    ceiling = rate.period / (rate.period + default_margin(rate))
    print(f"  achieved/allowed (worst engine) {min(ratios):.4f}   target >= {0.99 * ceiling:.4f} "
          f"(0.99 x the ceiling T/(T + margin) = {ceiling:.4f})")
    print(f"  violations (total)              {total_viol}        target 0")
    print(f"  wall/theoretical minimum        {wall / minimum:.4f}   (wall {wall:.2f}s, minimum {minimum:.2f}s "
          f"= (N-1)*T/n for one engine; engines run concurrently)")
    print(f"  exit code {summary.exit_code} (3 = work remains: {args.queries} of MathlibQR's texts, by design)")
    return 0 if total_viol == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
