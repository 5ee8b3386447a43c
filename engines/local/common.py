"""Shared plumbing of the local engines: corpus documents, cache keys and directories,
benchmark queries still to answer, and writing ranked lists through ``store.writes``.

Local rows are written exactly like crawled ones (``exchange_id`` NULL), one answer per
distinct query text, with hits already resolved to the corpus rows they came from.
Caches live under ``ENGINES_CACHE_DIR`` (default ``.engines/`` in the working
directory); each cache entry is a directory named by a sha256 key over everything that
determines its content (corpus sha256, renderer hash, parameters), written under a
temporary name and renamed into place when complete.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import sqlalchemy as sa

from engines.base import LocalConfig, config_hash
from engines.local.render import RENDERER_NAME, render_lsv2, renderer_hash
from store.db import Database
from store.errors import InputError
from store.models import Answer, Corpus, Declaration, EngineConfig, Query
from store.writes import AnswerRow, HitRow, add_answers, ensure_config

K_MAX = 200  # pinned (METHODOLOGY.md): every local list is cut at 200
ENDPOINT_VERSION = "local-v1"
# Columns a BM25 field set may name (besides "rendered", the lsv2-compat text).
TEXT_FIELDS = (
    "name", "signature", "docstring", "type", "value", "informal_name",
    "informal_description", "module_name", "kind",
)


def cache_root() -> Path:
    """Where indexes and vectors are cached (git-ignored ``.engines/`` by default)."""
    return Path(os.environ.get("ENGINES_CACHE_DIR") or ".engines").expanduser()


def cache_key(kind: str, **parts: Any) -> str:
    """sha256 over the canonical JSON of everything that determines a cache entry
    (the same hashing as a configuration identity, so one definition of "canonical")."""
    return config_hash({"kind": kind, **parts})


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def publish_dir(tmp: Path, final: Path) -> None:
    """Move a finished cache directory into place (another process may have won the race)."""
    try:
        os.replace(tmp, final)
    except OSError:
        if (final / "meta.json").exists():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            raise


# ------------------------------------------------------------------------- corpus


@dataclass
class CorpusDocs:
    """One corpus's rows in file order (position i = row i), ready to index."""

    corpus_id: int
    name: str
    revision: str
    sha256: str
    declaration_ids: np.ndarray  # int64, aligned with rows
    full_names: list[str]
    rows: list[dict[str, Any]]  # the text columns, for rendering / field sets

    def __len__(self) -> int:
        return len(self.full_names)

    @property
    def row_count(self) -> int:  # same attribute as a ``Corpus`` row, for :func:`corpus_identity`
        return len(self.full_names)

    def texts(self, fields: str = "rendered") -> list[str]:
        """The indexed text of every row: the lsv2-compat rendering, or chosen columns joined."""
        if fields == "rendered":
            return [render_lsv2(r) for r in self.rows]
        cols = parse_fields(fields)
        out = []
        for r in self.rows:
            vals = []
            for c in cols:
                v = r.get(c)
                if c == "name":
                    v = ".".join(v) if isinstance(v, list) else v
                if v:
                    vals.append(str(v))
            out.append("\n".join(vals))
        return out


def parse_fields(fields: str) -> list[str]:
    if fields == "rendered":
        return ["rendered"]
    cols = [c.strip() for c in fields.split(",") if c.strip()]
    bad = [c for c in cols if c not in TEXT_FIELDS]
    if not cols or bad:
        raise InputError(
            f"--fields {fields!r}: unknown field(s) {', '.join(bad) or '(none given)'}; "
            f"use 'rendered' or a comma list of {', '.join(TEXT_FIELDS)}"
        )
    return cols


def load_corpus_docs(db: Database, corpus: Corpus, progress: Callable[[int], None] | None = None) -> CorpusDocs:
    """Read every declaration of ``corpus`` ordered by row (streamed in one query)."""
    t = Declaration.__table__.c
    cols = [t.id, t.row, t.full_name, t.name, t.module_name, t.kind, t.type, t.signature, t.value,
            t.informal_name, t.informal_description, t.docstring]
    ids: list[int] = []
    names: list[str] = []
    rows: list[dict[str, Any]] = []
    with db.engine.connect() as conn:
        result = conn.execution_options(yield_per=20_000).execute(
            sa.select(*cols).where(t.corpus_id == corpus.id).order_by(t.row)
        )
        for rec in result:
            m = rec._mapping
            if m["row"] != len(rows):
                raise InputError(f"corpus {corpus.name}: declaration rows are not contiguous at row {len(rows)}; reload it")
            ids.append(m["id"])
            names.append(m["full_name"])
            rows.append({k: m[k] for k in ("name", "module_name", "kind", "type", "signature", "value",
                                           "informal_name", "informal_description", "docstring")})
            if progress and len(rows) % 20_000 == 0:
                progress(len(rows))
    if not rows:
        raise InputError(f"corpus {corpus.name}@{corpus.revision} has no declarations")
    if len(rows) != corpus.row_count:
        # The configuration identity uses corpus.row_count (read before the rows): they must agree.
        raise InputError(
            f"corpus {corpus.name}@{corpus.revision}: {len(rows)} declarations but row_count {corpus.row_count}; reload it"
        )
    return CorpusDocs(corpus.id, corpus.name, corpus.revision, corpus.sha256,
                      np.asarray(ids, dtype=np.int64), names, rows)


def corpus_identity(corpus: Corpus | CorpusDocs) -> dict[str, Any]:
    """The corpus part of a configuration identity: from the ``Corpus`` row alone (no need to
    read its declarations) or from loaded documents, with the same result."""
    return {"corpus": f"{corpus.name}@{corpus.revision}", "corpus_sha256": corpus.sha256,
            "corpus_rows": corpus.row_count}


def renderer_identity(fields: str = "rendered") -> dict[str, Any]:
    return {"renderer": RENDERER_NAME, "renderer_hash": renderer_hash(), "fields": fields}


# ------------------------------------------------------------------ queries, answers


@dataclass(frozen=True)
class PendingQuery:
    text: str
    query_sha256: str


def pending_queries(
    db: Database, benchmark_id: int, config_id: int, epoch: int, limit: int | None = None
) -> tuple[list[PendingQuery], int, int]:
    """Distinct query texts of a benchmark (the first ``limit`` of them) not yet answered by
    this config, the number of distinct texts, and how many wanted ones were already answered."""
    with db.session() as s:
        rows = s.execute(
            sa.select(Query.text, Query.query_sha256).where(Query.benchmark_id == benchmark_id).order_by(Query.id)
        ).all()
        done = set(
            s.execute(
                sa.select(Answer.query_sha256).where(Answer.config_id == config_id, Answer.epoch == epoch)
            ).scalars()
        )
    seen: dict[str, PendingQuery] = {}
    for text, sha in rows:
        seen.setdefault(sha, PendingQuery(text, sha))
    wanted = list(seen.values())
    if limit is not None:
        wanted = wanted[:limit]  # the benchmark's first N texts (the crawler's --limit takes N due texts in lease order)
    todo = [q for q in wanted if q.query_sha256 not in done]
    return todo, len(seen), len(wanted) - len(todo)


def ensure_local_config(
    db: Database, cfg: LocalConfig, *, label: str, licence: str | None
) -> EngineConfig:
    with db.session() as s, s.begin():
        row = ensure_config(
            s,
            engine=cfg.engine,
            endpoint_version=cfg.endpoint_version,
            params=cfg.params,
            config_hash=config_hash(cfg.identity()),
            label=label,
            local=True,
            result_cap=None,
            licence=licence,
        )
        s.flush()
        s.expunge(row)
    return row


@dataclass
class Ranked:
    """One query's result: corpus positions best first, their scores, and the time taken."""

    query: PendingQuery
    indices: Sequence[int]
    scores: Sequence[float]
    latency_ms: float
    meta: dict[str, Any] | None = None


def write_answers(
    db: Database, config_id: int, docs: CorpusDocs, results: Iterable[Ranked], *, epoch: int = 0
) -> int:
    """Write ranked lists as answers + resolved hits, committing each batch of queries."""
    n = 0
    pending: list[AnswerRow] = []
    with db.session() as s:
        for r in results:
            # Each hit is the corpus row itself: resolved by construction, no name lookup.
            hits = [
                HitRow(
                    rank=i + 1, name=docs.full_names[j], raw={"score": float(sc), "row": int(j)},
                    resolved_corpus_id=docs.corpus_id, declaration_id=int(docs.declaration_ids[j]),
                    resolution="resolved",
                )
                for i, (j, sc) in enumerate(zip(r.indices, r.scores))
            ]
            pending.append(AnswerRow(
                config_id=config_id, query_text=r.query.text, query_sha256=r.query.query_sha256,
                hits=hits, epoch=epoch, latency_ms=r.latency_ms, meta=r.meta,
            ))
            n += 1
            if n % 50 == 0:
                add_answers(s, pending)  # one bulk write per committed batch of 50 queries
                pending = []
                s.commit()
        if pending:
            add_answers(s, pending)
        s.commit()
    return n


def top_k_sorted(scores: np.ndarray, k: int, *, positive_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` of a score vector, ties broken by lower index (deterministic)."""
    if positive_only:
        cand = np.flatnonzero(scores > 0)
        if len(cand) > k:
            part = np.argpartition(-scores[cand], k - 1)[:k]
            kth = scores[cand[part]].min()
            cand = cand[scores[cand] >= kth]  # keep every tie of the k-th score, trimmed below
    else:
        n = len(scores)
        if n > k:
            part = np.argpartition(-scores, k - 1)[:k]
            kth = scores[part].min()
            cand = np.flatnonzero(scores >= kth)
        else:
            cand = np.arange(n)
    order = np.lexsort((cand, -scores[cand]))[:k]
    idx = cand[order]
    return idx, scores[idx]


def now_ms() -> float:
    return time.perf_counter() * 1000.0
