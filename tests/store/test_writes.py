"""store.writes: the bulk answer path writes exactly what add_answer writes, on both backends."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from store.models import Answer, Hit
from store.writes import AnswerRow, HitRow, add_answer, add_answers, ensure_config

HITS = [
    HitRow(rank=1, name="  _root_.Nat.«add_comm» ", raw={"score": 0.5, "row": 3, "text": "∀ n"}),
    HitRow(rank=2, name="Nat.add_comm", raw=None),
    HitRow(rank=3, name="Int.mul_comm", raw={"s": [1, 2]}, resolution="not_in_corpus"),
]


def _config(db, key: str) -> int:
    with db.session() as s, s.begin():
        cfg = ensure_config(s, engine="t", endpoint_version="1", params={}, config_hash=key)
        s.flush()
        return cfg.id


def _dump(db, config_id: int) -> list[tuple]:
    with db.session() as s:
        answers = s.execute(
            sa.select(Answer.query_text, Answer.query_sha256, Answer.epoch, Answer.n_returned, Answer.latency_ms,
                      Answer.meta, Answer.superseded, Answer.dropped_items, Answer.id)
            .where(Answer.config_id == config_id).order_by(Answer.id)
        ).all()
        out = []
        for *fields, answer_id in answers:
            hits = s.execute(
                sa.select(Hit.rank, Hit.name, Hit.normalized_name, Hit.raw, Hit.resolution)
                .where(Hit.answer_id == answer_id).order_by(Hit.rank)
            ).all()
            out.append((tuple(fields), [tuple(h) for h in hits]))
        return out


def test_add_answers_matches_add_answer_row_for_row(any_db) -> None:
    a, b = _config(any_db, "one"), _config(any_db, "bulk")
    specs = [("q1", "1" * 64, HITS, 12.5, {"k": 1}, 2), ("q2", "2" * 64, [], None, None, 0),
             ("q3", "3" * 64, HITS[:1], 1.0, None, 0)]
    with any_db.session() as s, s.begin():
        for text, sha, hits, lat, meta, dropped in specs:
            add_answer(s, config_id=a, query_text=text, query_sha256=sha, hits=hits, latency_ms=lat, meta=meta,
                       dropped_items=dropped)
    with any_db.session() as s, s.begin():
        ids = add_answers(s, [AnswerRow(config_id=b, query_text=t, query_sha256=h, hits=hs, latency_ms=lat,
                                        meta=meta, dropped_items=d) for t, h, hs, lat, meta, d in specs])
    assert len(ids) == 3 and ids == sorted(ids)
    one, bulk = _dump(any_db, a), _dump(any_db, b)
    assert one == bulk
    assert one[0][0][-1] == 2  # dropped_items stored
    assert one[0][1][0] == (1, "  _root_.Nat.«add_comm» ", "Nat.add_comm", {"score": 0.5, "row": 3, "text": "∀ n"},
                            None)
    assert [len(h) for _, h in bulk] == [3, 0, 1]
    assert add_answers(any_db.session(), []) == []


def test_add_answers_is_all_or_nothing_on_a_duplicate_current_answer(any_db) -> None:
    c = _config(any_db, "dup")
    with any_db.session() as s, s.begin():
        add_answers(s, [AnswerRow(config_id=c, query_text="q", query_sha256="a" * 64, hits=HITS)])
    with pytest.raises(IntegrityError):
        with any_db.session() as s, s.begin():
            add_answers(s, [AnswerRow(config_id=c, query_text="r", query_sha256="b" * 64, hits=HITS),
                            AnswerRow(config_id=c, query_text="q", query_sha256="a" * 64, hits=HITS)])
    assert [f[0] for f, _ in _dump(any_db, c)] == ["q"]
    with any_db.session() as s:
        assert s.execute(sa.select(sa.func.count()).select_from(Hit)).scalar_one() == 3


def test_hit_text_that_copy_must_escape_reads_back_exactly(any_db) -> None:
    """PostgreSQL writes hits with COPY (text format): tabs, newlines, backslashes and a
    literal ``\\N`` in names and raw JSON must come back as written, and None as NULL."""
    nasty = ["Foo\tBar", "line\nbreak", "back\\slash", "\\N", "", "ünï «x» ∀", "carriage\rreturn"]
    hits = [HitRow(rank=i + 1, name=name, raw={"t": name, "k": ["\\N", None]} if i % 2 else None,
                   resolution=None if i % 3 else "not_in_corpus")
            for i, name in enumerate(nasty)]
    cfg = _config(any_db, "nasty")
    with any_db.session() as s, s.begin():
        add_answers(s, [AnswerRow(config_id=cfg, query_text="q", query_sha256="9" * 64, hits=hits)])
    (_fields, got), = _dump(any_db, cfg)
    assert [(r, n, raw, res) for r, n, _norm, raw, res in got] == [
        (h.rank, h.name, h.raw, h.resolution) for h in hits]
