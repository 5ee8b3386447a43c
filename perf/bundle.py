"""Bundle speed and memory: export and import of N synthetic exchanges (default 100,000).

Baseline, measured in the same run on the same SQLite file: the time to read those
exchange rows (every column, streamed) from the database, which any export must do.
Printed ratios are phase time / read time (how many "reads" an export or import
costs). Each phase runs in its own child process, so its peak resident memory
(``VmHWM``) is that phase's alone; export is also run on N/10 exchanges to show
that its memory does not grow with N (it streams).

The exchanges look like LeanSearch's: a POST with one query text and a 200 response
with 10 hits (about 2 KB), 2 % transport errors. Import = verify + insert in one
transaction ("archive"), the answers parsed with the current parser as the exchanges are
inserted; "parse": the last batch, any other unparsed exchange and the commit.

    python perf/bundle.py [--n 100000] [--dir /tmp/engines-perf-bundle]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _body(i: int) -> bytes:
    hits = [{"result": {"name": ["Synthetic", f"lemma_{i}_{r}"], "module_name": ["Mathlib", "Synthetic"],
                        "kind": "theorem", "signature": f"(n : ℕ) : n + {r} = {r} + n",
                        "informal_name": "A synthetic statement", "informal_description": "x" * 60},
             "distance": 0.1 * r} for r in range(10)]
    return json.dumps([hits], ensure_ascii=False).encode("utf-8")


def make(db_path: Path, n: int) -> None:
    import sqlalchemy as sa

    from engines.base import config_hash
    from engines.registry import get_adapter
    from store.db import open_database
    from store.models import Exchange
    from store.writes import ensure_config

    db = open_database(f"sqlite:///{db_path}")
    adapter = get_adapter("leansearch", base_url="http://127.0.0.1:9")
    ident = adapter.identity()
    with db.session() as s, s.begin():
        cid = ensure_config(s, engine="leansearch", endpoint_version=adapter.endpoint_version, params=ident,
                            config_hash=config_hash(ident), label="leansearch (perf)", result_cap=50).id
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    rows = []
    with db.session() as s, s.begin():
        for i in range(n):
            text = f"synthetic query number {i} about commutativity of addition"
            req = json.dumps({"query": [text], "num_results": 50}).encode()
            err = i % 50 == 49
            rows.append(dict(
                crawl_id=None, config_id=cid, attempt=1, epoch=0, query_texts=[text],
                request_fingerprint=f"{i:064x}", method="POST", url="http://127.0.0.1:9/search",
                request_headers={"host": "127.0.0.1:9", "content-type": "application/json",
                                 "content-length": str(len(req)), "authorization": "[redacted]"},
                request_body=req, status_code=None if err else 200,
                response_headers=None if err else {"content-type": "application/json", "content-length": "2000"},
                response_body=None if err else _body(i), transport_error="ConnectError: refused" if err else None,
                sent_at=t0 + dt.timedelta(seconds=3 * i), finished_at=t0 + dt.timedelta(seconds=3 * i, milliseconds=40),
                elapsed_ms=40.0,
            ))
            if len(rows) == 2000:
                s.execute(sa.insert(Exchange), rows)
                rows.clear()
        if rows:
            s.execute(sa.insert(Exchange), rows)
    db.dispose()


def phase(name: str, db_path: Path, other: Path) -> dict:
    from store.db import open_database

    t0 = time.perf_counter()
    out: dict = {}
    if name == "read":
        import sqlalchemy as sa

        from store.models import Exchange

        db = open_database(f"sqlite:///{db_path}")
        n = size = 0
        with db.engine.connect() as conn:
            for row in conn.execution_options(stream_results=True, yield_per=1000).execute(
                    sa.select(Exchange.__table__).order_by(Exchange.sent_at, Exchange.id)):
                n += 1
                size += len(row.response_body or b"") + len(row.request_body or b"")
        out = {"exchanges": n, "body_bytes": size}
    elif name == "export":
        from archive.bundle import export_bundle

        db = open_database(f"sqlite:///{db_path}")
        s = export_bundle(db, other)
        out = {"exchanges": s.exchanges, "bytes": s.bytes}
    elif name == "import":
        from archive.bundle import import_bundle

        db = open_database(f"sqlite:///{db_path}")
        s = import_bundle(db, other)
        out = {"exchanges": s.added, "answers": s.answers, "archive_s": s.seconds_archive, "parse_s": s.seconds_parse}
    db.dispose()
    out["seconds"] = time.perf_counter() - t0
    out["peak_rss_mb"] = _peak_rss_mb()
    return out


def _peak_rss_mb() -> float:
    # VmHWM belongs to this process image; ru_maxrss would carry the parent's peak across fork.
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(name: str, db_path: Path, other: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, __file__, "--phase", name, "--db", str(db_path), "--other", str(other)],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/engines-perf-bundle"))
    ap.add_argument("--phase")
    ap.add_argument("--db", type=Path)
    ap.add_argument("--other", type=Path)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.db, args.other)))
        return
    d = args.dir
    d.mkdir(parents=True, exist_ok=True)
    for f in d.iterdir():
        f.unlink()
    small_n = max(1, args.n // 10)
    make(d / "small.db", small_n)
    make(d / "src.db", args.n)
    read = child("read", d / "src.db", d / "-")
    small = child("export", d / "small.db", d / "small.warc.gz")
    exp = child("export", d / "src.db", d / "b.warc.gz")
    from store.db import open_database

    open_database(f"sqlite:///{d / 'dst.db'}").dispose()  # an empty, migrated database
    imp = child("import", d / "dst.db", d / "b.warc.gz")
    n = read["exchanges"]
    print(f"{n:,} exchanges ({read['body_bytes'] / 1e6:.0f} MB of bodies), SQLite, one process per phase")
    print(f"read rows (baseline)   {read['seconds']:7.1f} s  {n / read['seconds']:9,.0f} exchanges/s  "
          f"peak RSS {read['peak_rss_mb']:6.0f} MB")
    print(f"export                 {exp['seconds']:7.1f} s  {n / exp['seconds']:9,.0f} exchanges/s  "
          f"peak RSS {exp['peak_rss_mb']:6.0f} MB  = {exp['seconds'] / read['seconds']:.1f} x read;  "
          f"bundle {exp['bytes'] / 1e6:.0f} MB")
    print(f"export of {small_n:,}      {small['seconds']:7.1f} s  peak RSS {small['peak_rss_mb']:6.0f} MB "
          f"(memory ratio {args.n:,} / {small_n:,}: {exp['peak_rss_mb'] / small['peak_rss_mb']:.2f})")
    print(f"import (all)           {imp['seconds']:7.1f} s  {n / imp['seconds']:9,.0f} exchanges/s  "
          f"peak RSS {imp['peak_rss_mb']:6.0f} MB  = {imp['seconds'] / read['seconds']:.1f} x read")
    print(f"  verify+insert+parse  {imp['archive_s']:7.1f} s  = {imp['archive_s'] / read['seconds']:.1f} x read "
          f"(one transaction)")
    print(f"  last batch + commit  {imp['parse_s']:7.1f} s  ({imp['answers']:,} answers)")


if __name__ == "__main__":
    main()
