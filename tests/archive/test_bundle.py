"""WARC bundles: engines export / engines import on a real two-epoch crawl (with transport
errors and 5xx), standard tools reading our bundle, secrets kept out, refusal of damaged
bundles, idempotent import, and a WARC written by another tool."""

from __future__ import annotations

import gzip
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from cli.main import app
from scoring.drift import drift
from scoring.results import score
from archive.bundle import export_bundle, import_bundle
from store.db import open_database
from store.models import Answer, Crawl, EngineConfig, Epoch, Exchange
from tests.support.epochs import SECRET_FORMS, load_mpr_and_slice, two_epochs  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def bundle(two_epochs, tmp_path_factory) -> Path:  # noqa: F811
    d = tmp_path_factory.mktemp("bundle")
    db = open_database(two_epochs.copy(d / "src.db"))
    try:
        out = d / "archive.warc.gz"
        s = export_bundle(db, out)
        with db.session() as sess:
            assert s.exchanges == sess.scalar(sa.select(sa.func.count()).select_from(Exchange))
            assert s.transport_errors == sess.scalar(
                sa.select(sa.func.count()).select_from(Exchange).where(Exchange.transport_error.is_not(None))) > 0
    finally:
        db.dispose()
    return out


def _exchanges(db) -> list[tuple]:
    with db.session() as s:
        rows = s.execute(sa.select(
            EngineConfig.config_hash, Exchange.epoch, Exchange.attempt, Exchange.sent_at, Exchange.finished_at,
            Exchange.elapsed_ms, Exchange.method, Exchange.url, Exchange.request_headers, Exchange.request_body,
            Exchange.status_code, Exchange.response_headers, Exchange.response_body, Exchange.transport_error,
            Exchange.query_texts, Exchange.request_fingerprint,
        ).join(EngineConfig, EngineConfig.id == Exchange.config_id).order_by(Exchange.sent_at)).all()
    return [tuple(json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v for v in r) for r in rows]


def _strip(doc: dict) -> tuple[dict, list]:
    """The score document without its timestamp, and the p95 latencies apart: the crawler
    stores an answer's latency unrounded but the exchange's elapsed time to 0.001 ms, and an
    import knows only the exchange."""
    doc = json.loads(json.dumps(doc))
    doc.pop("generated_at")
    lat = [s.pop("latency_p95_ms") for s in doc["systems"]]
    return doc, lat


def test_standard_tools_read_the_bundle_and_no_secret_is_in_it(bundle: Path) -> None:
    check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", "-v", str(bundle)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "digest pass" in check.stdout and "fail" not in check.stdout
    index = subprocess.run([sys.executable, "-m", "warcio.cli", "index", str(bundle)],
                           capture_output=True, text=True, check=True)
    types = [json.loads(line)["warc-type"] for line in index.stdout.splitlines()]
    assert types[0] == "warcinfo"
    assert types.count("request") == types.count("response") + types.count("metadata") > 100
    raw = gzip.decompress(bundle.read_bytes())
    for secret in SECRET_FORMS:
        assert secret not in raw
    assert b"authorization: [redacted]" in raw
    assert b"WARC/1.1\r\n" in raw[:10] and b"WARC-Engines-Config: " in raw
    assert b'epoch: {"config_hash"' in raw and b'"label": "2026-12"' in raw


def test_import_round_trip_scores_and_drift_equal(bundle: Path, two_epochs, tmp_path: Path, any_db_url: str) -> None:  # noqa: F811
    src = open_database(two_epochs.copy(tmp_path / "src.db"))
    load_mpr_and_slice(any_db_url)
    dst = open_database(any_db_url)
    try:
        s1 = import_bundle(dst, bundle)
        assert s1.added == len(_exchanges(src)) and s1.duplicates == 0
        assert _exchanges(dst) == _exchanges(src)  # every field, original send times and epochs
        with dst.session() as s:
            assert {(e.epoch, e.label) for e in s.execute(sa.select(Epoch)).scalars()} == {(0, "2026-11"), (1, "2026-12")}
            n_answers = s.scalar(sa.select(sa.func.count()).select_from(Answer))
        with src.session() as s:
            assert n_answers == s.scalar(sa.select(sa.func.count()).select_from(Answer))
        a = score(src, "mathlibmpr", epochs="all").to_json()
        b = score(dst, "mathlibmpr", epochs="all").to_json()
        (a, lat_a), (b, lat_b) = _strip(a), _strip(b)
        assert a == b and len(a["systems"]) == 2
        assert lat_b == pytest.approx(lat_a, abs=1e-3)
        assert drift(src, "leansearch", "mathlibmpr") == drift(dst, "leansearch", "mathlibmpr")
        # Twice: nothing added.
        s2 = import_bundle(dst, bundle)
        assert s2.added == 0 and s2.duplicates == s1.added and s2.answers == 0
        assert len(_exchanges(dst)) == s1.added
    finally:
        src.dispose()
        dst.dispose()


def _counts(url: str) -> tuple[int, int, int]:
    db = open_database(url)
    try:
        with db.session() as s:
            return tuple(s.scalar(sa.select(sa.func.count()).select_from(m)) for m in (Exchange, Answer, Crawl))
    finally:
        db.dispose()


def test_damaged_bundles_are_refused_whole(bundle: Path, tmp_path: Path, any_db_url: str) -> None:
    runner = CliRunner()
    raw = gzip.decompress(bundle.read_bytes())
    # Tampered: one name in a response body changed, same length, digests left as they were.
    i = raw.index(b'"name": ["', raw.index(b"WARC-Type: response"))
    tampered = raw[: i + 10] + (b"X" if raw[i + 10:i + 11] != b"X" else b"Y") + raw[i + 11:]
    bad = tmp_path / "tampered.warc"
    bad.write_bytes(tampered)
    res = runner.invoke(app, ["--db", any_db_url, "import", str(bad)])
    assert res.exit_code == 1
    line = res.output.strip().splitlines()[-1]
    assert line.startswith(f"error: {bad}: record ") and "response <urn:uuid:" in line
    assert "failed its digest check" in line and "nothing was imported" in line
    assert _counts(any_db_url) == (0, 0, 0)
    # Truncated: the last 40 % of the file cut off.
    data = bundle.read_bytes()
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    res = runner.invoke(app, ["--db", any_db_url, "import", str(cut)])
    assert res.exit_code == 1
    line = res.output.strip().splitlines()[-1]
    assert line.startswith(f"error: {cut}: record ") and "truncated" in line and "nothing was imported" in line
    assert _counts(any_db_url) == (0, 0, 0)
    res = runner.invoke(app, ["--db", any_db_url, "import", str(tmp_path / "missing.warc.gz")])
    assert res.exit_code == 1 and "does not exist" in res.output
    for name, content in (("empty.warc.gz", b""), ("notes.warc", b"just some text\n")):
        (tmp_path / name).write_bytes(content)
        res = runner.invoke(app, ["--db", any_db_url, "import", str(tmp_path / name)])
        assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1, res.output
        assert res.output.startswith(f"error: {tmp_path / name}: ") and "nothing was imported" in res.output
    assert _counts(any_db_url) == (0, 0, 0)


def test_export_selection_and_cli(two_epochs, tmp_path: Path) -> None:  # noqa: F811
    url = two_epochs.copy(tmp_path / "src.db")
    runner = CliRunner()
    out = tmp_path / "e1.warc.gz"
    res = runner.invoke(app, ["--db", url, "export", "--out", str(out), "--engine", "leansearch", "--epoch", "2026-12"])
    assert res.exit_code == 0, res.output
    db = open_database(url)
    try:
        with db.session() as s:
            n1 = s.scalar(sa.select(sa.func.count()).select_from(Exchange).where(Exchange.epoch == 1))
    finally:
        db.dispose()
    assert f"wrote {out}: {n1} exchanges" in res.output and re.search(r"\([0-9,]+ exchanges/s\)", res.output)
    # Import into an empty database: the summary reports its throughput (issue 13).
    res = runner.invoke(app, ["--db", f"sqlite:///{tmp_path / 'dst.db'}", "import", str(out)])
    assert res.exit_code == 0, res.output
    assert f"imported {out}: {n1:,} new exchanges" in res.output
    assert re.search(r"[0-9,]+ exchanges/s verified and stored, [0-9,]+ answers/s parsed", res.output), res.output
    res = runner.invoke(app, ["--db", url, "export", "--out", str(tmp_path / "x.zip")])
    assert res.exit_code == 1 and "error: --out" in res.output
    res = runner.invoke(app, ["--db", url, "export", "--out", str(out), "--engine", "loogle"])
    assert res.exit_code == 1 and "error: --engine 'loogle'" in res.output


def test_a_warc_from_another_tool_imports(two_epochs, tmp_path: Path, any_db_url: str) -> None:  # noqa: F811
    """Written directly with warcio, as a capture proxy would: response first, then its request."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    src = open_database(two_epochs.copy(tmp_path / "src.db"))
    try:
        with src.session() as s:
            ex = s.execute(sa.select(Exchange).where(Exchange.status_code == 200).order_by(Exchange.id).limit(1)).scalar_one()
            text = ex.query_texts[0]
    finally:
        src.dispose()
    body = json.dumps({"query": [text], "num_results": 50}).encode()
    path = tmp_path / "other.warc.gz"
    with open(path, "wb") as fh:
        w = WARCWriter(fh, gzip=True)
        url = "https://leansearch.net/search"
        resp = w.create_warc_record(url, "response", payload=io.BytesIO(ex.response_body), length=len(ex.response_body),
                                    http_headers=StatusAndHeaders("200 OK", [("Content-Type", "application/json")],
                                                                  protocol="HTTP/1.1"))
        req = w.create_warc_record(url, "request", payload=io.BytesIO(body), length=len(body),
                                   http_headers=StatusAndHeaders("POST /search HTTP/1.1",
                                                                 [("Content-Type", "application/json")],
                                                                 is_http_request=True),
                                   warc_headers_dict={"WARC-Concurrent-To": resp.rec_headers.get_header("WARC-Record-ID")})
        w.write_record(resp)
        w.write_record(req)
        other = w.create_warc_record("https://example.org/", "resource", payload=io.BytesIO(b"hello"), length=5)
        w.write_record(other)
    load_mpr_and_slice(any_db_url)
    dst = open_database(any_db_url)
    try:
        summary = import_bundle(dst, path)
        assert summary.added == 1 and summary.foreign == 1 and summary.answers == 1
        with dst.session() as s:
            cfg = s.execute(sa.select(EngineConfig)).scalar_one()
            assert cfg.engine == "leansearch" and "base_url" not in cfg.params  # the public service
            got = s.execute(sa.select(Exchange)).scalar_one()
            assert got.query_texts == [text] and got.epoch == 0 and got.status_code == 200
            answer = s.execute(sa.select(Answer)).scalar_one()
            assert answer.n_returned == len(json.loads(ex.response_body)[0])
    finally:
        dst.dispose()


def test_an_outage_body_in_an_imported_warc_is_a_failed_parse_not_a_crash(tmp_path: Path, sqlite_url: str) -> None:
    """Loogle's "Restarting" at 200 is an outage (the crawler records "outage: ..."): an import
    records the same parse outcome and goes on with the other exchanges."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    from store.models import ParseOutcome

    path = tmp_path / "loogle.warc.gz"
    bodies = [b'{"error": "Restarting: Loogle is being updated"}',
              json.dumps({"count": 1, "hits": [{"name": "Nat.add_comm", "type": "x", "module": "M", "doc": None}],
                          "header": ""}).encode()]
    with open(path, "wb") as fh:
        w = WARCWriter(fh, gzip=True)
        for i, payload in enumerate(bodies):
            url = f"https://loogle.lean-lang.org/json?q=Nat.add_comm{i}"
            resp = w.create_warc_record(url, "response", payload=io.BytesIO(payload), length=len(payload),
                                        http_headers=StatusAndHeaders("200 OK", [("Content-Type", "application/json")],
                                                                      protocol="HTTP/1.1"))
            req = w.create_warc_record(url, "request", payload=io.BytesIO(b""), length=0,
                                       http_headers=StatusAndHeaders(f"GET /json?q=Nat.add_comm{i} HTTP/1.1", [],
                                                                     is_http_request=True),
                                       warc_headers_dict={"WARC-Concurrent-To": resp.rec_headers.get_header("WARC-Record-ID")})
            w.write_record(resp)
            w.write_record(req)
    load_mpr_and_slice(sqlite_url)
    dst = open_database(sqlite_url)
    try:
        summary = import_bundle(dst, path)
        assert summary.added == 2 and summary.parse_failures == 1 and summary.answers == 1
        with dst.session() as s:
            outcomes = {o.ok: o.error for o in s.execute(sa.select(ParseOutcome)).scalars()}
        assert outcomes[True] is None and outcomes[False].startswith("outage: ")
    finally:
        dst.dispose()


def test_a_foreign_leanstatesearch_request_yields_its_text(tmp_path: Path, sqlite_url: str) -> None:
    """Another tool's LeanStateSearch requests are read by that adapter's inverse: the goal
    `⊢ <statement>` gives back the statement, a proof state stays itself, `results` and `rev`
    make the configuration (before, they went through Loogle's reading and gave no text)."""
    from urllib.parse import urlencode

    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    from engines.base import config_hash
    from engines.registry import get_adapter

    answer = json.dumps([{"name": "Nat.add_comm", "formal_type": "a + b = b + a", "module": "M",
                          "rev": "v4.19.0"}]).encode()
    goals = [("∀ a b : ℕ, a + b = b + a", "⊢ ∀ a b : ℕ, a + b = b + a"),
             ("a b : ℕ\n⊢ a + b = b + a", "a b : ℕ\n⊢ a + b = b + a")]
    path = tmp_path / "lss.warc.gz"
    with open(path, "wb") as fh:
        w = WARCWriter(fh, gzip=True)
        for _, query in goals:
            target = "/api/search?" + urlencode({"query": query, "results": 20, "rev": "v4.19.0"})
            url = "https://premise-search.com" + target
            req = w.create_warc_record(url, "request", payload=io.BytesIO(b""), length=0,
                                       http_headers=StatusAndHeaders(f"GET {target} HTTP/1.1", [],
                                                                     is_http_request=True))
            resp = w.create_warc_record(url, "response", payload=io.BytesIO(answer), length=len(answer),
                                        http_headers=StatusAndHeaders("200 OK", [("Content-Type", "application/json")],
                                                                      protocol="HTTP/1.1"),
                                        warc_headers_dict={"WARC-Concurrent-To": req.rec_headers.get_header("WARC-Record-ID")})
            w.write_record(req)
            w.write_record(resp)
    load_mpr_and_slice(sqlite_url)
    dst = open_database(sqlite_url)
    try:
        summary = import_bundle(dst, path)
        assert summary.added == 2 and summary.foreign == 2 and summary.unpaired == 0 and summary.answers == 2
        with dst.session() as s:
            cfg = s.execute(sa.select(EngineConfig)).scalar_one()
            want = get_adapter("leanstatesearch", num_results=20, rev="v4.19.0").identity()
            assert cfg.engine == "leanstatesearch" and cfg.config_hash == config_hash(want)
            got = [e.query_texts for e in s.execute(sa.select(Exchange).order_by(Exchange.id)).scalars()]
            assert got == [[text] for text, _ in goals]
            assert sorted(a.query_text for a in s.execute(sa.select(Answer)).scalars()) == sorted(t for t, _ in goals)
    finally:
        dst.dispose()
