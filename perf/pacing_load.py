"""Pacing under load: several crawl workers on PostgreSQL, a busy machine, one limited stand-in.

W worker processes (default 3) crawl one LeanExplore stand-in through ``crawler.crawl``,
sharing one PostgreSQL schema (one pacing budget per host through ``send_log`` and the
``host_state`` row lock). The stand-in runs in its own process and enforces n per T
itself; one CPU-burning process per core keeps the machine busy meanwhile. Printed:

- the most requests the *server* saw in any window of length T (must be <= n) and its
  violations (requests over its own sliding window; must be 0);
- the send jitter: for every request, the time from the pacer's grant to the moment the
  request headers start to leave (``Pacer.correct``'s two arguments) — median, p99,
  p99.9, max; this is what the safety margin has to cover, since another worker may read
  the send log before the late departure is corrected there;
- the arrival jitter: server arrival minus the corrected send time, minus its minimum;
- achieved rate / allowed rate at the server (the cost of the margin) and the margin used;
- lease rows left behind after every worker exited normally (must be 0 when all is answered).

Usage: python perf/pacing_load.py [--workers 3] [--n 20] [--period 1] [--queries 240]
       [--burners N (default: one per core)] [--margin SECONDS (default: the crawler's)]
       [--pg URL]
``run()`` is also what tests/crawler/test_pacing_load.py calls, with a shorter run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PG_DEFAULT = os.environ.get("ENGINES_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _burn() -> None:  # pragma: no cover - runs in a child process until terminated
    x = 0
    while True:
        x += 1


def _serve(rows: list, n: int, period: float, port_q, stop_ev, stats_q) -> None:
    from engines.base import Rate
    from engines.emulate import StandIn

    with StandIn("leanexplore", rows, rate=Rate(n, period)).in_thread() as srv:
        port_q.put(srv.url)
        stop_ev.wait()
        st = srv.stats
        stats_q.put({"requests": st.requests, "violations": st.violations, "receive_times": list(st.receive_times)})


def _worker(url: str, srv_url: str, n: int, period: float, margin, limit, bench: str, ready, go, out_q) -> None:
    """One crawl worker process; reports (grant, departure) pairs of its sends."""
    import crawler.pacing as pacing
    from crawler.fetch import RetryPolicy
    from crawler.crawl import CrawlOptions, Reporter, run_crawl
    from engines.base import Rate
    from store.db import open_database

    pairs: list[tuple[float, float]] = []
    orig = pacing.Pacer.departed  # where a shared ledger's departures are noted

    def departed(self, recorded: float, actual: float, threshold: float = 0.001) -> bool:
        pairs.append((recorded, actual))
        return orig(self, recorded, actual, threshold)

    pacing.Pacer.departed = departed

    class _Quiet(Reporter):
        def log(self, message: str) -> None:
            if message.startswith("error"):
                print(message, file=sys.stderr)

    db = open_database(url)
    ready.release()
    go.wait()
    opts = CrawlOptions(engines=["leanexplore"], bench=bench, rates={"*": Rate(n, period)},
                        urls={"leanexplore": srv_url}, margin=margin, limit=limit,
                        policy=RetryPolicy(backoff_initial=0.05, backoff_max=0.5))
    summary = run_crawl(db, opts, _Quiet(every=1e9))
    db.dispose()
    out_q.put({"pid": os.getpid(), "pairs": pairs, "exit": summary.exit_code,
               "answered": sum(r.answered_now for r in summary.results)})


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))] if s else float("nan")


def run(*, workers: int = 3, n: int = 20, period: float = 1.0, queries: int = 240, burners: int | None = None,
        margin: float | None = None, pg: str = PG_DEFAULT, rows: int = 1500, bench: str = "mathlibqr") -> dict:
    import sqlalchemy as sa

    from benchmarks import SLICE_CORPUS, shipped_path
    from crawler.pacing import default_margin, max_in_window
    from engines.base import Rate
    from store.benchmarks import load_benchmark_file
    from store.db import open_database

    ctx = mp.get_context("spawn")
    schema = f"perf_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(pg, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in pg else "?"
    url = f"{pg}{sep}options=-csearch_path%3D{schema}"
    procs: list = []
    try:
        db = open_database(url)
        load_benchmark_file(db, shipped_path({"mathlibqr": "MathlibQR.json", "mathlibmpr": "MathlibMPR.json"}[bench]))
        db.dispose()
        with open(SLICE_CORPUS, encoding="utf-8") as fh:
            corpus = [json.loads(line) for line in itertools.islice(fh, rows)]
        port_q, stats_q, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
        server = ctx.Process(target=_serve, args=(corpus, n, period, port_q, stop, stats_q), daemon=True)
        server.start()
        procs.append(server)
        srv_url = port_q.get(timeout=120)
        go, out_q, ready = ctx.Event(), ctx.Queue(), ctx.Semaphore(0)
        per_worker = -(-queries // workers)
        ws = [ctx.Process(target=_worker, args=(url, srv_url, n, period, margin, per_worker, bench, ready, go, out_q), daemon=True)
              for _ in range(workers)]
        for w in ws:
            w.start()
        procs += ws
        nburn = (os.cpu_count() or 1) if burners is None else burners
        burns = [ctx.Process(target=_burn, daemon=True) for _ in range(nburn)]
        for b in burns:
            b.start()
        procs += burns
        for _ in ws:  # every worker imported and connected; the burners are spinning meanwhile
            assert ready.acquire(timeout=300), "a worker did not start"
        time.sleep(0.2)
        t0 = time.perf_counter()
        go.set()
        results = [out_q.get(timeout=600) for _ in ws]
        wall = time.perf_counter() - t0
        for b in burns:
            b.terminate()
        stop.set()
        stats = stats_q.get(timeout=60)
        eng = sa.create_engine(url)
        with eng.connect() as conn:
            leases = conn.exec_driver_sql("SELECT count(*), count(*) FILTER (WHERE worker <> '') FROM work_leases").one()
            sends = sorted(r[0] for r in conn.exec_driver_sql("SELECT sent_at FROM send_log").all())
        eng.dispose()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=10)
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()
    rate = Rate(n, period)
    arrivals = sorted(stats["receive_times"])
    offset = time.time() - time.perf_counter()  # wall clock -> the server's perf_counter
    delays = [a - g for r in results for g, a in r["pairs"]]
    arrival_jitter: list[float] = []
    if len(sends) == len(arrivals):
        d = sorted(a - (s - offset) for a, s in zip(arrivals, sends))
        arrival_jitter = [x - d[0] for x in d]
    span = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else float("nan")
    return {
        "workers": workers, "rate": str(rate), "burners": nburn,
        "margin": default_margin(rate) if margin is None else margin,
        "requests": stats["requests"], "violations": stats["violations"],
        "max_in_window": max_in_window(arrivals, period), "n": n,
        "answered": sum(r["answered"] for r in results), "exits": [r["exit"] for r in results],
        "send_jitter": delays, "arrival_jitter": arrival_jitter,
        "achieved_over_allowed": ((len(arrivals) - 1) / span) / (n / period) if span == span and span > 0 else None,
        "wall": wall, "lease_rows": leases[0], "lease_rows_naming_a_worker": leases[1],
    }


def _ms(xs: list[float], q: float) -> str:
    return f"{_quantile(xs, q) * 1e3:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--period", type=float, default=1.0)
    ap.add_argument("--queries", type=int, default=240)
    ap.add_argument("--burners", type=int, default=None)
    ap.add_argument("--margin", type=float, default=None)
    ap.add_argument("--pg", default=PG_DEFAULT)
    a = ap.parse_args()
    r = run(workers=a.workers, n=a.n, period=a.period, queries=a.queries, burners=a.burners, margin=a.margin, pg=a.pg)
    sj, aj = r["send_jitter"], r["arrival_jitter"]
    print(f"pacing under load: {r['workers']} workers on PostgreSQL, limit {r['rate']}, {r['burners']} CPU burners, "
          f"margin {r['margin'] * 1e3:.0f} ms")
    print(f"  server: {r['requests']} requests, violations {r['violations']} (target 0), "
          f"max in any {a.period:g}s window {r['max_in_window']}/{r['n']}")
    print(f"  send jitter (grant -> request leaves), {len(sj)} sends: median {_ms(sj, .5)} ms, p99 {_ms(sj, .99)} ms, "
          f"p99.9 {_ms(sj, .999)} ms, max {max(sj) * 1e3:.1f} ms")
    if aj:
        print(f"  arrival jitter (leaves -> server sees it, minus its minimum): median {_ms(aj, .5)} ms, "
              f"p99 {_ms(aj, .99)} ms, max {max(aj) * 1e3:.1f} ms")
    print(f"  achieved/allowed at the server {r['achieved_over_allowed']:.4f}; wall {r['wall']:.1f}s; "
          f"answered {r['answered']}; exits {r['exits']}")
    print(f"  work_leases rows left: {r['lease_rows']} ({r['lease_rows_naming_a_worker']} naming a worker)")
    return 0 if r["violations"] == 0 and r["max_in_window"] <= r["n"] else 1


if __name__ == "__main__":
    sys.exit(main())
