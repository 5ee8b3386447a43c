"""Round trip (issue 23): ``engines score --trec DIR`` on one database, then ``engines run
import`` of every written run into a fresh database (SQLite and PostgreSQL) with the same
benchmark and corpus: every system gets the same metric values and intervals, on
MathlibQR and MathlibMPR."""

from __future__ import annotations

import random

from scoring.export import export_trec
from scoring.results import score
from archive.runs import import_run
from tests.support.scoring import answer_all, bench_queries, filler, make_config
from tests.support.runs import _database, _small_inputs

RESAMPLES = 100  # enough to compare intervals; the scorer's seed is fixed


def _systems(db, bench: str) -> None:
    """Three rows that exercise what the export encodes: repeats, Unicode names, names not
    in the corpus, several names of a premise group, a capped service, unanswered queries."""
    qs = bench_queries(db, bench)
    rng = random.Random(23)

    def ranking(q, n_max):
        if rng.random() < 0.08:
            return None
        names = filler(rng.randint(0, n_max), f"{q.id}.") + [f"Not.In.Corpus.λ{q.id}"]
        rng.shuffle(names)
        for u in q.gold_units:
            if rng.random() < 0.7:
                for nm in rng.sample(u.names, min(len(u.names), rng.randint(1, 2))):
                    names.insert(rng.randrange(len(names) + 1), nm.name)
        if rng.random() < 0.3:
            names.insert(1, names[0])  # a repeat: counts at its first occurrence
        return names[:n_max]

    answer_all(db, make_config(db, "alpha"), qs, lambda q: ranking(q, 230))
    answer_all(db, make_config(db, "beta"), qs, lambda q: ranking(q, 40))
    capped = make_config(db, "gamma-capped", result_cap=20)
    # A capped service: every list ends at the cap (the imported row's cap is its longest list).
    def capped_ranking(q):
        names = ranking(q, 60)
        return None if names is None else (names + filler(20, f"pad{q.id}."))[:20]

    answer_all(db, capped, qs, capped_ranking)


def _figures(result):
    out = {}
    for s in result.systems:
        out[s.ref.label] = (
            {k: (v.get("value"), tuple(v.get("ci") or ())) for k, v in s.metrics.items()},
            {k: v for k, v in (s.curves or {}).items()},
            s.n, s.dropped,
        )
    return out


def test_score_trec_then_import_gives_the_same_figures(any_db_url, tmp_path):
    inputs = _small_inputs(tmp_path)
    cache = _database(f"sqlite:///{tmp_path / 'source.db'}", inputs)
    fresh = _database(any_db_url, inputs)
    try:
        for bench in ("mathlibqr", "mathlibmpr"):
            _systems(cache, bench)
            before = score(cache, bench, resamples=RESAMPLES)
            out = tmp_path / f"trec-{bench}"
            paths = export_trec(cache, before, out)
            runs = [p for p in paths if p.name.startswith("run.")]
            assert len(runs) == 3
            for p in runs:
                label = p.name[len("run."):-len(".txt")]
                res = import_run(fresh, p, bench=bench, name=label, source=f"round trip of {p.name}")
                assert res.created and res.parsed.docnos is not None  # read through docnos.tsv
            after = score(fresh, bench, resamples=RESAMPLES)
            a, b = _figures(before), _figures(after)
            assert sorted(a) == sorted(b) == ["alpha", "beta", "gamma-capped"]
            for label in a:
                assert b[label][0] == a[label][0], (bench, label)  # every metric value and interval
                assert b[label][1] == a[label][1], (bench, label)  # every curve point and band
                assert b[label][2:] == a[label][2:]
            gamma = next(s for s in after.systems if s.ref.label == "gamma-capped")
            assert "k≤20" in gamma.badges and "imported" in gamma.badges
    finally:
        fresh.dispose()
        cache.dispose()
