"""Scoring: resolution, gold positions, metrics, curves, bootstrap CIs (METHODOLOGY.md).

One scorer for every row (remote engines and local baselines alike); it reads only the
database. Modules:

- ``scoring.resolve``: hit names → corpus rows (stored on ``hits``), gold-name lookup.
- ``scoring.positions``: per (system, query, gold unit) the earliest rank, stored in
  ``positions`` — the only metric input.
- ``scoring.metrics``: pure per-query metric functions and the vectorised curve driver.
- ``scoring.aggregate``: metric registry, macro means, caps, curves, breakdowns.
- ``scoring.bootstrap``: seeded percentile bootstrap and paired differences.
- ``scoring.mamut``: the ``mamut`` and ``mamut-sklearn`` profiles.
- ``scoring.results``: ``score()`` and the ``engines.score/1`` JSON.
- ``scoring.scope``: which queries and gold units a run scores (``--style``, ``--subset``,
  ``--shared-with``, ``--slice``), resolved against the corpus.
- ``scoring.systems``: which systems a run scores, and ``match_systems`` (how a system is named).
- ``scoring.profiles``: a system's positions → its metrics, one ``Profile`` per profile name.
- ``scoring.compare``: paired bootstrap comparisons (``--compare``).
- ``scoring.export``: TREC qrels, run files and the DOCNO mapping (reversible DOCNOs).
- ``scoring.matching``: units sharing a returned row — maximum matching for P@k, DCG, AP.
- ``scoring.reference_rows``: published reference rows (``benchmarks/published.json``).
- ``scoring.plot``: figures for papers (matplotlib, the ``plots`` extra).

Public API:

- ``scoring.results.score(db, bench_name, corpus=None, subset=None, systems=None, by=None,
  compare=None, profile="main", *, shared_with=None, snapshots=None, styles=None,
  slice=None) -> ScoreResult``
- ``scoring.reference_rows.attach(doc)``; ``scoring.plot.plot_curves(doc, metric, out)``
- ``ScoreResult.to_json() -> dict`` (schema ``engines.score/1``), ``ScoreResult.system(id)``
- ``scoring.results.write_json(result, path)``
- ``scoring.export.export_trec(db, result, out_dir) -> list[Path]``
- ``scoring.results.PROFILES`` = ("main", "mamut", "mamut-sklearn"), ``SLICE_BANNER``
"""
