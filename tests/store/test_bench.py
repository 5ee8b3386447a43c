"""Benchmark loading: MathlibQR/MPR counts, subsets, hash verification, bad input."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import sqlalchemy as sa

from benchmarks import SHIPPED_DIR, shipped_path
from store.benchmarks import load_benchmark_file, load_shipped, query_sha256, subset_members
from store.errors import InputError
from store.models import Benchmark, GoldName, GoldUnit, Query, Subset


def _queries(db, bench: str) -> list[Query]:
    with db.session() as s:
        b = s.execute(sa.select(Benchmark).where(Benchmark.name == bench)).scalar_one()
        qs = list(s.execute(sa.select(Query).where(Query.benchmark_id == b.id).order_by(Query.id)).scalars())
        for q in qs:
            for u in q.gold_units:
                _ = [n.name for n in u.names]
        return qs


def test_shipped_files_load_with_published_counts(any_db) -> None:
    results = load_shipped(any_db)
    assert all(r.created and not r.modified for r in results)
    qr = _queries(any_db, "mathlibqr")
    assert len(qr) == 946
    assert len({q.target_id for q in qr}) == 200
    assert Counter(q.style for q in qr) == {
        "q1a_lean": 199, "q1b_latex": 200, "q1c_natural": 199, "q2_slogan": 197, "q3_nickname": 128, "q4_special_case": 23,
    }
    first = next(q for q in qr if q.qid == "O1_q3_nickname")
    assert (first.text, first.kind, first.difficulty, first.style) == ("lattice", "class", "Easy", "q3_nickname")
    assert first.query_sha256 == query_sha256("lattice")
    assert [(u.kind, [n.name for n in u.names]) for u in first.gold_units] == [("single", ["Lattice"])]
    # 894 queries remain once the 11 golds missing from the 4.28 corpus are dropped (Legendre's n).
    missing = subset_members(any_db, "missing_in_4280")
    assert len(missing) == 11
    assert sum(1 for q in qr if q.gold_units[0].names[0].name not in missing) == 894
    shared = subset_members(any_db, "shared171")
    assert len(shared) == 171
    assert sum(1 for q in qr if q.gold_units[0].names[0].name in shared) == 810

    mpr = _queries(any_db, "mathlibmpr")
    primary = [q for q in mpr if q.primary]
    assert len(primary) == 69 and len(mpr) == 138
    assert {q.style for q in primary} == {"NL_main_result"}
    units = [u for q in primary for u in q.gold_units]
    assert len(units) == 204
    assert Counter(u.kind for u in units) == {"original": 171, "alternative": 33}
    assert len({n.name for u in units for n in u.names}) == 341
    item = next(q for q in mpr if q.qid == "mathlibmpr_003_NL_main_result")
    assert [n.name for n in item.gold_units[0].names] == ["DoubleCoset.union_quotToDoubleCoset", "DoubleCoset.mk_out_eq_mul"]
    formal = next(q for q in mpr if q.qid == "mathlibmpr_003_formal_statement")
    assert not formal.primary and formal.text.startswith("import Mathlib.GroupTheory.DoubleCoset")
    prop = subset_members(any_db, "mathlibmpr-prop")
    assert len(prop) == 50 and prop <= {q.target_id for q in mpr}


def test_loading_again_is_noop(db) -> None:
    load_shipped(db)
    again = load_shipped(db)
    assert not any(r.created for r in again)
    with db.session() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Query)) == 946 + 138
        assert s.scalar(sa.select(sa.func.count()).select_from(Subset)) == 5


def test_modified_file_refused_unless_allowed(db, tmp_path) -> None:
    data = json.loads(shipped_path("MathlibQR.json").read_text())
    data[0]["q3_nickname"] = "a lattice, reworded"
    path = tmp_path / "MathlibQR.json"
    path.write_text(json.dumps(data, ensure_ascii=False))
    with pytest.raises(InputError, match="does not match the published mathlibqr file.*--allow-modified"):
        load_benchmark_file(db, path)
    with db.session() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Benchmark)) == 0
    res = load_benchmark_file(db, path, allow_modified=True)
    assert res.modified and res.created
    with db.session() as s:
        b = s.execute(sa.select(Benchmark)).scalar_one()
        assert b.modified and b.sha256 == res.sha256 and b.name == f"mathlibqr-modified-{res.sha256[:8]}"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "invalid JSON"),
        ('{"hello": 1}', "not a recognised benchmark file"),
        ('[{"id": "X1", "full_name": "", "q1a_lean": "q"}]', "'full_name' must be a non-empty string"),
        ('[{"id": "m1", "premise_group": [{"kind": "other", "docs": ["a"]}], "NL_main_result": "s", "formal_statement": "f"}]',
         "expected {'kind'"),
    ],
)
def test_bad_benchmark_files(db, tmp_path, content, message) -> None:
    path = tmp_path / "bench.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        load_benchmark_file(db, path, allow_modified=True)
    with db.session() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Query)) == 0
        assert s.scalar(sa.select(sa.func.count()).select_from(GoldUnit)) == 0
        assert s.scalar(sa.select(sa.func.count()).select_from(GoldName)) == 0


def test_missing_file(db, tmp_path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_benchmark_file(db, tmp_path / "MathlibQR.json")


def test_shipped_copies_are_byte_identical_to_the_published_files() -> None:
    import hashlib

    from benchmarks import KNOWN_FILES, SHIPPED_FILES

    for name in SHIPPED_FILES:
        digest = hashlib.sha256((SHIPPED_DIR / name).read_bytes()).hexdigest()
        assert digest in KNOWN_FILES, name
    assert "Apache License" in (SHIPPED_DIR / "LICENSE.LeanSearch-v2").read_text()
    assert "0ce093ebb9da90c046d10b4e50a901edd8237a5aef357df1a3e08f5f5c1a1294" in (SHIPPED_DIR / "PROVENANCE.md").read_text()
