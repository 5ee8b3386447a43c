"""Peak memory of `engines crawl` against hostile bodies (issue 21): a gzip bomb, an
endless chunked body, a 200 MB body, against a healthy answer measured in the same run.

Each case runs `engines crawl loogle --limit 1 --max-attempts 1` as a subprocess (as a
person would) against a loopback server (tests/support/hostile.py) and reads the child's peak
RSS (``VmHWM`` from /proc, polled until it exits). Printed per case: peak RSS in MiB, its ratio to the healthy
baseline, bytes the server sent, what the archive holds, and the wall time.

Usage: python perf/hostile_bodies.py [--bomb-mib 1024] [--big-mib 200] [--max-body 16MiB]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.hostile import Hostile, healthy, response  # noqa: E402


def bomb(mib: int) -> bytes:
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    block = bytes(1024 * 1024)
    return b"".join([*(z.compress(block) for _ in range(mib)), z.flush()])


def endless(srv: Hostile, limit: int):
    chunk = b"[" * 65536

    async def write(srv: Hostile, writer: asyncio.StreamWriter) -> None:
        srv.send(writer, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        while srv.sent_bytes < limit:
            srv.send(writer, b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
    return write


def run_case(db_url: str, make_reply, max_body: str) -> tuple[int, float, int, int]:
    """(peak RSS KiB, wall s, exit code, server bytes); ``make_reply(server)`` -> reply(i)."""
    box: dict = {}
    srv = Hostile(lambda i: box["reply"](i))
    box["reply"] = make_reply(srv)
    with srv:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ENGINES_DATABASE_URL": db_url}
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "crawl", "loogle", "--bench", "tiny",
                                 "--url", f"loogle={srv.url}", "--limit", "1", "--max-attempts", "1",
                                 "--rate", "10/1s", "--max-body", max_body],
                                env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        hwm = 0
        while proc.poll() is None:
            hwm = max(hwm, _vm_hwm(proc.pid))
            time.sleep(0.02)
        wall = time.perf_counter() - t0
    return hwm, wall, proc.returncode, srv.sent_bytes


def _vm_hwm(pid: int) -> int:
    """The process's peak RSS so far in KiB (VmHWM: per address space, so unlike wait4's
    ru_maxrss it does not inherit this script's own peak across fork and exec)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bomb-mib", type=int, default=1024)
    ap.add_argument("--big-mib", type=int, default=200)
    ap.add_argument("--max-body", default="16MiB")
    args = ap.parse_args()

    from store.benchmarks import load_benchmark_file
    from store.db import open_database

    gz = bomb(args.bomb_mib)
    big = response(b"[" + b" " * (args.big_mib * 1024 * 1024) + b"]")
    cases = [
        ("healthy answer (baseline)", lambda srv: healthy),
        (f"gzip bomb {len(gz) // 1024} KiB -> {args.bomb_mib} MiB",
         lambda srv: lambda i: response(gz, headers={"Content-Encoding": "gzip"})),
        ("endless chunked body (server stops at 4 GiB)", lambda srv: lambda i: endless(srv, 4 << 30)),
        (f"plain {args.big_mib} MiB body", lambda srv: lambda i: big),
    ]
    print(f"engines crawl against hostile bodies, --max-body {args.max_body}")
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        bench = Path(tmp) / "MathlibQR.json"
        bench.write_text(json.dumps([{"id": f"t{i}", "full_name": f"Nat.x{i}", "q1c_natural": f"text {i}"}
                                     for i in range(8)]))
        for n, (label, make_reply) in enumerate(cases):
            url = f"sqlite:///{tmp}/c{n}.db"
            db = open_database(url)
            try:
                load_benchmark_file(db, bench, name="tiny", allow_modified=True)
            finally:
                db.dispose()
            rss, wall, code, sent = run_case(url, make_reply, args.max_body)
            db = open_database(url)
            try:
                with db.engine.connect() as conn:
                    stored, cut = conn.exec_driver_sql(
                        "SELECT coalesce(sum(length(response_body)), 0), coalesce(max(body_truncated), 0) "
                        "FROM exchanges").one()
            finally:
                db.dispose()
            base = base or rss
            print(f"{label:<44} peak RSS {rss / 1024:7.1f} MiB ({rss / base:4.2f}x baseline)  exit {code}  "
                  f"server sent {sent / 2**20:8.1f} MiB  archived {stored / 2**20:6.1f} MiB"
                  f"{' truncated' if cut else ''}  {wall:5.1f} s")


if __name__ == "__main__":
    main()
