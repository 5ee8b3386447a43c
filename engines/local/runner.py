"""Running a local engine over a benchmark: config identity, fetch-once, writing answers.

:func:`run_bm25` and :func:`run_dense` are what ``engines run bm25|dense`` (and the demo)
call. Each builds the configuration identity (engine, renderer hash, corpus sha256 and
the result-changing parameters), registers it with ``local=True``, skips queries that
configuration already answered in the epoch (returning before the corpus is read or an
index/model loaded when none is due), and writes the rest as answers + resolved
hits through ``store.writes``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

from engines.base import LocalConfig
from engines.local.common import (
    ENDPOINT_VERSION, K_MAX, corpus_identity, ensure_local_config, load_corpus_docs, pending_queries,
    write_answers,
)
from store.benchmarks import find_benchmark
from store.corpus import find_corpus
from store.db import Database

# progress(description, total) -> context manager yielding update(done); see cli.commands.common.
ProgressFactory = Callable[[str, "int | None"], ContextManager[Callable[[int], None]]]


@dataclass
class RunSummary:
    config_id: int
    label: str
    answered: int
    skipped: int  # already answered for this configuration and epoch
    total: int  # distinct query texts in the benchmark
    index_seconds: float = 0.0
    index_cached: bool = False
    search_seconds: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def nothing_due(self) -> bool:
        """Every query text was already answered: no corpus, index or model was loaded."""
        return not self.answered and not self.index_seconds


def _no_progress(_desc: str, _total: int | None = None):
    from contextlib import nullcontext

    return nullcontext(lambda _done: None)


def run_bm25(
    db: Database,
    *,
    bench: str,
    corpus: str | None = None,
    k1: float | None = None,
    b: float | None = None,
    method: str | None = None,
    fields: str = "rendered",
    epoch: int = 0,
    limit: int | None = None,
    progress: ProgressFactory = _no_progress,
) -> RunSummary:
    from engines.local.bm25 import DEFAULT_B, DEFAULT_K1, DEFAULT_METHOD, BM25Params, build_or_load
    from engines.local.common import parse_fields

    parse_fields(fields)
    params = BM25Params(k1=DEFAULT_K1 if k1 is None else k1, b=DEFAULT_B if b is None else b,
                        method=method or DEFAULT_METHOD, fields=fields)
    benchmark = find_benchmark(db, bench)
    corp = find_corpus(db, corpus)
    cfg = LocalConfig("bm25", ENDPOINT_VERSION, {**params.identity(), **corpus_identity(corp), "k_max": K_MAX})
    label = "bm25" if fields == "rendered" else f"bm25 ({fields})"
    row = ensure_local_config(db, cfg, label=label, licence=None)
    todo, total, done_before = pending_queries(db, benchmark.id, row.id, epoch, limit)
    summary = RunSummary(row.id, label, 0, done_before, total, params=cfg.params)
    if not todo:
        return summary  # nothing due: neither read the corpus nor build/load the index
    with progress(f"reading corpus {corp.name}", corp.row_count) as update:
        docs = load_corpus_docs(db, corp, update)
    with progress("indexing bm25 (tokenising rows)", len(docs)) as update:
        index = build_or_load(docs, params, progress=update)
    summary.index_seconds, summary.index_cached = index.seconds, not index.built
    t0 = time.perf_counter()
    with progress("bm25 queries", len(todo)) as update:
        def results():
            for i, r in enumerate(index.run(todo), 1):
                update(i)
                yield r
        summary.answered = write_answers(db, row.id, docs, results(), epoch=epoch)
    summary.search_seconds = time.perf_counter() - t0
    return summary


def run_dense(
    db: Database,
    *,
    model: str,
    bench: str,
    corpus: str | None = None,
    query_format: str = "lsv2",
    task: str | None = None,
    revision: str | None = None,
    licence: str | None = None,
    dtype: str = "float32",
    chunk_rows: int | None = None,
    batch_size: int = 64,
    epoch: int = 0,
    limit: int | None = None,
    device: str | None = None,
    progress: ProgressFactory = _no_progress,
) -> RunSummary:
    from engines.local import dense

    task = task or dense.LSV2_INSTRUCTION
    dense.format_query("", query_format, task)  # validate before any heavy work or any row
    dense.check_dtype(dtype)
    spec = dense.resolve_model(model, revision, licence)
    benchmark = find_benchmark(db, bench)
    corp = find_corpus(db, corpus)
    params = {
        "model": spec.name, "model_id": spec.model_id, "model_revision": spec.revision, "dtype": dtype,
        "query_format": query_format,
        # The instruction text only matters when the format uses it.
        "task": task if query_format != "none" else None,
        "similarity": "cosine-exact", "k_max": K_MAX,
        **dense.renderer_identity("rendered"), **corpus_identity(corp),
    }
    cfg = LocalConfig(f"dense:{spec.name}", ENDPOINT_VERSION, params)
    label = f"dense:{spec.name} ({'plain queries' if query_format == 'none' else query_format})"
    row = ensure_local_config(db, cfg, label=label, licence=spec.licence)
    todo, total, done_before = pending_queries(db, benchmark.id, row.id, epoch, limit)
    summary = RunSummary(row.id, label, 0, done_before, total, params=params)
    if not todo:
        return summary  # nothing due: neither read the corpus, load the model nor encode
    with progress(f"reading corpus {corp.name}", corp.row_count) as update:
        docs = load_corpus_docs(db, corp, update)
    device = device or dense.pick_device()
    st_model = dense.load_model(spec, device)
    with progress(f"encoding corpus with {spec.name}", len(docs)) as update:
        vecs = dense.encode_corpus(
            st_model, spec, docs, dtype=dtype, chunk_rows=chunk_rows or dense.DEFAULT_CHUNK_ROWS,
            batch_size=batch_size, progress=update,
        )
    summary.index_seconds, summary.index_cached = vecs.seconds, vecs.encoded_chunks == 0
    t0 = time.perf_counter()
    with progress(f"dense queries ({spec.name})", len(todo)) as update:
        def results():
            for i, r in enumerate(dense.run_queries(st_model, vecs.vectors, todo, query_format=query_format,
                                                     task=task, device=device), 1):
                update(i)
                yield r
        summary.answered = write_answers(db, row.id, docs, results(), epoch=epoch)
    summary.search_seconds = time.perf_counter() - t0
    return summary
