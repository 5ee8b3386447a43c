"""Re-derivation speed (issue 24): ``engines reparse`` after a parser fix, and ``engines import``.

Exchanges look like LeanSearch's (a POST with one query text; a 200 response with 50
hits, about 17 KB of JSON; 2 % transport errors). Each phase runs in its own child
process (its peak resident memory, ``VmHWM``, is its own), each ratio is against a
baseline measured in the same run, on the same data:

- **reparse**, SQLite and PostgreSQL: the database holds every exchange parsed by the
  previous parser version into answers that differ from today's parse (10 hits where
  today's parser reads 50), so a reparse rewrites every answer. Printed: exchanges/s
  against the targets (1,000/s SQLite, 500/s PostgreSQL), and the time against reading
  the same bodies from the database and ``json.loads``-ing them (the floor).
- **import** of a bundle of those exchanges into an empty SQLite database, parse
  included, against reading the same bundle with warcio alone (every record, payload
  read; target ≤ 3×); and its peak memory against an import of a tenth as many
  exchanges (flat: ratio about 1). Beside it, the import's *floor*: the least any import
  that keeps the archive's guarantees must do, written with no tool code (warcio reading
  with every digest checked, ``json.loads`` of each body, the bodies and one row per hit
  written with sqlite3 ``executemany`` in one WAL transaction), timed part by part.

    python perf/rederive.py --small          # 10,000 exchanges: a quick check (a minute or two)
    python perf/rederive.py                  # 100,000 exchanges (several minutes)
    python perf/rederive.py --n 2000 --backend sqlite
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perf._scratch import DEFAULT_PG, scratch_url  # noqa: E402

HITS = 50
OLD_HITS = 10  # what the "previous parser" kept: every answer differs from today's parse
TARGET = {"sqlite": 1000.0, "postgresql": 500.0}


def _hit(i: int, r: int) -> dict:
    return {"result": {"name": ["Synthetic", f"lemma_{i}_{r}"], "module_name": ["Mathlib", "Synthetic", "Basic"],
                       "kind": "theorem", "signature": f"(n m : ℕ) (h : n ≤ m) : n + {r} ≤ m + {r}",
                       "docstring": None,
                       "informal_name": "Monotonicity of adding a constant",
                       "informal_description": "Adding a constant keeps the order: $n + r \\le m + r$."},
            "distance": round(0.01 * r + 0.001 * (i % 7), 6)}


def _body(i: int) -> bytes:
    return json.dumps([[_hit(i, r) for r in range(HITS)]], ensure_ascii=False).encode("utf-8")


def make(url: str, n: int) -> dict:
    """``n`` exchanges of one LeanSearch configuration, each parsed by the "previous" parser version."""
    import sqlalchemy as sa

    from engines.base import config_hash
    from engines.registry import get_adapter
    from store.benchmarks import query_sha256
    from store.db import open_database
    from store.models import Exchange, ParseOutcome
    from store.writes import AnswerRow, HitRow, add_answers, ensure_config

    db = open_database(url)
    adapter = get_adapter("leansearch", base_url="http://127.0.0.1:9")
    ident = adapter.identity()
    old = adapter.parser_version - 1
    with db.session() as s, s.begin():
        cid = ensure_config(s, engine="leansearch", endpoint_version=adapter.endpoint_version, params=ident,
                            config_hash=config_hash(ident), label="leansearch (perf)", result_cap=50).id
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    body_bytes = 0
    step = 1000
    for start in range(0, n, step):
        rows = []
        for i in range(start, min(n, start + step)):
            text = f"synthetic query number {i} about monotonicity of addition"
            req = json.dumps({"query": [text], "num_results": HITS}).encode()
            err = i % 50 == 49
            body = None if err else _body(i)
            body_bytes += len(body or b"")
            rows.append(dict(
                crawl_id=None, config_id=cid, attempt=1, epoch=0, query_texts=[text],
                request_fingerprint=f"{i:064x}", method="POST", url="http://127.0.0.1:9/search",
                request_headers={"host": "127.0.0.1:9", "content-type": "application/json",
                                 "content-length": str(len(req))},
                request_body=req, status_code=None if err else 200,
                response_headers=None if err else {"content-type": "application/json",
                                                   "content-length": str(len(body))},
                response_body=body, transport_error="ConnectError: refused" if err else None,
                sent_at=t0 + dt.timedelta(seconds=3 * i), finished_at=t0 + dt.timedelta(seconds=3 * i, milliseconds=40),
                elapsed_ms=40.0,
            ))
        with db.session() as s, s.begin():
            ids = list(s.execute(sa.insert(Exchange).returning(Exchange.id, sort_by_parameter_order=True),
                                 rows).scalars())
            ok = [(ex_id, r) for ex_id, r in zip(ids, rows) if r["status_code"] == 200]
            s.execute(sa.insert(ParseOutcome), [dict(exchange_id=ex_id, parser_version=old, ok=True, error=None,
                                                     dropped_items=0, drop_reason=None) for ex_id, _ in ok])
            add_answers(s, [AnswerRow(
                config_id=cid, query_text=r["query_texts"][0], query_sha256=query_sha256(r["query_texts"][0]),
                hits=[HitRow(rank=k + 1, name=f"Synthetic.lemma_{int(r['request_fingerprint'], 16)}_{k}")
                      for k in range(OLD_HITS)],
                exchange_id=ex_id, parser_version=old, latency_ms=40.0) for ex_id, r in ok])
    db.dispose()
    return {"body_bytes": body_bytes}


def _peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _import_floor(path: str) -> dict:
    """The least any import keeping the archive's guarantees must do, with no tool code: read
    the bundle with warcio checking every digest, ``json.loads`` each 2xx body, and write
    the bodies and one row per hit (name and the hit's raw JSON, as ``hits`` stores them)
    with sqlite3 ``executemany`` into a WAL database with the same unique key and name
    index, in one transaction. Parts are timed as they run (read+digests, json, writes, commit)."""
    import sqlite3

    from warcio.archiveiterator import ArchiveIterator

    dbfile = Path(path).with_suffix(".floor.db")
    conn = sqlite3.connect(dbfile, isolation_level=None)
    conn.executescript(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
        "CREATE TABLE exchanges (id INTEGER PRIMARY KEY, uri TEXT, status INTEGER, body BLOB);"
        "CREATE TABLE hits (id INTEGER PRIMARY KEY, answer_id INTEGER, rank INTEGER, name TEXT, raw TEXT,"
        " UNIQUE (answer_id, rank)); CREATE INDEX ix_hits_name ON hits (name);")
    conn.execute("BEGIN")
    t = {"read": 0.0, "json": 0.0, "write": 0.0}
    n = hits = 0
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    with open(path, "rb") as fh:
        it = iter(ArchiveIterator(fh, check_digests=True))
        while True:
            t0 = time.perf_counter()
            record = next(it, None)
            if record is None:
                t["read"] += time.perf_counter() - t0
                break
            body = record.content_stream().read()
            record.raw_stream.read()  # the rest of the block, so the digests see every byte
            status = record.http_headers.get_statuscode() if record.http_headers else None
            t1 = time.perf_counter()
            t["read"] += t1 - t0
            if record.rec_type != "response":
                continue
            n += 1
            rows = []
            if status == "200":
                for r, item in enumerate(json.loads(body)[0], 1):
                    rows.append((n, r, ".".join(item["result"]["name"]), dumps(item)))
            t2 = time.perf_counter()
            conn.execute("INSERT INTO exchanges (id, uri, status, body) VALUES (?, ?, ?, ?)",
                         (n, record.rec_headers.get_header("WARC-Target-URI"), int(status or 0), body))
            conn.executemany("INSERT INTO hits (answer_id, rank, name, raw) VALUES (?, ?, ?, ?)", rows)
            hits += len(rows)
            t3 = time.perf_counter()
            t["json"] += t2 - t1
            t["write"] += t3 - t2
    t0 = time.perf_counter()
    conn.execute("COMMIT")
    conn.close()
    t["commit"] = time.perf_counter() - t0
    dbfile.unlink()
    return {"exchanges": n, "hits": hits, **{f"{k}_s": v for k, v in t.items()}}


def phase(name: str, url: str, path: str) -> dict:
    out: dict = {}
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    if name == "make":
        out = make(url, int(path))
    elif name == "floor":  # read every 2xx body from the database and json.loads it
        import sqlalchemy as sa

        from store.db import open_database
        from store.models import Exchange

        db = open_database(url)
        t0, cpu0 = time.perf_counter(), time.process_time()
        n = 0
        with db.engine.connect() as conn:
            for (body,) in conn.execution_options(stream_results=True, yield_per=500).execute(
                    sa.select(Exchange.response_body).where(Exchange.status_code == 200).order_by(Exchange.id)):
                json.loads(body)
                n += 1
        db.dispose()
        out = {"exchanges": n}
    elif name == "reparse":
        from archive.reparse import reparse
        from engines.leansearch import LeanSearchAdapter
        from store.db import open_database

        db = open_database(url)
        t0, cpu0 = time.perf_counter(), time.process_time()  # the parser fix: today's parser is one version newer
        LeanSearchAdapter.parser_version += 1
        s = reparse(db)
        r = s.results[0]
        out = {"exchanges": s.exchanges, "changed": r.changed, "elapsed": s.elapsed}
        db.dispose()
    elif name == "export":
        from archive.bundle import export_bundle
        from store.db import open_database

        db = open_database(url)
        out = {"bytes": export_bundle(db, Path(path)).bytes}
        db.dispose()
    elif name == "warcio":  # reading the bundle with warcio alone: every record, payload read
        from warcio.archiveiterator import ArchiveIterator

        n = size = 0
        with open(path, "rb") as fh:
            for record in ArchiveIterator(fh):
                size += len(record.content_stream().read())
                n += 1
        out = {"records": n, "payload_bytes": size}
    elif name == "floor_import":
        out = _import_floor(path)
    elif name == "import":
        from archive.bundle import import_bundle
        from store.db import open_database

        db = open_database(url)
        t0, cpu0 = time.perf_counter(), time.process_time()  # an empty, migrated database: migrations are not the import
        s = import_bundle(db, Path(path))
        out = {"added": s.added, "answers": s.answers, "archive_s": s.seconds_archive, "parse_s": s.seconds_parse}
        db.dispose()
    out["seconds"] = time.perf_counter() - t0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # a parsing worker process, once it has ended
    out["cpu_s"] = time.process_time() - cpu0 + kids.ru_utime + kids.ru_stime  # not the PostgreSQL server's
    out["peak_rss_mb"] = _peak_rss_mb()
    return out


def child(name: str, url: str, path: str = "-") -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, __file__, "--phase", name, "--url", url, "--path", path],
                         capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"phase {name} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_reparse(backend: str, n: int, pg: str) -> None:
    with scratch_url(backend, pg) as url:
        made = child("make", url, str(n))
        floor = child("floor", url)
        rep = child("reparse", url)
    rate = rep["exchanges"] / rep["elapsed"]
    print(f"reparse, {backend}: {rep['exchanges']:,} exchanges ({made['body_bytes'] / 1e6:.0f} MB of bodies), "
          f"{rep['changed']:,} answers rewritten")
    print(f"  read + json.loads (baseline) {floor['seconds']:7.1f} s  (CPU {floor['cpu_s']:.1f} s)")
    print(f"  reparse                      {rep['elapsed']:7.1f} s  {rate:7,.0f} exchanges/s  "
          f"= {rep['elapsed'] / floor['seconds']:.1f}x baseline;  rate / target {TARGET[backend]:,.0f}/s: "
          f"{rate / TARGET[backend]:.2f}x  (CPU {rep['cpu_s']:.1f} s)")
    if rep["changed"] != rep["exchanges"]:
        sys.exit(f"reparse rewrote {rep['changed']} answers of {rep['exchanges']}: expected every one")


def run_import(n: int) -> None:
    small_n = max(1, n // 10)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        sizes = {}
        for k in (small_n, n):
            src = f"sqlite:///{d / f'src{k}.db'}"
            made = child("make", src, str(k))
            sizes[k] = child("export", src, str(d / f"b{k}.warc.gz"))["bytes"]
        warc = child("warcio", "-", str(d / f"b{n}.warc.gz"))
        floor = child("floor_import", "-", str(d / f"b{n}.warc.gz"))
        imps = {}
        for k in (small_n, n):
            dst = f"sqlite:///{d / f'dst{k}.db'}"
            from store.db import open_database

            open_database(dst).dispose()  # migrated before the timed phase
            imps[k] = child("import", dst, str(d / f"b{k}.warc.gz"))
    imp = imps[n]
    print(f"import, sqlite: {imp['added']:,} exchanges ({made['body_bytes'] / 1e6:.0f} MB of bodies, "
          f"bundle {sizes[n] / 1e6:.0f} MB), {imp['answers']:,} answers parsed")
    print(f"  warcio read (baseline)       {warc['seconds']:7.1f} s  ({warc['records']:,} records; "
          f"CPU {warc['cpu_s']:.1f} s)")
    print(f"  floor: digests + json + sqlite3 writes {floor['seconds']:5.1f} s  = "
          f"{floor['seconds'] / warc['seconds']:.1f}x baseline  (read with digests "
          f"{floor['read_s'] / warc['seconds']:.1f}x, json.loads + hit rows {floor['json_s'] / warc['seconds']:.1f}x, "
          f"writes {floor['write_s'] / warc['seconds']:.1f}x, commit {floor['commit_s'] / warc['seconds']:.1f}x; "
          f"{floor['hits']:,} hit rows)")
    print(f"  import, parse included       {imp['seconds']:7.1f} s  = {imp['seconds'] / warc['seconds']:.1f}x baseline "
          f"(target 3x; CPU {imp['cpu_s']:.1f} s)")
    # The answers are parsed while the records are read (archive.bundle.parse.Feed): the first line
    # holds most of the parse; the second the last batch, any other unparsed exchange and the commit.
    print(f"    verify + insert + parse    {imp['archive_s']:7.1f} s  = {imp['archive_s'] / warc['seconds']:.1f}x baseline")
    print(f"    last batch + commit        {imp['parse_s']:7.1f} s  = {imp['parse_s'] / warc['seconds']:.1f}x baseline")
    print(f"  peak RSS {imp['peak_rss_mb']:.0f} MB; of {small_n:,} exchanges {imps[small_n]['peak_rss_mb']:.0f} MB "
          f"(memory ratio: {imp['peak_rss_mb'] / imps[small_n]['peak_rss_mb']:.2f}x)")
    if imp["added"] != n:
        sys.exit(f"import added {imp['added']} exchanges of {n}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="exchanges (default 100,000)")
    ap.add_argument("--small", action="store_true", help="10,000 exchanges: a quick check")
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both",
                    help="backends of the reparse phase (import runs on SQLite)")
    ap.add_argument("--only", choices=["reparse", "import"], help="run one of the two phases")
    ap.add_argument("--pg", default=os.environ.get("ENGINES_PERF_PG_URL", DEFAULT_PG))
    ap.add_argument("--phase")
    ap.add_argument("--url")
    ap.add_argument("--path")
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.url, args.path)))
        return
    n = 10_000 if args.small else args.n
    print(f"{n:,} LeanSearch-shaped exchanges ({HITS} hits a body), one process per phase")
    if args.only in (None, "reparse"):
        for backend in (["sqlite", "postgresql"] if args.backend == "both" else [args.backend]):
            run_reparse(backend, n, args.pg)
    if args.only in (None, "import"):
        run_import(n)


if __name__ == "__main__":
    main()
