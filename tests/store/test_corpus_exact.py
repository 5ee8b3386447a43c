"""The fast corpus loader stores exactly what parse_row reads from each line.

store.corpus.batches (the fast path) builds rows per key shape without parse_row, the loader
reads in a thread of its own and COPYs preformatted text on PostgreSQL. These tests load
the real Mathlib slice (three batches) with rows of unusual shapes mixed in, and compare
every ``declarations`` column, the row order and the corpora meta with what parse_row
(the loader's reference, store.corpus.rows) gives for each line; on SQLite the stored
JSON text too. Bad lines must fail with the message a plain
``json.loads`` per line gives.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest
import sqlalchemy as sa

from benchmarks import SLICE_CORPUS
from store.corpus import load_corpus
from store.corpus.batches import BATCH_ROWS
from store.corpus.rows import parse_row
from store.errors import InputError

COLS = ("row", "full_name", "name", "module_name", "kind", "type", "signature", "value", "informal_name",
        "informal_description", "docstring", "extra")
KNOWN = dict.fromkeys(("name", "module_name", "kind", "type", "signature", "value", "informal_name",
                       "informal_description", "docstring"))

# Raw lines, as they would sit in a file: escapes, odd types, odd key orders, blanks.
UNUSUAL = [
    # Every known key (the fast shape) with name parts that need JSON escapes.
    json.dumps({**KNOWN, "name": ["Quote\"d", "back\\slash", "tab\tname", "ctl\u0001x", "é"], "module_name": ["M"],
                "kind": "theorem"}),
    json.dumps({**KNOWN, "name": ["ünï", "«weird name»"], "module_name": ["Mathlib", "Ünï"], "kind": "def"},
               ensure_ascii=False),
    json.dumps({**KNOWN, "name": ["\u00e9t\u00e9"], "kind": "def"}),  # \u escapes in the file
    # Module as a list with non-strings, empty, of empty strings, a string, a number, an object.
    json.dumps({**KNOWN, "name": ["Mod", "a"], "module_name": ["M", 7, None, 1.5]}),
    json.dumps({**KNOWN, "name": ["Mod", "b"], "module_name": []}),
    json.dumps({**KNOWN, "name": ["Mod", "c"], "module_name": [""]}),
    json.dumps({**KNOWN, "name": ["Mod", "d"], "module_name": ["", ""]}),
    json.dumps({**KNOWN, "name": ["Mod", "e"], "module_name": ""}),
    json.dumps({**KNOWN, "name": ["Mod", "f"], "module_name": "Mathlib.X"}),
    json.dumps({"name": ["Mod", "g"], "module_name": 5}),
    json.dumps({"name": ["Mod", "h"], "module_name": {"a": 1}, "kind": "theorem"}),
    json.dumps({**KNOWN, "name": ["Mod", "i"], "module_name": True}),
    # Text fields that are not strings.
    json.dumps({**KNOWN, "name": ["Odd", "texts"], "kind": 3, "type": 1.5, "signature": True, "value": [1, "a"],
                "informal_name": {"x": None}, "docstring": False, "informal_description": 0}),
    json.dumps({"name": ["Odd", "kind"], "kind": {"odd": ["kind"]}, "value": -0}),
    # Unknown keys of every JSON type, with escapes and a per-cent sign in a key.
    json.dumps({**KNOWN, "name": ["Extra", "many"], "p%s": "x%d", "big": 123456789012345678901234567890,
                "f": 1e100, "neg0": -0.0, "nested": {"a": [1, {"b": "c\n"}]}, "b": True, "n": None,
                "s": "tab\there", "k\"q": "v"}),
    json.dumps({**KNOWN, "name": ["Extra", "one"], "only": "x"}),
    json.dumps({**KNOWN, "name": ["Extra", "two"], "source_path": "back\\slash.lean", "source_line": True}),
    json.dumps({**KNOWN, "name": ["Extra", "ints"], "source_path": 1, "source_line": -7}),
    '{"name": ["Num", "forms"], "kind": "k", "source_path": "p", "source_line": 1E2, "x": 10.0, "y": -0}',
    # Duplicate keys (the last wins, in the first one's place), other orders, missing keys.
    '{"name": ["Dup"], "kind": "first", "kind": "second", "name": ["Dup", "last"], "z": 1, "z": 2}',
    json.dumps({"docstring": "d", "name": ["Order", "reversed"], "kind": "theorem", "module_name": ["A", "B"]}),
    json.dumps({"name": ["Sparse"]}),
    json.dumps({"name": " Nat.add_comm "}),  # a string name is stripped and split
    # Blank lines, surrounding blanks, CRLF, "None" and COPY's special characters in text.
    "",
    "   ",
    '   {"name": ["Spaced", "both"], "kind": "theorem"}   ',
    '\t{"name": ["Tabbed"]}',
    json.dumps({**KNOWN, "name": ["Crlf"], "kind": "theorem"}) + "\r",
    json.dumps({**KNOWN, "name": ["Option", "isNone"], "kind": "None", "docstring": "None", "value": "\\N"}),
    json.dumps({**KNOWN, "name": ["Copy", "specials"], "docstring": "a\tb\\c\rd\ne\\.\n", "signature": "100%",
                "type": "\u2028 line sep \x7f del"}),
    json.dumps({**KNOWN, "name": ["Long", "kind"], "kind": "k" * 50}),
]


def _corpus_lines() -> list[str]:
    """The slice's lines with the unusual ones spread over all batches."""
    real = SLICE_CORPUS.read_text(encoding="utf-8").splitlines()
    assert len(real) > 2 * BATCH_ROWS
    out: list[str] = []
    step = len(real) // (len(UNUSUAL) + 1)
    for i, line in enumerate(real):
        if i % step == 0 and i // step < len(UNUSUAL):
            out.append(UNUSUAL[i // step])
        out.append(line)
    out += UNUSUAL[len(out) - len(real):]  # whatever did not fit in
    assert sum(1 for line in out if line in UNUSUAL) >= len(UNUSUAL) - 2  # blank ones repeat
    return out


def _expected(lines: list[str]) -> list[dict]:
    rows = []
    for line in lines:
        if not line.strip():
            continue
        rows.append(parse_row(json.loads(line), "x", len(rows)))
    return rows


def _expected_meta(rows: list[dict]) -> dict:
    kinds = Counter(r["kind"] or "" for r in rows)
    names = Counter(r["full_name"] for r in rows)
    extra = Counter(k for r in rows for k in (r["extra"] or {}))
    return {
        "kinds": list(kinds.most_common()),  # ties in first-seen order, as the loader's
        "duplicate_names": sum(1 for c in names.values() if c > 1),
        "distinct_names": len(names),
        "extra_keys": dict(extra),
    }


@pytest.mark.parametrize("gz", [False, True])
def test_every_column_equals_parse_row(any_db, write_jsonl, gz) -> None:
    lines = _corpus_lines()
    path = write_jsonl(lines, "corpus.jsonl.gz" if gz else "corpus.jsonl")
    res = load_corpus(any_db, str(path), name="exact")
    expected = _expected(lines)
    assert res.rows == len(expected) > 2 * BATCH_ROWS

    sqlite = any_db.engine.dialect.name == "sqlite"
    # JSON columns as stored text: SQLite keeps json.dumps' text; PostgreSQL's jsonb keeps
    # its own normal form of it, which the server makes of the expected text here.
    select = ", ".join(f"{c}::text" if c in ("name", "extra") and not sqlite else c for c in COLS)
    dumped = {c: [json.dumps(e[c], ensure_ascii=False) if e[c] is not None else None for e in expected]
              for c in ("name", "extra")}
    with any_db.engine.connect() as conn:
        got = conn.exec_driver_sql(
            f"SELECT id, {select} FROM declarations WHERE corpus_id = {res.corpus_id} ORDER BY id"
        ).all()
        if sqlite:
            types = set(conn.exec_driver_sql(
                "SELECT DISTINCT typeof(full_name), typeof(name), typeof(coalesce(kind, '')), typeof(coalesce(extra, ''))"
                " FROM declarations").all())
            assert types == {("text", "text", "text", "text")}, types
        else:
            for c in ("name", "extra"):
                dumped[c] = [r[0] for r in conn.exec_driver_sql(
                    "SELECT x::jsonb::text FROM unnest(%(a)s::text[]) WITH ORDINALITY AS t(x, i) ORDER BY i",
                    {"a": dumped[c]})]
    assert [g[1] for g in got] == list(range(len(expected)))  # ids in file order
    for i, (g, e) in enumerate(zip(got, expected)):
        stored = dict(zip(COLS, g[1:]))
        want = {**e, "name": dumped["name"][i], "extra": dumped["extra"][i]}
        assert stored == {c: want[c] for c in COLS}, (stored, want)

    want_meta = _expected_meta(expected)
    assert list(res.meta["kinds"].items()) == want_meta["kinds"]
    assert res.meta["duplicate_names"] == want_meta["duplicate_names"]
    assert res.meta["distinct_names"] == want_meta["distinct_names"]
    assert res.meta["extra_keys"] == want_meta["extra_keys"]
    assert res.meta["file"] == path.name
    with any_db.engine.connect() as conn:
        stored_meta, count = conn.exec_driver_sql(f"SELECT meta, row_count FROM corpora WHERE id = {res.corpus_id}").one()
    assert (json.loads(stored_meta) if isinstance(stored_meta, str) else stored_meta) == res.meta
    assert count == res.rows


def _json_error(line: str) -> str:
    try:
        json.loads(line)
    except json.JSONDecodeError as exc:
        return f"invalid JSON ({exc.msg} at column {exc.colno})"
    raise AssertionError(f"{line!r} is valid JSON")


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"name": ["A"]} x', None),
        ('{"name": ["A"]}\x0b', None),  # not JSON whitespace, though str.isspace says it is
        ('{"name": ["A"],}', None),
        ('{"name": ["A"], "kind": "a\tb"}', None),  # raw control character in a string
        ("\ufeff" + '{"name": ["A"]}', None),
        ('{"name": ["A"]', None),
        ("NaN", "expected a JSON object, got float"),
        ('"just a string"', "expected a JSON object, got str"),
        ('{"name": ["A", ""]}', "no usable 'name'"),
        ('{"name": "A..B"}', "no usable 'name'"),
    ],
)
def test_bad_line_in_a_later_batch_fails_as_json_loads_says(any_db, write_jsonl, bad_line, message) -> None:
    good = [json.dumps({"name": ["N", f"t{i}"], "kind": "theorem"}) for i in range(BATCH_ROWS + 10)]
    lines = good + [bad_line] + good[:20]
    path = write_jsonl(lines)
    with pytest.raises(InputError) as info:
        load_corpus(any_db, str(path), name="bad")
    where = f"{path}:{BATCH_ROWS + 11}: "
    if message is None:
        assert info.value.message == where + _json_error(bad_line + "\n")  # the line as read
    else:
        assert message in info.value.message
        with pytest.raises(InputError) as direct:
            parse_row(json.loads(bad_line), where[:-2], 0)
        assert info.value.message == direct.value.message
    assert "\n" not in info.value.message
    with any_db.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM declarations").scalar() == 0
        assert conn.exec_driver_sql("SELECT count(*) FROM corpora").scalar() == 0
    assert not [t for t in threading.enumerate() if t.name == "corpus-reader"]


@pytest.mark.postgres
def test_nul_in_text_is_refused_as_write_row_did(pg_url, write_jsonl) -> None:
    import psycopg

    from store.db import open_database

    db = open_database(pg_url)
    try:
        nul = json.dumps({"name": ["Nul"], "docstring": "a\u0000b"})
        with pytest.raises(psycopg.DataError, match=r"PostgreSQL text fields cannot contain NUL \(0x00\) bytes"):
            load_corpus(db, str(write_jsonl([json.dumps({"name": ["A"]}), nul])), name="nul")
        # A bad line later in the same batch is read (and reported) before the batch is written.
        path = write_jsonl([nul, json.dumps({"name": ["B"]}), "{oops"], "second.jsonl")
        with pytest.raises(InputError, match=r"second.jsonl:3: invalid JSON"):
            load_corpus(db, str(path), name="nul")
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM declarations").scalar() == 0
    finally:
        db.dispose()


def test_sqlite_name_index_is_dropped_and_rebuilt_inside_the_transaction(db, write_jsonl) -> None:
    """A load into an empty SQLite table builds the (corpus_id, full_name) index after the
    rows; a failed load gives the index back with everything else."""
    query = "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'ix_declarations_corpus_id_full_name'"
    with db.engine.connect() as conn:
        made = conn.exec_driver_sql(query).scalar()
    assert made and "full_name" in made
    good = [json.dumps({"name": ["N", f"t{i}"], "kind": "theorem"}) for i in range(BATCH_ROWS + 10)]
    with pytest.raises(InputError, match="invalid JSON"):
        load_corpus(db, str(write_jsonl(good + ["{oops"], "bad.jsonl")), name="bad")
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql(query).scalar() == made
        assert conn.exec_driver_sql("SELECT count(*) FROM declarations").scalar() == 0
    first = load_corpus(db, str(write_jsonl(good, "a.jsonl")), name="a")
    second = load_corpus(db, str(write_jsonl(good[:30], "b.jsonl")), name="b")  # table not empty: kept as is
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql(query).scalar() == made
        assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
        plan = " ".join(str(r) for r in conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT id FROM declarations WHERE corpus_id = 1 AND full_name = 'N.t7'").all())
        assert "ix_declarations_corpus_id_full_name" in plan
        by_index = conn.exec_driver_sql(
            "SELECT corpus_id, row FROM declarations WHERE full_name = 'N.t7' AND corpus_id IN (?, ?) ORDER BY corpus_id",
            (first.corpus_id, second.corpus_id)).all()
    assert by_index == [(first.corpus_id, 7), (second.corpus_id, 7)]
