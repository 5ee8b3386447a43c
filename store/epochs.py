"""Epochs of a configuration: labels, start dates, and naming an epoch on the command line.

An epoch is a full pass of a configuration over its query texts (``--refresh`` opens
the next one; :func:`current_epoch` is the highest seen). The ``epochs`` table
adds a label (``--epoch-label 2026-12``) and the time of its first send. Epochs that
have no row (crawled before the table existed, written by local engines, imported
from a bundle without one) still get a start and a label, derived from their
exchanges or answers: the label defaults to the date (UTC) of the first send.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Sequence

import sqlalchemy as sa

from store.errors import InputError
from store.models import Answer, Epoch, Exchange, WorkLease


def current_epoch(db, config_id: int) -> int:
    """The highest epoch seen in the configuration's answers, exchanges, leases or epochs (0 when new)."""
    with db.session() as s:
        values = [
            s.scalar(sa.select(sa.func.max(Answer.epoch)).where(Answer.config_id == config_id)),
            s.scalar(sa.select(sa.func.max(Exchange.epoch)).where(Exchange.config_id == config_id)),
            s.scalar(sa.select(sa.func.max(WorkLease.epoch)).where(WorkLease.config_id == config_id)),
            # An epoch opened (--refresh) by a run that stopped before its first lease.
            s.scalar(sa.select(sa.func.max(Epoch.epoch)).where(Epoch.config_id == config_id)),
        ]
    return max((v for v in values if v is not None), default=0)


@dataclass(frozen=True)
class EpochInfo:
    config_id: int
    epoch: int
    label: str
    started_at: dt.datetime | None


def _insert(dialect: str):
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


def open_epoch(db, config_id: int, epoch: int, label: str | None = None) -> str | None:
    """Record an epoch when it is opened (or first used); a label fills an empty one.

    Returns the label the epoch already carries when it differs from ``label`` (kept: a
    published epoch is not renamed by a later run), else None.
    """
    with db.session() as s, s.begin():
        s.execute(_insert(db.dialect)(Epoch).values(config_id=config_id, epoch=epoch, label=label)
                  .on_conflict_do_nothing())
        row = s.get(Epoch, (config_id, epoch))
        if label and row.label is None:
            row.label = label
        elif label and row.label != label:
            return row.label
    return None


def _first_send(session, config_id: int, epoch: int) -> dt.datetime | None:
    t = session.scalar(sa.select(sa.func.min(Exchange.sent_at)).where(Exchange.config_id == config_id,
                                                                       Exchange.epoch == epoch))
    if t is None:
        t = session.scalar(sa.select(sa.func.min(Answer.fetched_at)).where(Answer.config_id == config_id,
                                                                          Answer.epoch == epoch))
    return t


def settle_epoch(db, config_id: int, epoch: int) -> None:
    """After a run: the start is the first send, the default label its date."""
    with db.session() as s, s.begin():
        row = s.get(Epoch, (config_id, epoch))
        if row is None or (row.started_at is not None and row.label is not None):
            return
        first = row.started_at or _first_send(s, config_id, epoch)
        if first is None:
            return  # nothing sent yet: the next run settles it
        row.started_at = first
        if row.label is None:
            row.label = f"{first:%Y-%m-%d}"


def epochs_of(session, config_id: int) -> list[EpochInfo]:
    """Every epoch of a configuration (rows and epochs seen in answers or exchanges), oldest first."""
    rows = {e.epoch: e for e in session.execute(sa.select(Epoch).where(Epoch.config_id == config_id)).scalars()}
    seen = set(rows)
    seen.update(session.execute(sa.select(Answer.epoch).where(Answer.config_id == config_id).distinct()).scalars())
    seen.update(session.execute(sa.select(Exchange.epoch).where(Exchange.config_id == config_id).distinct()).scalars())
    out = []
    for n in sorted(seen):
        row = rows.get(n)
        started = row.started_at if row is not None and row.started_at else _first_send(session, config_id, n)
        label = row.label if row is not None and row.label else (f"{started:%Y-%m-%d}" if started else f"e{n}")
        out.append(EpochInfo(config_id, n, label, started))
    return out


def pick_epoch(infos: Sequence[EpochInfo], spec: str | int, what: str) -> EpochInfo:
    """An epoch by number or label; a clear error listing the epochs otherwise."""
    text = str(spec).strip()
    for e in infos:
        if text == str(e.epoch) or text == e.label:
            return e
    known = ", ".join(f"{e.epoch} ({e.label})" for e in infos) or "none"
    raise InputError(f"{what}: no epoch {text!r} (epochs: {known}); give an epoch number or label")


def is_older_than(db, config_id: int, epoch: int, seconds: float, now: dt.datetime | None = None) -> bool:
    """True when the epoch's first send is more than ``seconds`` ago (False if nothing was sent)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    with db.session() as s:
        row = s.get(Epoch, (config_id, epoch))
        started = row.started_at if row is not None and row.started_at else _first_send(s, config_id, epoch)
    return started is not None and (now - started).total_seconds() > seconds
