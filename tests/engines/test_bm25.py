"""Local BM25: Lean-aware tokens, agreement with rank_bm25, self-retrieval on the real slice,
the on-disk cache and its keys, and ``engines run bm25`` writing resolved answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from benchmarks import SLICE_CORPUS
from engines.local import common
from engines.local.bm25 import BM25Params, build_or_load, index_key
from engines.local.common import CorpusDocs, top_k_sorted
from engines.local.tokenize import tokenize


def _slice_rows(n: int | None = None) -> list[dict]:
    rows = []
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if n is not None and len(rows) >= n:
                break
    return rows


def _docs(rows: list[dict], sha: str = "c" * 64) -> CorpusDocs:
    names = [".".join(r["name"]) for r in rows]
    return CorpusDocs(1, "t", "local", sha, np.arange(len(rows), dtype=np.int64) + 1000, names, rows)


@pytest.fixture(scope="module")
def slice_index(tmp_path_factory: pytest.TempPathFactory):
    docs = _docs(_slice_rows())
    return docs, build_or_load(docs, root=tmp_path_factory.mktemp("cache"))


# ------------------------------------------------------------------------- tokenizer


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Nat.add_comm", ["add_comm", "nat.add_comm", "nat", "add", "comm"]),
        ("GaloisConnection.l_iSup",
         ["galoisconnection", "l_isup", "galoisconnection.l_isup", "galois", "connection", "l", "i", "sup"]),
        ("HasDerivAt", ["hasderivat", "has", "deriv"]),  # "at" is a stopword atom
        ("a poset with `⊔` and `⊓`", ["poset", "⊔", "⊓"]),
        ("x • y ∈ ℝ≥0", ["x", "•", "y", "∈", "ℝ", "≥", "0"]),
        ("ℓ(s i * w) ≠ ℓ w", ["ℓ", "s", "i", "w", "≠", "ℓ", "w"]),
        ("the $\\sqcup$ of two elements.", ["sqcup", "two", "elements"]),
        ("Fin2.IsLT", ["fin2", "islt", "fin2.islt", "fin", "2", "lt"]),
    ],
)
def test_lean_tokenizer(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


def test_tokenizer_keeps_whole_name_only_once_for_simple_words() -> None:
    assert tokenize("lattice Lattice") == ["lattice", "lattice"]
    assert tokenize("iSup") == ["isup", "i", "sup"]


# ------------------------------------------------------------------ rank_bm25 oracle


def _small_corpus() -> tuple[CorpusDocs, list[list[str]]]:
    rows = _slice_rows(400)[::5]  # 80 real declarations from several files
    docs = _docs(rows)
    return docs, [tokenize(t) for t in docs.texts()]


def _queries(tokens: list[list[str]], n_docs: int) -> list[list[str]]:
    df: dict[str, int] = {}
    for toks in tokens:
        for t in set(toks):
            df[t] = df.get(t, 0) + 1
    rare = sorted(t for t, c in df.items() if 1 <= c < n_docs / 2)
    rng = np.random.default_rng(7)
    return [list(rng.choice(rare, size=int(rng.integers(1, 5)))) for _ in range(25)]


def test_robertson_equals_rank_bm25_okapi(tmp_path: Path) -> None:
    from rank_bm25 import BM25Okapi

    docs, tokens = _small_corpus()
    k1, b = 1.2, 0.75
    index = build_or_load(docs, BM25Params(k1=k1, b=b, method="robertson"), root=tmp_path)
    oracle = BM25Okapi(tokens, k1=k1, b=b)
    for q in _queries(tokens, len(docs)):
        ids = [index.vocab[t] for t in q]
        ours = np.asarray(index.retriever.get_scores_from_ids(ids), dtype=np.float64)
        ref = oracle.get_scores(q) / (k1 + 1)  # BM25Okapi multiplies the tf part by (k1 + 1)
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)
        got_idx, got_sc = index.search_tokens(q, k=10)
        ref_idx, _ = top_k_sorted(ref.astype(np.float32), 10, positive_only=True)
        assert got_idx.tolist() == ref_idx.tolist()


def test_lucene_equals_okapi_with_lucene_idf(tmp_path: Path) -> None:
    from rank_bm25 import BM25Okapi

    class LuceneOkapi(BM25Okapi):
        def _calc_idf(self, nd):  # noqa: ANN001
            for word, freq in nd.items():
                self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))

    docs, tokens = _small_corpus()
    k1, b = 1.5, 0.75
    index = build_or_load(docs, BM25Params(k1=k1, b=b), root=tmp_path)
    oracle = LuceneOkapi(tokens, k1=k1, b=b)
    # Lucene idf is never negative, so frequent tokens (the rendered header) count too.
    queries = _queries(tokens, len(docs)) + [["represent", "theorem", "sorry"], ["definition", "lean"]]
    for q in queries:
        ref = oracle.get_scores(q) / (k1 + 1)
        idx, sc = index.search_tokens(q, k=len(docs))
        np.testing.assert_allclose(sc, ref[idx], rtol=1e-5, atol=1e-6)
        assert np.all(np.diff(sc) <= 0)
        assert set(idx.tolist()) == set(np.flatnonzero(ref > 0).tolist())


# ------------------------------------------------------------- real slice, own name


def test_declaration_ranks_first_for_its_own_name(slice_index) -> None:
    docs, index = slice_index
    rng = np.random.default_rng(3)
    dotted = [i for i, n in enumerate(docs.full_names) if "." in n]
    sample = rng.choice(dotted, size=60, replace=False)
    for i in sample:
        idx, sc = index.search(docs.full_names[i], k=5)
        assert idx[0] == i, (docs.full_names[i], [docs.full_names[j] for j in idx])
        assert sc[0] > sc[1]


def test_results_are_capped_positive_and_sorted(slice_index) -> None:
    docs, index = slice_index
    idx, sc = index.search("lattice sup inf", k=200)
    assert len(idx) == 200 and np.all(sc > 0) and np.all(np.diff(sc) <= 0)
    # ties are broken by corpus order
    for a, b_, s1, s2 in zip(idx, idx[1:], sc, sc[1:]):
        assert s1 > s2 or a < b_
    assert index.search("zzzqqq unknownword", k=200)[0].size == 0


# ------------------------------------------------------------------------ the cache


def test_cache_reload_is_memory_mapped_and_identical(tmp_path: Path) -> None:
    docs = _docs(_slice_rows(500))
    first = build_or_load(docs, root=tmp_path)
    again = build_or_load(docs, root=tmp_path)
    assert first.built and not again.built and first.path == again.path
    assert isinstance(again.retriever.scores["data"], np.memmap)
    meta = json.loads((again.path / "meta.json").read_text())
    assert meta["renderer_hash"] == common.renderer_hash() and meta["corpus_sha256"] == docs.sha256
    for q in ["Nat.cast", "order dual", "⊔ sup"]:
        a, sa_ = first.search(q)
        b, sb = again.search(q)
        assert a.tolist() == b.tolist() and np.allclose(sa_, sb)


def test_cache_key_changes_with_corpus_renderer_and_params(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _slice_rows(50)
    base = index_key(_docs(rows), BM25Params())
    assert index_key(_docs(rows), BM25Params()) == base
    assert index_key(_docs(rows, sha="d" * 64), BM25Params()) != base
    assert index_key(_docs(rows[:-1]), BM25Params()) != base
    for p in (BM25Params(k1=1.2), BM25Params(b=0.5), BM25Params(method="atire"), BM25Params(fields="name,docstring")):
        assert index_key(_docs(rows), p) != base
    monkeypatch.setattr(common, "renderer_hash", lambda: "0" * 64)
    assert index_key(_docs(rows), BM25Params()) != base


def test_renderer_change_rebuilds_instead_of_reusing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = _docs(_slice_rows(100))
    a = build_or_load(docs, root=tmp_path)
    monkeypatch.setattr(common, "renderer_hash", lambda: "f" * 64)
    b = build_or_load(docs, root=tmp_path)
    assert b.built and b.path != a.path
    assert json.loads((b.path / "meta.json").read_text())["renderer_hash"] == "f" * 64


def test_field_set_indexes_chosen_columns(tmp_path: Path) -> None:
    rows = _slice_rows(400)
    with_doc = next(i for i, r in enumerate(rows) if r.get("docstring") and len(r["docstring"]) > 40)
    docs = _docs(rows)
    fielded = build_or_load(docs, BM25Params(fields="name,signature,docstring"), root=tmp_path)
    rendered = build_or_load(docs, root=tmp_path)
    # docstring words that no rendered document contains (rendered slice rows hold only kind + name)
    words = [w for w in tokenize(rows[with_doc]["docstring"]) if w not in rendered.vocab][:4]
    assert len(words) >= 2
    assert with_doc in fielded.search(" ".join(words), k=10)[0].tolist()
    assert rendered.search(" ".join(words), k=200)[0].size == 0


# --------------------------------------------------------------------- engines run bm25


def _load(url: str, write_jsonl) -> None:  # noqa: ANN001
    from store.benchmarks import load_shipped
    from store.corpus import load_corpus
    from store.db import open_database

    rows = _slice_rows(300)
    path = write_jsonl(rows, "corpus.jsonl")
    db = open_database(url)
    load_shipped(db)
    load_corpus(db, str(path), name="mini")
    db.dispose()


def test_run_bm25_writes_resolved_answers_and_skips_done(any_db_url: str, write_jsonl, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.main import app
    from store.db import open_database
    from store.models import Answer, Declaration, EngineConfig, Hit

    monkeypatch.setenv("ENGINES_CACHE_DIR", str(tmp_path / "cache"))
    _load(any_db_url, write_jsonl)
    runner = CliRunner()
    res = runner.invoke(app, ["--db", any_db_url, "run", "bm25", "--bench", "mathlibqr", "--corpus", "mini",
                              "--limit", "12"])
    assert res.exit_code == 0, res.output
    assert "answered 12 queries" in res.output
    db = open_database(any_db_url)
    with db.session() as s:
        cfg = s.execute(sa.select(EngineConfig)).scalar_one()
        assert cfg.engine == "bm25" and cfg.local and cfg.result_cap is None
        assert cfg.params["renderer"] == "lsv2-compat" and cfg.params["renderer_hash"] == common.renderer_hash()
        assert cfg.params["k1"] == 1.5 and cfg.params["b"] == 0.75 and len(cfg.params["corpus_sha256"]) == 64
        answers = s.execute(sa.select(Answer)).scalars().all()
        assert len(answers) == 12
        assert all(a.exchange_id is None and a.latency_ms is not None and a.latency_ms >= 0 for a in answers)
        hits = s.execute(sa.select(Hit, Declaration).join(Declaration, Hit.declaration_id == Declaration.id)).all()
        n_hits = s.scalar(sa.select(sa.func.count()).select_from(Hit))
        assert n_hits == len(hits) > 0
        for h, d in hits:
            assert h.resolution == "resolved" and h.resolved_corpus_id == d.corpus_id
            assert h.name == d.full_name == h.normalized_name
            assert h.raw["row"] == d.row
        for a in answers:
            ranks = [h.rank for h in a.hits]
            assert ranks == list(range(1, len(ranks) + 1)) and len(ranks) <= 200 and a.n_returned == len(ranks)
    db.dispose()
    again = runner.invoke(app, ["--db", any_db_url, "run", "bm25", "--bench", "mathlibqr", "--corpus", "mini",
                                "--limit", "15"])
    assert again.exit_code == 0, again.output
    assert "answered 3 queries" in again.output and "12 already answered" in again.output

    # Nothing due: the re-run must return before reading the corpus or building/loading the index.
    from engines.local import bm25, runner as local_runner

    def must_not_run(*_a, **_k):
        raise AssertionError("called although no query was due")

    monkeypatch.setattr(local_runner, "load_corpus_docs", must_not_run)
    monkeypatch.setattr(bm25, "build_or_load", must_not_run)
    idle = runner.invoke(app, ["--db", any_db_url, "run", "bm25", "--bench", "mathlibqr", "--corpus", "mini",
                               "--limit", "15"])
    assert idle.exit_code == 0, idle.output
    assert "nothing to do, 15 of" in idle.output, idle.output
    db = open_database(any_db_url)
    with db.session() as s:  # the same configuration (identity from the Corpus row == from the rows)
        assert s.scalar(sa.select(sa.func.count()).select_from(EngineConfig)) == 1
        assert s.scalar(sa.select(sa.func.count()).select_from(Answer)) == 15
    db.dispose()


def test_run_bm25_bad_input_is_one_line(sqlite_url: str, write_jsonl, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.main import app

    monkeypatch.setenv("ENGINES_CACHE_DIR", str(tmp_path / "cache"))
    _load(sqlite_url, write_jsonl)
    runner = CliRunner()
    for args, needle in [
        (["--bench", "nope"], "no benchmark named 'nope'"),
        (["--bench", "mathlibqr", "--corpus", "other"], "no corpus 'other'"),
        (["--bench", "mathlibqr", "--fields", "name,bogus"], "unknown field(s) bogus"),
        (["--bench", "mathlibqr", "--method", "okapi"], "--method 'okapi'"),
    ]:
        res = runner.invoke(app, ["--db", sqlite_url, "run", "bm25", *args])
        assert res.exit_code == 1 and needle in res.output, res.output
        assert "Traceback" not in res.output

