"""Heal answers that lost their hits: the archive-first promise is that hits are derivable.

An earlier upgrade of a SQLite archive (migration 0003 rebuilding ``answers`` with foreign
keys on) deleted every hit through ``hits.answer_id``'s ``ON DELETE CASCADE`` and left the
answers in place: answered, with ``n_returned`` hits and none stored. Such an answer of a
crawled configuration is re-derived from the body it was parsed from (the exchange is
archived): it is re-parsed with today's parser through the one re-parse path
(:func:`archive.reparse.reparse`), the hit-less answer is kept as superseded history and the
new answer takes its place, with the time the bytes were fetched. An answer of a local run
(BM25, dense) or an imported run file has no archived body: it is marked superseded, so the
text is due again and ``engines run bm25`` / ``run dense`` / ``run import`` answers it anew.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from archive.reparse import reparse
from store.models import Answer, EngineConfig, Hit, Position


@dataclass
class HealSummary:
    rederived: dict[str, int] = field(default_factory=dict)  # configuration label -> answers re-derived
    not_derivable: dict[str, int] = field(default_factory=dict)  # label -> answers due again (no body)
    failed: dict[str, str] = field(default_factory=dict)  # label -> why its exchanges could not be re-parsed

    @property
    def total(self) -> int:
        return sum(self.rederived.values()) + sum(self.not_derivable.values())

    def lines(self) -> list[str]:
        out = []
        if self.rederived:
            n = sum(self.rederived.values())
            out.append(f"re-derived the hits of {n} answers from their archived bodies (an earlier upgrade had "
                       f"lost them): " + ", ".join(f"{k} {v}" for k, v in self.rederived.items()))
        if self.not_derivable:
            n = sum(self.not_derivable.values())
            out.append(f"{n} answers of local or imported runs had lost their hits and have no archived body: "
                       "they are due again (" + ", ".join(f"{k} {v}" for k, v in self.not_derivable.items())
                       + "); run those rows again (engines run bm25 / run dense / run import)")
        for label, why in self.failed.items():
            out.append(f"{label}: answers without hits could not be re-derived ({why})")
        return out


def _hitless(s) -> list[tuple[int, int, int | None, str, bool]]:
    """(answer id, config id, exchange id, label, local) of current answers with hits counted but none stored."""
    has_hits = sa.exists().where(Hit.answer_id == Answer.id)
    return [tuple(r) for r in s.execute(
        sa.select(Answer.id, Answer.config_id, Answer.exchange_id, EngineConfig.label, EngineConfig.local)
        .join(EngineConfig, EngineConfig.id == Answer.config_id)
        .where(~Answer.superseded, Answer.n_returned > 0, ~has_hits).order_by(Answer.id))]


def count_lost_hits(db) -> int:
    """How many current answers count hits but hold none (cheap enough to ask after an upgrade)."""
    with db.session() as s:
        has_hits = sa.exists().where(Hit.answer_id == Answer.id)
        return s.scalar(sa.select(sa.func.count()).select_from(Answer).where(
            ~Answer.superseded, Answer.n_returned > 0, ~has_hits)) or 0


def heal_lost_hits(db) -> HealSummary:
    """Re-derive the hits of every current answer that lost them (see the module docstring)."""
    summary = HealSummary()
    with db.session() as s:
        rows = _hitless(s)
    if not rows:
        return summary
    remote: dict[int, list[int]] = {}
    labels: dict[int, str] = {}
    local: list[tuple[int, int, str]] = []
    for aid, cid, ex_id, label, is_local in rows:
        labels[cid] = label
        if ex_id is not None and not is_local:
            remote.setdefault(cid, []).append(ex_id)
        else:
            local.append((aid, cid, label))
    if remote:
        done = reparse(db, only={cid: sorted(set(ids)) for cid, ids in remote.items()})
        for r in done.results:
            if r.skipped:
                summary.failed[r.label] = r.skipped
            elif r.changed or r.answered:
                summary.rederived[r.label] = r.changed + r.answered
    if local:
        with db.session() as s, s.begin():
            ids = [aid for aid, _, _ in local]
            for i in range(0, len(ids), 500):
                s.execute(sa.update(Answer).where(Answer.id.in_(ids[i:i + 500])).values(superseded=True))
            for cid in sorted({cid for _, cid, _ in local}):
                s.execute(sa.delete(Position).where(Position.config_id == cid))
        for _, _, label in local:
            summary.not_derivable[label] = summary.not_derivable.get(label, 0) + 1
    return summary
