"""Hostile bundles (issue 21): every WARC here is built in the test with warcio's writer
(one gzip member per record). A decompression bomb, a lying identity, a repeated record id,
a bad header value: one line naming the record, a non-zero exit, nothing written; many
unpaired records: linear work; a body no parser can take: a failed parse outcome."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

import archive.bundle.records as bundle_mod
from engines.base import config_hash
from cli.main import app
from archive.bundle import H_ATTEMPT, H_EPOCH, H_TEXTS, import_bundle
from store.db import open_database
from store.models import Crawl, EngineConfig, Exchange, ParseOutcome
from tests.support.bundles import Bundle, LEANSEARCH, PUBLIC, _config

ANSWER = json.dumps([[{"result": {"name": ["Nat", "add_comm"], "kind": "theorem", "signature": "",
                                  "type": "a + b = b + a", "value": "", "docstring": None,
                                  "informal_name": "", "informal_description": "",
                                  "module_name": ["Mathlib"]}, "distance": 0.1}]]).encode()


def gzip_zeros(mib: int, crc: int | None = None) -> bytes:
    """A valid gzip stream of ``mib`` MiB of zero bytes, built in milliseconds: after a full
    flush, deflate emits the same bytes for every further MiB of zeros."""
    z = bytes(1 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush()
    if crc is None:
        crc = 0
        for _ in range(mib):
            crc = zlib.crc32(z, crc)
    return first + again * (mib - 1) + end[:-8] + struct.pack("<II", crc, (mib << 20) & 0xFFFFFFFF)


def _counts(url: str) -> tuple[int, int, int]:
    db = open_database(url)
    try:
        with db.session() as s:
            return tuple(s.scalar(sa.select(sa.func.count()).select_from(m)) for m in (Exchange, EngineConfig, Crawl))
    finally:
        db.dispose()


def _refused(url: str, path: Path, *words: str) -> str:
    res = CliRunner().invoke(app, ["--db", url, "import", str(path)])
    assert res.exit_code == 1, res.output
    out = res.output.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"error: {path}: "), res.output
    for w in words:
        assert w in out[0], out[0]
    assert "nothing was imported" in out[0] and "(a bug)" not in out[0]
    assert _counts(url) == (0, 0, 0)
    return out[0]


def _import_in_child(url: str, path: Path) -> tuple[int, list[str], int]:
    """``engines import`` in its own process: exit code, stderr lines, peak RSS in bytes."""
    # VmHWM, not getrusage's ru_maxrss: that one keeps the peak of the forked test process.
    code = ("import atexit, re, sys\n"
            "hwm = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
            "atexit.register(lambda: sys.stderr.write('MAXRSS %d\\n' % hwm()))\n"
            "from cli.main import app\n"
            f"sys.argv = ['engines', '--db', {url!r}, 'import', {str(path)!r}]\n"
            "app()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "ENGINES_NO_PROGRESS": "1"})
    lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("MAXRSS ")]
    rss = int(next(ln for ln in p.stderr.splitlines() if ln.startswith("MAXRSS ")).split()[1]) * 1024
    return p.returncode, lines, rss


def test_a_gzip_bomb_is_refused_in_one_line_with_bounded_memory(tmp_path: Path, sqlite_url: str) -> None:
    """9 KB on disk, 3.9 GiB once decoded (a gzip-encoded HTTP body inside a gzip member)."""
    bomb = gzip_zeros(3900, crc=0xEFEEFF56)  # crc32 of 3900 MiB of zeros, computed once with zlib.crc32
    b = Bundle(tmp_path / "bomb.warc.gz", [_config(LEANSEARCH)])
    b.pair(PUBLIC, ["x"], bomb, h=config_hash(LEANSEARCH), encoding="gzip")
    path = b.close()
    assert path.stat().st_size < 20_000
    code, lines, rss = _import_in_child(sqlite_url, path)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: {path}: record 3 (response ") and "decompression bomb" in lines[0]
    assert "32 MiB per record" in lines[0] and "nothing was imported" in lines[0]
    assert rss < 400 * 2**20, rss
    assert _counts(sqlite_url) == (0, 0, 0)


def test_the_total_decompressed_size_is_bounded(tmp_path: Path, sqlite_url: str, monkeypatch) -> None:
    """Records each under the per-record cap, together far over the total one."""
    monkeypatch.setattr(bundle_mod, "MIN_TOTAL_BYTES", 64 * 2**20)  # the floor scaled down, for speed
    from warcio.warcwriter import WARCWriter

    body = bytes(30 * 2**20)
    path = tmp_path / "many.warc.gz"
    with open(path, "wb") as fh:
        w = WARCWriter(fh, gzip=True)
        for i in range(4):
            w.write_record(w.create_warc_record(f"https://example.org/{i}", "resource", payload=io.BytesIO(body),
                                                length=len(body)))
    assert path.stat().st_size < 200_000
    _refused(sqlite_url, path, "record 3 (resource ", "decompression bomb", "100x the file size in total")


def test_pairing_is_linear_in_records(tmp_path: Path, sqlite_url: str, monkeypatch) -> None:
    """Unpaired requests of another tool: each record looks at a bounded number of others
    (reading every waiting record for each new one made 20,000 records take minutes)."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    n = 4000
    path = tmp_path / "unpaired.warc.gz"
    with open(path, "wb") as fh:
        w = WARCWriter(fh, gzip=True)
        for i in range(n):
            w.write_record(w.create_warc_record(
                "https://example.org/a", "request", payload=io.BytesIO(b""), length=0,
                http_headers=StatusAndHeaders("GET /a HTTP/1.1", [], is_http_request=True)))
    reads = [0]

    class Counted(bundle_mod.Record):
        def __getattribute__(self, name):
            if name in ("uri", "type"):
                reads[0] += 1
            return super().__getattribute__(name)

    monkeypatch.setattr(bundle_mod, "Record", Counted)
    db = open_database(sqlite_url)
    try:
        s = import_bundle(db, path)
    finally:
        db.dispose()
    assert s.records == n and s.unpaired == n and s.added == 0
    assert reads[0] < 20 * n, reads[0]  # quadratic pairing read them n²/2 = 8,000,000 times


def test_a_configuration_hash_is_recomputed(tmp_path: Path, any_db_url: str) -> None:
    cfg = _config(LEANSEARCH)
    cfg["params"] = {**LEANSEARCH, "num_results": 10}  # hash of 50 results, parameters of 10
    b = Bundle(tmp_path / "lie.warc.gz", [cfg])
    b.pair(PUBLIC, ["x"], ANSWER, h=cfg["config_hash"])
    _refused(any_db_url, b.close(), "does not match its parameters")


def test_a_stand_ins_answers_cannot_pass_as_the_public_service(tmp_path: Path, any_db_url: str) -> None:
    b = Bundle(tmp_path / "standin-as-public.warc.gz", [_config(LEANSEARCH)])
    b.pair("http://127.0.0.1:8765/search", ["x"], ANSWER, h=config_hash(LEANSEARCH))
    _refused(any_db_url, b.close(), "record 2 (request ", "targets 127.0.0.1:8765", "leansearch.net")
    # A stand-in configuration: loopback on any port imports, the public host does not.
    standin = {**LEANSEARCH, "stand_in": {"kind": "engines demo", "seed": 0}}
    b = Bundle(tmp_path / "standin.warc.gz", [_config(standin)])
    b.pair("https://leansearch.net/search", ["x"], ANSWER, h=config_hash(standin))
    _refused(any_db_url, b.close(), "targets leansearch.net", "a loopback address")
    b = Bundle(tmp_path / "standin-ok.warc.gz", [_config(standin)])
    b.pair("http://127.0.0.1:40123/search", ["x"], ANSWER, h=config_hash(standin))
    b.pair("http://localhost:40999/search", ["y"], ANSWER, h=config_hash(standin))
    db = open_database(any_db_url)
    try:
        s = import_bundle(db, b.close())
        assert s.added == 2 and s.answers == 2
    finally:
        db.dispose()


def test_a_repeated_record_id_is_refused(tmp_path: Path, any_db_url: str) -> None:
    """Two answers filed under one record id would pair TEXT-B with TEXT-A's answer."""
    h = config_hash(LEANSEARCH)
    b = Bundle(tmp_path / "dup.warc.gz", [_config(LEANSEARCH)])
    b.pair(PUBLIC, ["TEXT-A"], ANSWER, h=h, resp_rid="<urn:uuid:00000000-0000-0000-0000-00000000000a>")
    b.pair(PUBLIC, ["TEXT-B"], ANSWER, h=h, resp_rid="<urn:uuid:00000000-0000-0000-0000-00000000000a>")
    _refused(any_db_url, b.close(), "record 5 (response <urn:uuid:00000000-0000-0000-0000-00000000000a>",
             "repeats the WARC-Record-ID")


@pytest.mark.parametrize("header, value", [(H_EPOCH, "zero"), (H_ATTEMPT, "99999999999"),
                                           (H_TEXTS, '{"not": "a list"}'), ("WARC-Engines-Elapsed-Ms", "nan"),
                                           ("WARC-Engines-Finished-At", "yesterday")])
def test_a_bad_header_value_is_one_line_naming_the_record(tmp_path: Path, any_db_url: str, header: str,
                                                          value: str) -> None:
    h = config_hash(LEANSEARCH)
    b = Bundle(tmp_path / "bad-header.warc.gz", [_config(LEANSEARCH)])
    b.pair(PUBLIC, ["fine"], ANSWER, h=h)
    b.pair(PUBLIC, ["x"], ANSWER, h=h, headers={header: value})
    _refused(any_db_url, b.close(), "record 4 (request ", f"has a bad {header} value")


def test_a_bad_warcinfo_line_is_one_line(tmp_path: Path, sqlite_url: str) -> None:
    from warcio.warcwriter import WARCWriter

    path = tmp_path / "info.warc.gz"
    info = b"format: engines.bundle/1\r\nconfig: {not json\r\n"
    with open(path, "wb") as fh:
        w = WARCWriter(fh, gzip=True)
        w.write_record(w.create_warc_record("x", "warcinfo", payload=io.BytesIO(info), length=len(info),
                                            warc_content_type="application/warc-fields"))
    _refused(sqlite_url, path, "record 1 (warcinfo ", "bad 'config' line")


def test_a_body_no_parser_can_take_is_a_failed_parse_outcome(tmp_path: Path, any_db_url: str) -> None:
    """Nested 200,000 deep: the JSON parser's RecursionError is the exchange's failed parse."""
    h = config_hash(LEANSEARCH)
    b = Bundle(tmp_path / "deep.warc.gz", [_config(LEANSEARCH)])
    b.pair(PUBLIC, ["deep"], b"[" * 200_000 + b"]" * 200_000, h=h)
    b.pair(PUBLIC, ["fine"], ANSWER, h=h)
    res = CliRunner().invoke(app, ["--db", any_db_url, "import", str(b.close())])
    assert res.exit_code == 0, res.output
    assert "2 new exchanges" in res.output and "1 answers parsed, 1 parse failures" in res.output
    db = open_database(any_db_url)
    try:
        with db.session() as s:
            failed = s.execute(sa.select(ParseOutcome).where(ParseOutcome.ok.is_(False))).scalar_one()
        assert "RecursionError" in failed.error or "deep" in failed.error
    finally:
        db.dispose()
