"""Bundles are deterministic and hold what their claim scores (issue 34, items 10 and 11).

- ``engines publish`` twice on the same database with the same options writes the same
  bytes: record ids derived from the content, every date from the data (an exchange's send
  time; the claim's ``generated_at``, the warcinfo's ``created:`` and the other records'
  ``WARC-Date`` from the newest scored answer), gzip members with mtime 0.
- ``engines demo`` run again in the same directory sends nothing and prints the same sha256.
- A demo cut to fewer targets in a directory holding a bigger demo publishes its own
  targets' exchanges and run lists only, not every exchange of the stand-ins' epoch.

The demos run in-process on 2–3 MathlibQR targets without the dense row.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from cli.main import app
from store.db import open_database
from store.models import Answer, Exchange


def _demo(out: Path, targets: int):
    from pipelines.demo import run_demo

    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("ENGINES_")}
    try:
        result = run_demo(out, dense=False, targets=targets, say=lambda _m: None)
    finally:
        os.environ.update(saved)
    assert result.bundle_sha256, [s for s in result.steps if not s.ok]
    return result


def _records(path: Path) -> list[tuple[dict[str, str], bytes]]:
    from warcio.archiveiterator import ArchiveIterator

    out = []
    with open(path, "rb") as fh:
        for rec in ArchiveIterator(fh):
            out.append((dict(rec.rec_headers.headers), rec.content_stream().read()))
    return out


def _gzip_mtimes(path: Path) -> set[int]:
    """The MTIME field of every gzip member's header."""
    data, mtimes, pos = path.read_bytes(), set(), 0
    import zlib

    while pos < len(data):
        assert data[pos:pos + 2] == b"\x1f\x8b"
        mtimes.add(int.from_bytes(data[pos + 4:pos + 8], "little"))
        d = zlib.decompressobj(zlib.MAX_WBITS + 16)
        d.decompress(data[pos:])
        pos = len(data) - len(d.unused_data)
    return mtimes


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("deterministic")
    return out, _demo(out, 2)


def test_demo_run_again_prints_the_same_sha256(demo):
    out, first = demo
    again = _demo(out, 2)
    assert again.bundle_sha256 == first.bundle_sha256
    assert hashlib.sha256((out / "leaderboard.warc.gz").read_bytes()).hexdigest() == first.bundle_sha256


def test_publish_twice_writes_the_same_bytes(demo, tmp_path):
    out, _ = demo
    url = f"sqlite:///{out / 'cache.db'}"
    bundle = tmp_path / "board.warc.gz"
    shas = []
    for _ in range(2):
        res = CliRunner().invoke(app, ["--db", url, "publish", "--bench", "mathlibqr", "--subset", "demo-first-2",
                                       "--compare", "leansearch (stand-in)", "bm25", "--out", str(bundle)])
        assert res.exit_code == 0, res.output
        shas.append(hashlib.sha256(bundle.read_bytes()).hexdigest())
    assert shas[0] == shas[1]
    assert shas[0] in res.output
    assert _gzip_mtimes(bundle) == {0}

    db = open_database(url)
    try:
        with db.session() as s:
            newest = s.scalar(sa.select(sa.func.max(Answer.fetched_at)))
    finally:
        db.dispose()
    records = _records(bundle)
    ids = [h["WARC-Record-ID"] for h, _ in records]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"<urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}>", i)
               for i in ids), ids[:3]  # derived (version 8), not random (version 4)
    from archive.bundle import warc_date

    data_date = warc_date(newest)
    info_headers, info = records[0]
    assert info_headers["WARC-Date"] == data_date
    assert f"created: {data_date}".encode() in info
    claim = next(body for h, body in records if h.get("WARC-Engines-Role") == "claim")
    assert json.loads(claim)["generated_at"] == newest.isoformat(timespec="seconds")
    for h, _ in records:
        if h["WARC-Type"] in ("resource", "warcinfo"):
            assert h["WARC-Date"] == data_date, h
        else:  # an exchange's record: when its request was sent
            assert h["WARC-Date"] <= data_date


def test_export_gives_exchanges_the_same_record_ids(demo, tmp_path):
    out, _ = demo
    url = f"sqlite:///{out / 'cache.db'}"
    ids = []
    for name in ("a.warc.gz", "b.warc.gz"):
        res = CliRunner().invoke(app, ["--db", url, "export", "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        ids.append([h["WARC-Record-ID"] for h, _ in _records(tmp_path / name) if h["WARC-Type"] != "warcinfo"])
    assert ids[0] == ids[1] and len(set(ids[0])) == len(ids[0])


def test_a_cut_demo_publishes_only_what_it_scores(tmp_path):
    """Issue 34 item 11: a 2-target demo in a directory that holds a 3-target demo publishes
    the 2 targets' exchanges and run lists (before: every exchange of the stand-ins' epoch)."""
    _demo(tmp_path, 3)
    small = _demo(tmp_path, 2)
    claim = small.score_json
    scored_texts = {q["text"] for q in claim["queries"]}
    db = open_database(f"sqlite:///{tmp_path / 'cache.db'}")
    try:
        with db.session() as s:
            all_exchanges = s.scalar(sa.select(sa.func.count(Exchange.id)))
            texts = s.execute(sa.select(Exchange.query_texts)).scalars().all()
    finally:
        db.dispose()
    mine = sum(1 for t in texts if set(t) & scored_texts)
    assert 0 < mine < all_exchanges
    records = _records(small.bundle)
    requests = [h for h, _ in records if h["WARC-Type"] == "request"]
    assert len(requests) == mine
    for h in requests:
        assert set(json.loads(h["WARC-Engines-Query-Texts"])) & scored_texts
    runs = [body for h, body in records if h.get("WARC-Engines-Role") == "run"]
    assert runs
    for body in runs:  # one line per scored text the run answered, no more
        assert 0 < len([line for line in body.splitlines() if line.strip()]) <= len(scored_texts)
    # It still verifies: the claim needs nothing more than what the bundle holds.
    res = CliRunner().invoke(app, ["verify", str(small.bundle)])
    assert res.exit_code == 0, res.output
