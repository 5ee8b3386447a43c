"""``engines verify``, loading: the bundle's benchmark, subsets and run records into the
fresh database (:mod:`pipelines.verify`), and the bound on what the scorer is then asked to do
(systems, and systems × queries)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from archive.bundle import parse_warc_date
from pipelines.publish import read_run
from pipelines.verify_read import MAX_PAIRS, MAX_SYSTEMS, CannotVerify
from store.errors import InputError

RUN_BATCH = 2000  # answers of a run record written at a time (a run record holds up to 4M values)


def check_empty(db) -> None:
    from store.models import Answer, Benchmark, Corpus, EngineConfig, Exchange

    with db.session() as s:
        for table in (Benchmark, Corpus, EngineConfig, Exchange, Answer):
            if s.execute(sa.select(sa.func.count()).select_from(table)).scalar_one():
                raise InputError(f"--db {db.url}: the database is not empty "
                                 f"(table {table.__tablename__} has rows); verify needs an empty database (or none: "
                                 "it makes a temporary one)")


def load_benchmark(db, dump: Any) -> None:
    """The benchmark dump as rows: a few multi-row inserts (the ORM's unit of work took
    seconds for MathlibQR's 946 queries)."""
    from store.benchmarks import query_sha256
    from store.models import Benchmark, GoldName, GoldUnit, Query
    from store.types import utcnow

    try:
        queries = list(dump["queries"])
        with db.engine.begin() as conn:
            bt, qt, ut, nt = Benchmark.__table__, Query.__table__, GoldUnit.__table__, GoldName.__table__
            bench_id = conn.execute(sa.insert(bt).returning(bt.c.id), {
                "name": str(dump["name"]), "task": str(dump["task"]), "source_file": str(dump["source_file"]),
                "sha256": str(dump["sha256"]), "modified": bool(dump["modified"]), "meta": dump.get("meta"),
                "loaded_at": utcnow()}).scalar_one()
            if not queries:
                return
            qids = list(conn.execute(sa.insert(qt).returning(qt.c.id, sort_by_parameter_order=True), [
                {"benchmark_id": bench_id, "qid": str(q["qid"]), "target_id": str(q["target_id"]), "text": str(q["text"]),
                 "query_sha256": query_sha256(str(q["text"])), "style": str(q["style"]), "primary": bool(q["primary"]),
                 "kind": q.get("kind"), "difficulty": q.get("difficulty"), "meta": q.get("meta")}
                for q in queries]).scalars())
            units = [(qid, u) for qid, q in zip(qids, queries) for u in q["units"]]
            if not units:
                return
            uids = list(conn.execute(sa.insert(ut).returning(ut.c.id, sort_by_parameter_order=True), [
                {"query_id": qid, "ordinal": int(u["ordinal"]), "kind": str(u["kind"])} for qid, u in units]).scalars())
            names = [{"gold_unit_id": uid, "name": str(n)} for uid, (_, u) in zip(uids, units) for n in u["names"]]
            if names:
                conn.execute(sa.insert(nt), names)
    except (KeyError, TypeError, ValueError) as exc:
        raise CannotVerify(f"the bundle's benchmark record is malformed ({type(exc).__name__}: {str(exc)[:80]})") from None


def load_subsets(db, dump: Any) -> None:
    from store.models import Subset, SubsetMember

    try:
        with db.session() as s, s.begin():
            for d in dump:
                sub = Subset(name=str(d["name"]), member_kind=str(d["member_kind"]), source_file=str(d["source_file"]),
                             sha256=str(d["sha256"]), modified=bool(d["modified"]), meta=d.get("meta"))
                s.add(sub)
                s.flush()
                s.add_all(SubsetMember(subset_id=sub.id, member=str(m)) for m in dict.fromkeys(d["members"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CannotVerify(f"the bundle's subsets record is malformed ({type(exc).__name__}: {str(exc)[:80]})") from None


def load_runs(db, runs: list[tuple[dict[str, Any], bytes]], qid_text: dict[str, str]) -> int:
    from store.benchmarks import query_sha256
    from store.models import Epoch
    from store.writes import AnswerRow, HitRow, add_answers, ensure_config

    n = 0
    for ident, data in runs:
        try:
            h = str(ident["config_hash"])
            epoch = int(ident["epoch"])
            where = f"run record {h[:12]}@{epoch}"
            with db.session() as s, s.begin():
                cfg = ensure_config(s, engine=str(ident["engine"]), endpoint_version=str(ident["endpoint_version"]),
                                    params=ident["params"], config_hash=h, label=ident.get("label"),
                                    local=bool(ident.get("local", True)),
                                    result_cap=ident.get("result_cap"), licence=ident.get("licence"))
                s.flush()
                if ident.get("epoch_label") or ident.get("epoch_started"):
                    if s.get(Epoch, (cfg.id, epoch)) is None:
                        s.add(Epoch(config_id=cfg.id, epoch=epoch, label=ident.get("epoch_label"),
                                    started_at=parse_warc_date(ident["epoch_started"]) if ident.get("epoch_started") else None))
                rows = []
                for qid, ranked, dropped in read_run(data, where):
                    text = qid_text.get(qid)
                    if text is None:
                        raise CannotVerify(f"{where}: qid {qid!r} is not a query of the bundle's benchmark")
                    hits = [HitRow(rank=i + 1, name=nm) for i, nm in enumerate(ranked) if nm is not None]
                    rows.append(AnswerRow(config_id=cfg.id, query_text=text, query_sha256=query_sha256(text), hits=hits,
                                          epoch=epoch, dropped_items=dropped))
                    if len(rows) >= RUN_BATCH:
                        add_answers(s, rows)
                        rows.clear()
                add_answers(s, rows)
            n += 1
        except (KeyError, TypeError, ValueError) as exc:
            raise CannotVerify(f"a run record of the bundle is malformed ({type(exc).__name__}: {str(exc)[:80]})") from None
        except InputError as exc:
            raise CannotVerify(exc.message) from None
    return n


def check_size(db, options: dict[str, Any], path: Path) -> None:
    """At most MAX_SYSTEMS systems (configuration × epoch with answers) and MAX_PAIRS systems ×
    queries of the scored styles: the scorer's cost is their product."""
    from store.models import Answer, Query

    with db.session() as s:
        systems = s.scalar(sa.select(sa.func.count()).select_from(
            sa.select(Answer.config_id, Answer.epoch).distinct().subquery()))
        q = sa.select(sa.func.count()).select_from(Query)
        styles = options.get("styles")
        if not styles:
            q = q.where(Query.primary.is_(True))
        elif styles != ["all"]:
            q = q.where(Query.style.in_(styles))
        queries = s.scalar(q)
    if systems > MAX_SYSTEMS or systems * queries > MAX_PAIRS:
        raise CannotVerify(f"{path}: the bundle holds {systems:,} systems and {queries:,} scored queries; verify "
                           f"re-derives at most {MAX_SYSTEMS} systems and {MAX_PAIRS:,} system x query pairs; refused")
