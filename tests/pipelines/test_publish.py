"""engines publish / engines verify: a leaderboard bundle re-derived offline, on SQLite and
PostgreSQL, and every way of changing it (with digests recomputed, so the WARC stays
valid) caught and named.

The source database is built with library functions: MathlibQR's first 3 targets (the
demo's cut), a small corpus that is *not* shipped (gold rows of those targets plus 300
rows of the slice), a LeanSearch stand-in crawled through the real crawler with 5xx and
connection resets (so failures travel in the bundle), and the local BM25 row.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import sqlalchemy as sa

from cli.main import run as cli
from store.db import open_database
from tests.support.publish import SUBSET, build_source, claim_of, rewrite, source, verify  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINES_CACHE_DIR", str(tmp_path / "cache"))


# ------------------------------------------------------------------ rewriting bundles


def edit_claim(src: Path, dst: Path, fn: Callable[[dict], None]) -> None:
    def edit(rtype, headers, http, body):
        if headers.get("WARC-Engines-Role") == "claim":
            doc = json.loads(body)
            fn(doc)
            return json.dumps(doc, ensure_ascii=False).encode()
        return body

    rewrite(src, dst, edit)


def system(doc: dict, engine: str) -> dict:
    return next(s for s in doc["systems"] if s["engine"] == engine)


# ------------------------------------------------------------------------------ tests


def test_round_trip_all_figures_equal(source, capsys, tmp_path):
    code, out, err = verify(capsys, source["full"])
    assert code == 0, out + err
    claim = claim_of(source["full"])
    assert len(claim["systems"]) == 2 and claim["comparisons"]
    line = out.strip().splitlines()[0]
    assert line.startswith("verified: 2 systems, ") and line.endswith(" figures equal")
    assert int(line.split(", ")[1].split()[0]) > 500
    # Standard tools read it; engines import reads its exchanges (failures included).
    assert subprocess.run([sys.executable, "-m", "warcio.cli", "check", str(source["full"])]).returncode == 0
    from store.models import Exchange

    src = open_database(source["url"])
    dst = open_database(f"sqlite:///{tmp_path / 'imp.db'}")
    try:
        with src.session() as s:
            n = s.scalar(sa.select(sa.func.count()).select_from(Exchange))
            failed = s.scalar(sa.select(sa.func.count()).select_from(Exchange).where(
                sa.or_(Exchange.status_code >= 500, Exchange.transport_error.is_not(None))))
        assert failed > 0
        assert cli(["--db", dst.engine.url.render_as_string(hide_password=False), "import", str(source["full"])]) == 0
        with dst.session() as s:
            assert s.scalar(sa.select(sa.func.count()).select_from(Exchange)) == n
    finally:
        src.dispose()
        dst.dispose()


def test_without_corpus_needs_the_corpus(source, capsys):
    sha = claim_of(source["bare"])["corpus"]["sha256"]
    code, out, err = verify(capsys, source["bare"])
    assert code == 2
    assert out == "" and len(err.strip().splitlines()) == 1 and sha in err and "--corpus" in err
    code, out, err = verify(capsys, source["bare"], "--corpus", source["corpus"])
    assert code == 0, out + err
    assert out.startswith("verified: 2 systems")
    # A file with another sha256 is named as such.
    other = source["dir"] / "other.jsonl"
    other.write_text(source["corpus"].read_text("utf-8").split("\n", 1)[1], "utf-8")
    code, out, err = verify(capsys, source["bare"], "--corpus", other)
    assert code == 2 and sha in err and len(err.strip().splitlines()) == 1


def test_the_bundle_is_smaller_without_its_corpus(source):
    assert source["bare"].stat().st_size < source["full"].stat().st_size - 10_000


def test_a_changed_hit_in_a_run_record_is_named(source, capsys, tmp_path):
    claim = claim_of(source["full"])
    bm25 = system(claim, "bm25")
    qid = next(q for q, v in bm25["per_query"].items() if v["positions"] and v["positions"][0])
    changed = []

    def edit(rtype, headers, http, body):
        if headers.get("WARC-Engines-Role") != "run":
            return body
        lines = []
        for line in body.decode().splitlines():
            obj = json.loads(line)
            if obj["qid"] == qid:
                pos = bm25["per_query"][qid]["positions"][0]
                obj["ranked"][pos - 1] = "Not.A.Declaration"
                changed.append(qid)
            lines.append(json.dumps(obj, ensure_ascii=False))
        return ("\n".join(lines) + "\n").encode()

    bad = tmp_path / "run-edited.warc.gz"
    rewrite(source["full"], bad, edit)
    if not changed:  # the run lists each text once under its first qid
        pytest.fail(f"qid {qid} not in the run record")
    code, out, err = verify(capsys, bad)
    assert code == 1, out + err
    rows = [ln for ln in out.splitlines() if ln.startswith(bm25["id"] + " ")]
    assert rows and any("per_query" in r or "metrics" in r for r in rows)
    assert not any(ln.startswith(system(claim, "leansearch")["id"] + " ") for ln in out.splitlines())


def test_an_edited_response_body_is_named(source, capsys, tmp_path):
    claim = claim_of(source["full"])
    ls = system(claim, "leansearch")
    found = [q for q in claim["queries"]
             if (ls["per_query"].get(q["qid"]) or {}).get("positions", [None])[0]]
    assert found, "the stand-in found no gold: the fixture is too hard"
    q = found[0]
    gold = q["gold"][0][0]
    edited = []

    def edit(rtype, headers, http, body):
        if rtype == "response" and http.get_statuscode() == "200" and not edited:
            new = body.replace(json.dumps(gold.split("."))[1:-1].encode(), b'"Not", "A", "Declaration"')
            if new != body:
                edited.append(1)
                return new
        return body

    bad = tmp_path / "body-edited.warc.gz"
    rewrite(source["full"], bad, edit)
    assert edited
    code, out, err = verify(capsys, bad)
    assert code == 1, out + err
    assert any(ln.startswith(ls["id"] + " ") and ("metrics" in ln or "per_query" in ln) for ln in out.splitlines())


@pytest.mark.parametrize("how", ["removed", "added"])
def test_a_system_added_to_or_removed_from_the_claim_is_named(source, capsys, tmp_path, how):
    bad = tmp_path / f"claim-{how}.warc.gz"

    def fn(doc):
        if how == "removed":
            doc["systems"] = [s for s in doc["systems"] if s["engine"] != "bm25"]
            doc["comparisons"] = []
        else:
            extra = json.loads(json.dumps(system(doc, "bm25")))
            extra.update(id="phantom", config_hash="f" * 64)
            doc["systems"].append(extra)

    edit_claim(source["full"], bad, fn)
    code, out, err = verify(capsys, bad)
    assert code == 1, out + err
    name = "bm25" if how == "removed" else "phantom"
    assert any(ln.startswith(name + " ") and "(system)" in ln for ln in out.splitlines()), out


def test_one_edited_claim_figure_is_named(source, capsys, tmp_path):
    bad = tmp_path / "figure.warc.gz"
    claim = claim_of(source["full"])
    real = system(claim, "leansearch")["metrics"]["nDCG@10"]["value"]
    edit_claim(source["full"], bad, lambda doc: system(doc, "leansearch")["metrics"]["nDCG@10"].update(value=0.4242))
    code, out, err = verify(capsys, bad)
    assert code == 1
    assert out.splitlines()[0].startswith("NOT verified: 1 differences")
    row = out.splitlines()[2].split()
    assert row[:4] == [system(claim, "leansearch")["id"].split()[0], *row[1:4]] and "metrics.nDCG@10.value" in row
    assert "0.4242" in row and json.dumps(real) in row


def test_a_damaged_bundle_is_one_line_exit_2(source, capsys, tmp_path):
    data = source["full"].read_bytes()
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(data[: len(data) // 2])
    code, out, err = verify(capsys, cut)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "truncated" in err
    # A changed byte inside a response without recomputed digests: refused as engines import refuses it.
    plain = gzip.decompress(data)  # every member: the bundle as one plain WARC
    at = plain.index(b"WARC-Type: response")
    body = plain.index(b"\r\n\r\n", plain.index(b"\r\n\r\n", at) + 4) + 4
    raw = tmp_path / "raw.warc"
    raw.write_bytes(plain[:body] + (b"{" if plain[body:body + 1] != b"{" else b"[") + plain[body + 1:])
    code, out, err = verify(capsys, raw)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "digest" in err, err


def test_hostile_records_are_bounded(source, capsys, tmp_path, monkeypatch):
    import pipelines.verify_read as v

    monkeypatch.setattr(v, "MAX_JSON", 1000)
    code, out, err = verify(capsys, source["full"])
    assert code == 2 and "bound" in err and len(err.strip().splitlines()) == 1
    monkeypatch.undo()
    deep = tmp_path / "deep.warc.gz"

    def fn(doc):
        x: Any = 1
        for _ in range(300):
            x = [x]
        doc["scope"]["deep"] = x

    edit_claim(source["full"], deep, fn)
    code, out, err = verify(capsys, deep)
    assert code == 2 and "deeper than" in err


def test_verify_ignores_the_environment_database_and_refuses_a_non_empty_one(source, capsys, monkeypatch):
    monkeypatch.setenv("ENGINES_DATABASE_URL", source["url"])
    code, out, err = verify(capsys, source["full"])
    assert code == 0, err
    code, out, err = verify(capsys, source["full"], "--db", source["url"])
    assert code == 2 and "not empty" in err and len(err.strip().splitlines()) == 1


@pytest.mark.postgres
def test_verify_into_an_empty_postgres_database(source, pg_url, capsys):
    code, out, err = verify(capsys, source["full"], "--db", pg_url)
    assert code == 0, out + err
    assert out.startswith("verified: 2 systems")


@pytest.mark.postgres
def test_publish_from_postgres_and_verify(pg_url, capsys, tmp_path):
    corpus = build_source(pg_url, tmp_path)
    out_file = tmp_path / "pg.warc.gz"
    assert cli(["--db", pg_url, "publish", "--bench", "mathlibqr", "--subset", SUBSET, "--out", str(out_file)]) == 0
    code, out, err = verify(capsys, out_file, "--corpus", corpus)
    assert code == 0, out + err
    assert out.startswith("verified: 2 systems")


def test_a_different_parser_or_tool_version_is_noted(source, capsys, tmp_path, monkeypatch):
    from engines.registry import ENGINES

    old = tmp_path / "old-tool.warc.gz"
    edit_claim(source["full"], old, lambda doc: doc.update(code_version="0.0.1+old"))
    monkeypatch.setattr(ENGINES["leansearch"], "parser_version", ENGINES["leansearch"].parser_version + 100)
    code, out, err = verify(capsys, old)
    assert code == 0, out + err  # the code version is not a figure
    assert "note: tool version differs: the claim was made by engines 0.0.1+old" in out
    assert "note: parser version differs: leansearch" in out


def test_an_imported_run_travels_with_its_identity_and_file(source, capsys, tmp_path):
    """An `engines run import` row (engine "run", no exchanges) is a run record with its
    original configuration hash, and its original file's bytes ride along."""
    import shutil

    from archive.runs import import_run

    body = {}

    def edit(rtype, headers, http, data):
        if headers.get("WARC-Engines-Role") == "run":
            body["run"] = data
        return data

    rewrite(source["full"], tmp_path / "scratch.warc.gz", edit)
    run_file = tmp_path / "mine.jsonl"
    run_file.write_bytes(body["run"])
    shutil.copyfile(Path(source["url"].removeprefix("sqlite:///")), tmp_path / "src.db")
    url = f"sqlite:///{tmp_path / 'src.db'}"
    db = open_database(url)
    try:
        import_run(db, run_file, bench="mathlibqr", name="mine", source=str(run_file))
    finally:
        db.dispose()
    out = tmp_path / "with-run.warc.gz"
    assert cli(["--db", url, "publish", "--bench", "mathlibqr", "--subset", SUBSET, "--with-corpus", "--out", str(out)]) == 0
    files = []

    def look(rtype, headers, http, data):
        if headers.get("WARC-Engines-Role") == "run-file":
            files.append(data)
        return data

    rewrite(out, tmp_path / "scratch2.warc.gz", look)
    assert files == [run_file.read_bytes()]
    code, text, err = verify(capsys, out)
    assert code == 0, text + err
    assert text.startswith("verified: 3 systems")
