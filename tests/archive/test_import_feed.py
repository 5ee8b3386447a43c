"""Import parses exchanges as it inserts them (archive.bundle.parse.Feed); the answers are the
ones parsing them afterwards, in id order, gives: fetch once, the first exchange's answer stays."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import sqlalchemy as sa

from archive.bundle import export_bundle, import_bundle
from engines.base import config_hash
from engines.registry import get_adapter
from store.db import open_database
from store.models import Answer, Exchange, Hit, ParseOutcome
from store.writes import ensure_config

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def _config(db) -> int:
    adapter = get_adapter("leansearch", base_url="http://127.0.0.1:9")
    ident = adapter.identity()
    with db.session() as s, s.begin():
        return ensure_config(s, engine="leansearch", endpoint_version=adapter.endpoint_version, params=ident,
                             config_hash=config_hash(ident), label="leansearch (feed)", result_cap=50).id


def _exchange(cid: int, i: int, text: str, name: str, *, status: int | None = 200) -> dict:
    req = json.dumps({"query": [text], "num_results": 50}).encode()
    body = json.dumps([[{"result": {"name": name.split(".")}, "distance": 0.1}]]).encode()
    return dict(crawl_id=None, config_id=cid, attempt=1, epoch=0, query_texts=[text], request_fingerprint=f"{i:064x}",
                method="POST", url="http://127.0.0.1:9/search",
                request_headers={"host": "127.0.0.1:9", "content-type": "application/json"}, request_body=req,
                status_code=status, response_headers=None if status is None else {"content-type": "application/json"},
                response_body=None if status is None else body,
                transport_error="ConnectError: refused" if status is None else None,
                sent_at=T0 + dt.timedelta(seconds=i), finished_at=T0 + dt.timedelta(seconds=i, milliseconds=40),
                elapsed_ms=40.0)


def _answers(db) -> list[tuple]:
    with db.session() as s:
        return [tuple(r) for r in s.execute(
            sa.select(Answer.query_text, Answer.exchange_id, Hit.name).join(Hit, Hit.answer_id == Answer.id)
            .where(~Answer.superseded).order_by(Answer.query_text))]


def _bundle(tmp_path: Path) -> Path:
    """Three exchanges for "a" (two answers, one transport error), one for "b"."""
    src = open_database(f"sqlite:///{tmp_path / 'src.db'}")
    cid = _config(src)
    with src.session() as s, s.begin():
        s.execute(sa.insert(Exchange), [_exchange(cid, 10, "a", "First.a"), _exchange(cid, 11, "a", "x", status=None),
                                        _exchange(cid, 12, "a", "Second.a"), _exchange(cid, 13, "b", "Only.b")])
    path = tmp_path / "b.warc.gz"
    export_bundle(src, path)
    src.dispose()
    return path


def test_imported_exchanges_are_parsed_in_order(tmp_path: Path) -> None:
    path = _bundle(tmp_path)
    db = open_database(f"sqlite:///{tmp_path / 'dst.db'}")
    s = import_bundle(db, path)
    assert (s.added, s.answers, s.parse_failures) == (4, 2, 0)
    ids = {}
    with db.session() as se:
        for ex_id, sent in se.execute(sa.select(Exchange.id, Exchange.sent_at)):
            ids[round((sent - T0).total_seconds())] = ex_id
        assert se.scalar(sa.select(sa.func.count()).select_from(ParseOutcome)) == 3  # the 2xx exchanges, once each
    assert _answers(db) == [("a", ids[10], "First.a"), ("b", ids[13], "Only.b")]
    assert import_bundle(db, path).added == 0
    db.dispose()


def test_an_older_unparsed_exchange_answers_first(tmp_path: Path) -> None:
    """An exchange stored before the import and never parsed comes first (it has the lower id):
    its answer stays, not the imported one's."""
    path = _bundle(tmp_path)
    db = open_database(f"sqlite:///{tmp_path / 'dst.db'}")
    cid = _config(db)
    with db.session() as s, s.begin():
        older = s.execute(sa.insert(Exchange).returning(Exchange.id), [_exchange(cid, 1, "a", "Older.a")]).scalar_one()
    s = import_bundle(db, path)
    assert (s.added, s.answers) == (4, 2)
    assert [(t, ex == older, name) for t, ex, name in _answers(db)] == [("a", True, "Older.a"), ("b", False, "Only.b")]
    db.dispose()
