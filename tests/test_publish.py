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
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import sqlalchemy as sa

from benchmarks import SLICE_CORPUS, shipped_path
from cli.main import run as cli
from store.db import open_database

SUBSET = "demo-first-3"


def build_source(url: str, tmp: Path) -> Path:
    """The source database; returns the corpus file (not shipped with the package)."""
    from crawler.fetch import RetryPolicy
    from crawler.crawl import CrawlOptions, run_crawl
    from engines.base import Rate
    from pipelines.demo import demo_cut
    from engines.emulate import FaultConfig, StandIn
    from engines.local.runner import run_bm25
    from store.benchmarks import load_benchmark_file
    from store.corpus import load_corpus
    from store.models import Benchmark, GoldName, GoldUnit, Query
    from tests.test_crawl import Quiet

    db = open_database(url)
    try:
        load_benchmark_file(db, shipped_path("MathlibQR.json"))
        subset, cut, _ = demo_cut(db, 3)
        assert subset == SUBSET
        with db.session() as s:
            gold = set(s.execute(sa.select(GoldName.name).join(GoldUnit).join(Query).join(Benchmark)
                                 .where(Benchmark.name == cut)).scalars())
        rows = []
        with open(SLICE_CORPUS, encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                obj = json.loads(line)
                if i < 300 or ".".join(obj["name"]) in gold:
                    rows.append(obj)
        corpus = tmp / "tiny.jsonl"
        corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        load_corpus(db, str(corpus), name="tiny", revision="t1")
        rate = Rate(200, 1.0)
        policy = RetryPolicy(max_attempts=12, backoff_initial=0.01, backoff_max=0.05)
        with StandIn("leansearch", rows, rate=rate, faults=FaultConfig(reset=0.3), seed=3).in_thread() as srv:
            opts = CrawlOptions(engines=["leansearch"], bench=cut, rates={"*": rate}, urls={"leansearch": srv.url},
                                policy=policy, margin=0.05,
                                stand_ins={"leansearch": {"kind": "test_publish", "seed": 3}})
            rep = Quiet()
            assert run_crawl(db, opts, rep).exit_code == 0, rep.lines
        run_bm25(db, bench=cut, corpus="tiny@t1")
    finally:
        db.dispose()
    return corpus


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("publish")
    mp = pytest.MonkeyPatch()
    mp.setenv("ENGINES_CACHE_DIR", str(d / "cache"))
    try:
        url = f"sqlite:///{d / 'src.db'}"
        corpus = build_source(url, d)
        bare, full = d / "bare.warc.gz", d / "full.warc.gz"
        for out, extra in ((bare, []), (full, ["--with-corpus"])):
            code = cli(["--db", url, "publish", "--bench", "mathlibqr", "--subset", SUBSET, "--compare",
                        "leansearch (stand-in)", "bm25", "--out", str(out), *extra])
            assert code == 0
        yield {"url": url, "corpus": corpus, "bare": bare, "full": full, "dir": d}
    finally:
        mp.undo()


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINES_CACHE_DIR", str(tmp_path / "cache"))


def verify(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli(["verify", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


# ------------------------------------------------------------------ rewriting bundles


def rewrite(src: Path, dst: Path, edit: Callable[[str, dict[str, str], Any, bytes], bytes | None]) -> None:
    """Copy a bundle record by record through ``edit(type, warc headers, http headers, body)``;
    warcio recomputes every length and digest, so the result is a valid WARC."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.warcwriter import WARCWriter

    drop = {"content-length", "warc-block-digest", "warc-payload-digest", "warc-type"}
    with open(src, "rb") as fh, open(dst, "wb") as out:
        writer = WARCWriter(out, gzip=True, warc_version="WARC/1.1")
        for rec in ArchiveIterator(fh):
            rtype = rec.rec_headers.get_header("WARC-Type")
            headers = {k: v for k, v in rec.rec_headers.headers if k.lower() not in drop}
            http = rec.http_headers if rtype in ("request", "response") else None
            body = rec.content_stream().read() if http is not None else rec.raw_stream.read()
            new = edit(rtype, headers, http, body)
            if new is None:
                continue
            if http is not None and rtype == "response":
                http.replace_header("Content-Length", str(len(new)))
            writer.write_record(writer.create_warc_record(
                headers.get("WARC-Target-URI", ""), rtype, payload=io.BytesIO(new), length=len(new),
                warc_content_type=headers.pop("Content-Type", ""), warc_headers_dict=headers, http_headers=http))


def edit_claim(src: Path, dst: Path, fn: Callable[[dict], None]) -> None:
    def edit(rtype, headers, http, body):
        if headers.get("WARC-Engines-Role") == "claim":
            doc = json.loads(body)
            fn(doc)
            return json.dumps(doc, ensure_ascii=False).encode()
        return body

    rewrite(src, dst, edit)


def claim_of(bundle: Path) -> dict:
    out: dict = {}

    def edit(rtype, headers, http, body):
        if headers.get("WARC-Engines-Role") == "claim":
            out.update(json.loads(body))
        return body

    rewrite(bundle, bundle.with_name("scratch.warc.gz"), edit)
    return out


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
    assert code == 1 and "not empty" in err and len(err.strip().splitlines()) == 1


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
