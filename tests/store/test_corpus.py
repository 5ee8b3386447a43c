"""Corpus loading: gz, duplicates, idempotence, refusal, bad lines, transactions, hf:// offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchmarks import SLICE_CORPUS
from store.corpus import load_corpus, parse_row
from store.errors import InputError
from store.models import Corpus, Declaration

ROWS = [
    {"name": ["Nat", "add_comm"], "module_name": ["Mathlib", "Algebra"], "kind": "theorem",
     "type": "∀ (n m : ℕ), n + m = m + n", "index": 0, "signature": " (n m : ℕ) : n + m = m + n",
     "value": ":= by omega", "informal_name": "Commutativity", "informal_description": "Addition commutes."},
    {"name": ["Lattice"], "module_name": ["Mathlib", "Order", "Lattice"], "kind": "class", "future_key": [1, 2]},
    {"name": ["Nat", "add_comm"], "module_name": ["Mathlib", "Other"], "kind": "theorem"},  # duplicate name
    {"name": "Fin2.IsLT.succ", "kind": "instance", "type": None, "value": None},  # string name
]


def _decls(db, corpus_id):
    with db.session() as s:
        return list(s.execute(sa.select(Declaration).where(Declaration.corpus_id == corpus_id).order_by(Declaration.row)).scalars())


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_load_plain_and_gzip_keeps_duplicates_and_extra_keys(any_db, write_jsonl, suffix) -> None:
    path = write_jsonl(ROWS, "c" + suffix)
    res = load_corpus(any_db, str(path), name="tiny", revision="r1")
    assert res.created and res.rows == 4
    decls = _decls(any_db, res.corpus_id)
    assert [d.full_name for d in decls] == ["Nat.add_comm", "Lattice", "Nat.add_comm", "Fin2.IsLT.succ"]
    assert decls[0].module_name == "Mathlib.Algebra"
    assert decls[0].name == ["Nat", "add_comm"]
    assert decls[0].extra == {"index": 0}
    assert decls[1].extra == {"future_key": [1, 2]}
    assert decls[3].name == ["Fin2", "IsLT", "succ"]  # split, not one dot per character
    assert decls[3].type is None
    assert res.meta["duplicate_names"] == 1 and res.meta["kinds"]["theorem"] == 2
    with any_db.session() as s:
        c = s.execute(sa.select(Corpus)).scalar_one()
        assert (c.name, c.revision, c.row_count, c.sha256) == ("tiny", "r1", 4, res.sha256)


def test_same_file_twice_is_noop_and_other_file_refused(db, write_jsonl, tmp_path) -> None:
    path = write_jsonl(ROWS)
    first = load_corpus(db, str(path), name="tiny")
    second = load_corpus(db, str(path), name="tiny")
    assert first.created and not second.created and second.corpus_id == first.corpus_id
    other = write_jsonl(ROWS[:2], "other.jsonl")
    with pytest.raises(InputError, match="already loaded from a different file"):
        load_corpus(db, str(other), name="tiny")
    # Under another revision it loads.
    assert load_corpus(db, str(other), name="tiny", revision="v2").rows == 2
    with db.session() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Declaration)) == 6


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"name": [], "kind": "theorem"}', "no usable 'name'"),
        ('{"kind": "theorem"}', "no usable 'name'"),
        ('{"name": ["A", 3]}', "no usable 'name'"),
        ('{"name": ["A"], "kind": "the', "invalid JSON"),
        ('[1, 2]', "expected a JSON object"),
    ],
)
def test_bad_row_fails_with_file_and_line_and_leaves_nothing(any_db, write_jsonl, bad_line, message) -> None:
    rows = [json.dumps(r) for r in ROWS] + ["", bad_line]
    path = write_jsonl(rows)
    with pytest.raises(InputError, match=message) as info:
        load_corpus(any_db, str(path), name="bad")
    assert f"{path}:6:" in info.value.message  # blank line 5 is skipped but counted
    with any_db.session() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Corpus)) == 0
        assert s.scalar(sa.select(sa.func.count()).select_from(Declaration)) == 0


def test_failure_after_many_batches_rolls_back(db, write_jsonl) -> None:
    rows = [{"name": ["N", f"t{i}"], "kind": "theorem"} for i in range(12_000)] + [{"name": None}]
    path = write_jsonl(rows)
    with pytest.raises(InputError, match=":12001:"):
        load_corpus(db, str(path), name="big")
    with db.session() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Declaration)) == 0


def test_missing_and_directory_sources(db, tmp_path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_corpus(db, str(tmp_path / "nope.jsonl"), name="x")
    with pytest.raises(InputError, match="is a directory"):
        load_corpus(db, str(tmp_path), name="x")
    with pytest.raises(InputError, match="pinned revision is required"):
        load_corpus(db, "hf://FrenzyMath/lsv2-mathlib-v4.28.0-rc1-jsonl", name="x")


def test_real_slice_loads_with_its_documented_counts(db) -> None:
    res = load_corpus(db, str(SLICE_CORPUS), name="mathlib-slice")
    assert res.rows == 11_651
    assert res.meta["kinds"] == {
        "theorem": 8654, "definition": 1464, "instance": 1205, "abbrev": 133, "class": 95, "structure": 83, "inductive": 17,
    }
    assert res.meta["duplicate_names"] == 0
    with db.session() as s:
        row = s.execute(sa.select(Declaration).where(Declaration.full_name == "ProbabilityTheory.cond")).scalar_one()
    assert row.kind == "definition" and row.type is None and row.docstring.startswith("The conditional probability")
    assert row.extra["source_path"] == "Mathlib/Probability/ConditionalProbability.lean"


def test_parse_row_string_name_is_split() -> None:
    row = parse_row({"name": "Fin2.IsLT.succ"}, "f:1", 0)
    assert row["full_name"] == "Fin2.IsLT.succ" and row["name"] == ["Fin2", "IsLT", "succ"]


def _fake_hub_cache(cache: Path, repo: str, commit: str, ref: str, files: dict[str, Path]) -> None:
    """The on-disk layout huggingface_hub reads in offline mode (blobs, snapshots, refs)."""
    owner, name = repo.split("/")
    root = cache / f"datasets--{owner}--{name}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / ref).write_text(commit)
    snap = root / "snapshots" / commit
    for rel, src in files.items():
        target = snap / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, target)


def test_hf_source_through_huggingface_hub_offline(tmp_path, write_jsonl) -> None:
    """Real download code: huggingface_hub resolves the pinned revision from a local cache
    standing in for the hub (HF_HUB_OFFLINE=1, no network)."""
    data = write_jsonl(ROWS, "mathlib.jsonl.gz")
    commit = "c5f07cc71d42" + "0" * 28
    cache = tmp_path / "hub"
    _fake_hub_cache(cache, "FrenzyMath/lsv2-test", commit, "c5f07cc71d42", {"corpus/mathlib.jsonl.gz": data})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "hf")}
    env["ENGINES_DATABASE_URL"] = f"sqlite:///{tmp_path / 'cache.db'}"
    cmd = [sys.executable, "-m", "cli.main", "corpus", "load", "hf://FrenzyMath/lsv2-test@c5f07cc71d42", "--name", "hub"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "4 rows" in out.stderr
    import sqlite3

    con = sqlite3.connect(tmp_path / "cache.db")
    assert con.execute("SELECT name, revision, row_count, source FROM corpora").fetchone() == (
        "hub", "c5f07cc71d42", 4, "hf://FrenzyMath/lsv2-test@c5f07cc71d42",
    )
    con.close()
    # A revision that is not in the (offline) cache: one clear line, non-zero exit.
    bad = subprocess.run(cmd[:-3] + ["hf://FrenzyMath/lsv2-test@deadbeef", "--name", "hub2"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: hf://FrenzyMath/lsv2-test@deadbeef") and "Traceback" not in bad.stderr


def test_find_corpus_by_name_and_revision(db, write_jsonl) -> None:
    from store.corpus import find_corpus

    with pytest.raises(InputError, match="no corpus is loaded"):
        find_corpus(db)
    path = write_jsonl(ROWS)
    load_corpus(db, str(path), name="c", revision="r1")
    assert find_corpus(db).revision == "r1"  # the only one
    load_corpus(db, str(write_jsonl(ROWS[:2], "b.jsonl")), name="c", revision="r2")
    with pytest.raises(InputError, match="several corpora are loaded"):
        find_corpus(db)
    with pytest.raises(InputError, match="has several revisions"):
        find_corpus(db, "c")
    assert find_corpus(db, "c@r2").row_count == 2
    with pytest.raises(InputError, match=r"no corpus 'c@r3' in the database \(loaded: c@r1, c@r2\)"):
        find_corpus(db, "c@r3")


def test_fast_load_path_stores_exactly_what_parse_row_reads(any_db, write_jsonl) -> None:
    """The loader builds rows without parse_row (and COPYs them on PostgreSQL); every
    column must still be what parse_row makes of each shape of input."""
    import json as _json

    from store.corpus import parse_row
    from store.models import Declaration

    rows = [
        {"name": ["Nat", "add_comm"], "module_name": ["Mathlib", "Algebra"], "kind": "theorem", "type": "∀ a b, a + b = b + a",
         "source_line": 3, "source_path": "Mathlib/A.lean"},
        {"name": "Fin2.IsLT.succ", "module_name": "Mathlib.Data.Fin2", "docstring": None},
        {"name": ["Quote\"d", "back\\slash", "tab\tname"], "kind": {"odd": ["kind"]}, "value": 3},
        {"name": ["«weird name»", "x"], "module_name": ["M", 7], "informal_description": "ünïcode \\ \" \n line"},
        {"name": ["Only"], "extra_obj": {"a": [1, 2]}, "signature": ""},
    ]
    path = write_jsonl(rows)
    res = load_corpus(any_db, str(path), name="shapes")
    cols = ("row", "full_name", "name", "module_name", "kind", "type", "signature", "value", "informal_name",
            "informal_description", "docstring", "extra")
    with any_db.session() as s:
        got = s.execute(
            sa.select(*(getattr(Declaration, c) for c in cols)).where(Declaration.corpus_id == res.corpus_id)
            .order_by(Declaration.row)
        ).all()
    expected = [parse_row(_json.loads(_json.dumps(r)), "x", i) for i, r in enumerate(rows)]
    assert [dict(zip(cols, g)) for g in got] == [{c: e[c] for c in cols} for e in expected]
    assert res.meta["extra_keys"] == {"source_line": 1, "source_path": 1, "extra_obj": 1}
    assert res.meta["kinds"] == {"": 3, "theorem": 1, '{"odd": ["kind"]}': 1}
