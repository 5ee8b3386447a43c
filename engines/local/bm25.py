"""The local BM25 engine: bm25s over Lean-aware tokens of the rendered corpus.

The index (bm25s's eager sparse score matrix plus its vocabulary) is cached on disk
under ``<cache>/bm25/<key>/``, the key covering the corpus sha256, the renderer hash,
the field set, the tokenizer version and k1/b/method; a cached index is loaded
memory-mapped. Queries return at most ``K_MAX`` rows with a positive score (a row that
shares no token with the query is not a result), best first, ties by corpus order.

Variant note: bm25s's default ``lucene`` method scores idf = ln(1 + (N - df + 0.5) /
(df + 0.5)) times tf / (tf + k1 (1 - b + b dl/avgdl)); rank_bm25's ``BM25Okapi`` uses
idf = ln((N - df + 0.5) / (df + 0.5)) (floored at eps * mean idf) and multiplies the tf
part by (k1 + 1). For terms in fewer than half the documents, ``method="robertson"``
equals BM25Okapi / (k1 + 1) exactly; the tests check both relations.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from engines.local.common import (
    K_MAX, CorpusDocs, PendingQuery, Ranked, cache_key, cache_root, corpus_identity, publish_dir,
    renderer_identity, top_k_sorted, write_json_atomic,
)
from engines.local.tokenize import TOKENIZER_VERSION, tokenize

DEFAULT_K1 = 1.5
DEFAULT_B = 0.75
DEFAULT_METHOD = "lucene"


@dataclass(frozen=True)
class BM25Params:
    k1: float = DEFAULT_K1
    b: float = DEFAULT_B
    method: str = DEFAULT_METHOD
    fields: str = "rendered"

    def identity(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "method": self.method, "tokenizer": TOKENIZER_VERSION,
                **renderer_identity(self.fields)}


def index_key(docs: CorpusDocs, params: BM25Params) -> str:
    return cache_key("bm25", corpus_sha256=docs.sha256, corpus_rows=len(docs), **params.identity())


@dataclass
class BM25Index:
    retriever: Any  # bm25s.BM25
    vocab: dict[str, int]
    path: Path
    key: str
    built: bool  # False when loaded from the cache
    seconds: float
    meta: dict[str, Any] = field(default_factory=dict)

    def search_tokens(self, tokens: list[str], k: int = K_MAX) -> tuple[np.ndarray, np.ndarray]:
        ids = [self.vocab[t] for t in tokens if t in self.vocab]
        if not ids:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        scores = self.retriever.get_scores_from_ids(ids)
        return top_k_sorted(scores, k, positive_only=True)

    def search(self, text: str, k: int = K_MAX) -> tuple[np.ndarray, np.ndarray]:
        return self.search_tokens(tokenize(text), k)

    def run(self, queries: list[PendingQuery], k: int = K_MAX) -> Iterator[Ranked]:
        """Answer queries one at a time; latency covers tokenising, scoring and top-k."""
        for q in queries:
            t0 = time.perf_counter()
            idx, sc = self.search(q.text, k)
            yield Ranked(q, idx.tolist(), sc.tolist(), (time.perf_counter() - t0) * 1000.0)


def tokenize_corpus(texts: list[str], progress: Callable[[int], None] | None = None) -> tuple[list[list[int]], dict[str, int]]:
    vocab: dict[str, int] = {}
    ids: list[list[int]] = []
    for i, text in enumerate(texts):
        ids.append([vocab.setdefault(t, len(vocab)) for t in tokenize(text)])
        if progress and (i + 1) % 10_000 == 0:
            progress(i + 1)
    if progress:
        progress(len(texts))
    return ids, vocab


def build_or_load(
    docs: CorpusDocs,
    params: BM25Params = BM25Params(),
    *,
    root: Path | None = None,
    progress: Callable[[int], None] | None = None,
    mmap: bool = True,
) -> BM25Index:
    """The cached index for (corpus, renderer, params), built on first use."""
    import bm25s

    root = (root or cache_root()) / "bm25"
    key = index_key(docs, params)
    final = root / key[:24]
    t0 = time.perf_counter()
    meta_path = final / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("key") == key:
            retriever = bm25s.BM25.load(str(final), mmap=mmap, load_corpus=False)
            return BM25Index(retriever, retriever.vocab_dict, final, key, False, time.perf_counter() - t0, meta)
        shutil.rmtree(final)  # a truncated-key collision: rebuild rather than trust it

    texts = docs.texts(params.fields)
    corpus_ids, vocab = tokenize_corpus(texts, progress)
    retriever = bm25s.BM25(k1=params.k1, b=params.b, method=params.method)
    # bm25s adds an empty token "" to the vocabulary when it is missing; keep our ids stable.
    retriever.index((corpus_ids, vocab), show_progress=False)
    tmp = root / f".tmp-{key[:24]}-{time.time_ns()}"
    tmp.mkdir(parents=True, exist_ok=True)
    retriever.save(str(tmp), show_progress=False)
    meta = {
        "key": key,
        **corpus_identity(docs),
        **params.identity(),
        "vocab_size": len(retriever.vocab_dict),
        "nnz": int(len(retriever.scores["data"])),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json_atomic(tmp / "meta.json", meta)
    publish_dir(tmp, final)
    if mmap:
        retriever = bm25s.BM25.load(str(final), mmap=True, load_corpus=False)
    return BM25Index(retriever, retriever.vocab_dict, final, key, True, time.perf_counter() - t0, meta)
