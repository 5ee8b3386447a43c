"""Writing hits: store.writes.add_answers (bulk) and add_answer vs the previous add_answer.

Writes A answers × H hits (local-run shaped: resolved hits with a small raw dict) three
ways into fresh databases, each in transactions of 50 answers as local runs commit:

- old:  the add_answer of commit a79b3fb (ORM answer + Core executemany of hit dicts),
        copied below verbatim as the baseline;
- one:  today's add_answer, one answer at a time;
- bulk: add_answers, 50 answers per call.

Prints hits/s of each (by wall time and per CPU second of this process) and the ratios
against the old path, all measured in this run. Goal (issue 13): add_answers ≥ 100k hits/s on SQLite.

    python perf/write_hits.py [--answers 2000] [--hits 100] [--backend sqlite|postgresql|both]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _scratch import scratch_url  # noqa: E402
from store.db import open_database  # noqa: E402
from store.models import Answer, Hit  # noqa: E402
from store.names import normalize_name  # noqa: E402
from store.types import utcnow  # noqa: E402
from store.writes import AnswerRow, HitRow, add_answer, add_answers, ensure_config  # noqa: E402

COMMIT_EVERY = 50


def old_add_answer(session, *, config_id, query_text, query_sha256, hits, epoch=0, latency_ms=None, meta=None):
    """store.writes.add_answer as of a79b3fb (the baseline)."""
    hits = list(hits)
    answer = Answer(config_id=config_id, query_text=query_text, query_sha256=query_sha256, epoch=epoch,
                    fetched_at=utcnow(), n_returned=len(hits), latency_ms=latency_ms, meta=meta)
    session.add(answer)
    session.flush()
    if hits:
        session.execute(
            sa.insert(Hit),
            [
                {"answer_id": answer.id, "rank": h.rank, "name": h.name, "normalized_name": normalize_name(h.name),
                 "raw": h.raw, "resolved_corpus_id": h.resolved_corpus_id, "declaration_id": h.declaration_id,
                 "resolution": h.resolution}
                for h in hits
            ],
        )
    return answer


def make_rows(n_answers: int, n_hits: int, seed: int = 0) -> list[tuple[str, str, list[HitRow]]]:
    rng = random.Random(seed)
    names = [f"Mathlib.Topic{i % 97}.lemma_{i}" for i in range(20_000)]
    out = []
    for a in range(n_answers):
        picks = rng.sample(range(len(names)), n_hits)
        hits = [HitRow(rank=r + 1, name=names[j], raw={"score": 1.0 / (r + 1), "row": j}) for r, j in enumerate(picks)]
        out.append((f"query {a}", f"{a:064x}", hits))
    return out


def run(url: str, rows, way: str) -> tuple[float, float]:
    db = open_database(url)
    try:
        with db.session() as s, s.begin():
            cfg = ensure_config(s, engine="perf", endpoint_version="1", params={}, config_hash=f"perf-{way}")
            s.flush()
            config_id = cfg.id
        t0, c0 = time.perf_counter(), time.process_time()
        with db.session() as s:
            for start in range(0, len(rows), COMMIT_EVERY):
                chunk = rows[start:start + COMMIT_EVERY]
                if way == "bulk":
                    add_answers(s, [AnswerRow(config_id=config_id, query_text=t, query_sha256=h, hits=hits)
                                    for t, h, hits in chunk])
                else:
                    fn = old_add_answer if way == "old" else add_answer
                    for t, h, hits in chunk:
                        fn(s, config_id=config_id, query_text=t, query_sha256=h, hits=hits)
                s.commit()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        with db.session() as s:
            n = s.execute(sa.select(sa.func.count()).select_from(Hit)).scalar_one()
        assert n == sum(len(r[2]) for r in rows), (way, n)
        return elapsed, cpu
    finally:
        db.dispose()


def measure(backend: str, rows, pg_base: str | None) -> dict[str, float]:
    n_hits = sum(len(r[2]) for r in rows)
    rates, cpu_rates = {}, {}
    for way in ("old", "one", "bulk"):
        with scratch_url(backend, *([pg_base] if pg_base else [])) as url:
            wall, cpu = run(url, rows, way)
            rates[way], cpu_rates[way] = n_hits / wall, n_hits / cpu
    print(f"{backend}: {len(rows):,} answers × {len(rows[0][2])} hits = {n_hits:,} hits, commit every {COMMIT_EVERY}")
    print(f"  {'':<26} {'wall':>16}   {'':>9}   {'per CPU second':>16}")
    for way, label in (("old", "old add_answer (a79b3fb)"), ("one", "add_answer"), ("bulk", "add_answers")):
        print(f"  {label:<26} {rates[way]:>10,.0f} hits/s   {rates[way] / rates['old']:5.2f}x old   "
              f"{cpu_rates[way]:>10,.0f} hits/s")
    print("  (per CPU second: this process's CPU time, so other load on the machine does not count; on "
          "PostgreSQL the server's work is not in it)")
    return {"wall": rates, "cpu": cpu_rates}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=int, default=2000)
    ap.add_argument("--hits", type=int, default=100)
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--pg", default=None, help="PostgreSQL base URL (default: the local test server)")
    args = ap.parse_args(argv)
    rows = make_rows(args.answers, args.hits)
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    return {b: measure(b, rows, args.pg) for b in backends}


if __name__ == "__main__":
    main()
