"""SQLAlchemy 2 typed models: the whole schema of the cache.

Tables, in data-flow order (DESIGN.md):

- ``corpora`` / ``declarations``: a pinned corpus (name, revision, sha256) and its rows.
  Names are not unique; every copy of a name is a valid gold.
- ``benchmarks`` / ``queries`` / ``gold_units`` / ``gold_names``: benchmark files,
  one row per query (``qid`` = ``<target id>_<style field>``), gold units as sets of names.
- ``subsets`` / ``subset_members``: named lists (gold names or target ids), e.g. shared171.
- ``engine_configs``: engine + endpoint version + result-changing parameters, hashed.
- ``epochs``: label and start of each crawl epoch of a configuration (drift studies).
- ``crawls``: one row per crawler process run.
- ``exchanges``: the append-only archive of every HTTP attempt (never updated or deleted).
- ``parse_outcomes``: every parse of an exchange (ok or the parse error), by parser version.
- ``answers`` / ``hits``: one ranked list per configuration x query text x epoch.
- ``positions``: per system x query x gold unit, the rank of the earliest hit (scoring input).
- ``send_log`` / ``host_state`` / ``work_leases``: cross-process pacing and work sharing.

Query texts are keyed by their sha256 (``query_sha256``) so long texts (MathlibMPR's
formal statements) index portably.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy import false as sa_false
from sqlalchemy import text as sa_text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from store.types import JSONType, UTCDateTime, utcnow

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# BigInteger ids on PostgreSQL, but INTEGER PRIMARY KEY (the rowid alias) on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        dict[str, Any]: JSONType,
        list[Any]: JSONType,
        dt.datetime: UTCDateTime(),
    }


# --------------------------------------------------------------------------- corpus


class Corpus(Base):
    __tablename__ = "corpora"
    __table_args__ = (UniqueConstraint("name", "revision"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    revision: Mapped[str] = mapped_column(String(200))
    sha256: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(Text)
    row_count: Mapped[int] = mapped_column(Integer)
    loaded_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    meta: Mapped[dict[str, Any] | None] = mapped_column(default=None)


class Declaration(Base):
    __tablename__ = "declarations"
    __table_args__ = (
        Index(None, "corpus_id", "full_name"),
        UniqueConstraint("corpus_id", "row"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"))
    row: Mapped[int] = mapped_column(Integer)  # 0-based line order in the source file
    full_name: Mapped[str] = mapped_column(Text)  # ".".join(name)
    name: Mapped[list[Any]] = mapped_column()  # the name components, as in the source
    module_name: Mapped[str | None] = mapped_column(Text, default=None)  # dotted
    kind: Mapped[str | None] = mapped_column(String(50), default=None)
    type: Mapped[str | None] = mapped_column(Text, default=None)
    signature: Mapped[str | None] = mapped_column(Text, default=None)
    value: Mapped[str | None] = mapped_column(Text, default=None)
    informal_name: Mapped[str | None] = mapped_column(Text, default=None)
    informal_description: Mapped[str | None] = mapped_column(Text, default=None)
    docstring: Mapped[str | None] = mapped_column(Text, default=None)
    extra: Mapped[dict[str, Any] | None] = mapped_column(default=None)  # unknown keys


# ------------------------------------------------------------------------ benchmarks


class Benchmark(Base):
    __tablename__ = "benchmarks"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    task: Mapped[str] = mapped_column(String(50))  # "theorem-search" | "premise-retrieval"
    source_file: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    modified: Mapped[bool] = mapped_column(Boolean, default=False)
    loaded_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    meta: Mapped[dict[str, Any] | None] = mapped_column(default=None)

    queries: Mapped[list[Query]] = relationship(back_populates="benchmark", cascade="all, delete-orphan")


class Query(Base):
    __tablename__ = "queries"
    __table_args__ = (UniqueConstraint("benchmark_id", "qid"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    qid: Mapped[str] = mapped_column(String(200))  # "<target id>_<style field>"
    target_id: Mapped[str] = mapped_column(String(100))
    text: Mapped[str] = mapped_column(Text)
    query_sha256: Mapped[str] = mapped_column(String(64), index=True)
    style: Mapped[str] = mapped_column(String(50))
    # The styles scored by default (MathlibQR: all; MathlibMPR: the natural-language one).
    primary: Mapped[bool] = mapped_column(Boolean, default=True)
    kind: Mapped[str | None] = mapped_column(String(50), default=None)
    difficulty: Mapped[str | None] = mapped_column(String(20), default=None)
    meta: Mapped[dict[str, Any] | None] = mapped_column(default=None)

    benchmark: Mapped[Benchmark] = relationship(back_populates="queries")
    gold_units: Mapped[list[GoldUnit]] = relationship(
        back_populates="query", cascade="all, delete-orphan", order_by="GoldUnit.ordinal"
    )


class GoldUnit(Base):
    __tablename__ = "gold_units"
    __table_args__ = (UniqueConstraint("query_id", "ordinal"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    query_id: Mapped[int] = mapped_column(ForeignKey("queries.id", ondelete="CASCADE"))
    ordinal: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))  # "single" | "original" | "alternative"

    query: Mapped[Query] = relationship(back_populates="gold_units")
    names: Mapped[list[GoldName]] = relationship(
        back_populates="unit", cascade="all, delete-orphan", order_by="GoldName.id"
    )


class GoldName(Base):
    __tablename__ = "gold_names"

    id: Mapped[int] = mapped_column(primary_key=True)
    gold_unit_id: Mapped[int] = mapped_column(ForeignKey("gold_units.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(Text, index=True)

    unit: Mapped[GoldUnit] = relationship(back_populates="names")


class Subset(Base):
    __tablename__ = "subsets"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    member_kind: Mapped[str] = mapped_column(String(20))  # "gold_name" | "target_id"
    source_file: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    modified: Mapped[bool] = mapped_column(Boolean, default=False)
    loaded_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    meta: Mapped[dict[str, Any] | None] = mapped_column(default=None)


class SubsetMember(Base):
    __tablename__ = "subset_members"

    subset_id: Mapped[int] = mapped_column(ForeignKey("subsets.id", ondelete="CASCADE"), primary_key=True)
    member: Mapped[str] = mapped_column(String(500), primary_key=True)


# ------------------------------------------------------------------- engines, crawls


class EngineConfig(Base):
    __tablename__ = "engine_configs"

    id: Mapped[int] = mapped_column(primary_key=True)
    engine: Mapped[str] = mapped_column(String(50))
    endpoint_version: Mapped[str] = mapped_column(String(50))
    params: Mapped[dict[str, Any]] = mapped_column()
    config_hash: Mapped[str] = mapped_column(String(64), unique=True)
    label: Mapped[str] = mapped_column(String(200))
    local: Mapped[bool] = mapped_column(Boolean, default=False)
    result_cap: Mapped[int | None] = mapped_column(Integer, default=None)
    licence: Mapped[str | None] = mapped_column(String(100), default=None)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Epoch(Base):
    """A crawl epoch of one configuration: a label (``--epoch-label``) and when it began."""

    __tablename__ = "epochs"

    config_id: Mapped[int] = mapped_column(ForeignKey("engine_configs.id"), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    label: Mapped[str | None] = mapped_column(String(200), default=None)  # default: date of the first send
    started_at: Mapped[dt.datetime | None] = mapped_column(default=None)  # the first send of the epoch
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Crawl(Base):
    __tablename__ = "crawls"

    id: Mapped[int] = mapped_column(primary_key=True)
    started_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    worker: Mapped[str] = mapped_column(String(100))
    code_version: Mapped[str] = mapped_column(String(100))
    args: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    status: Mapped[str] = mapped_column(String(20), default="running")
    summary: Mapped[dict[str, Any] | None] = mapped_column(default=None)


class Exchange(Base):
    """One HTTP attempt, exactly as sent and received. Append-only."""

    __tablename__ = "exchanges"
    __table_args__ = (Index(None, "config_id", "request_fingerprint"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    crawl_id: Mapped[int | None] = mapped_column(ForeignKey("crawls.id"), default=None, index=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("engine_configs.id"))
    attempt: Mapped[int] = mapped_column(Integer)  # 1-based attempt number
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    query_texts: Mapped[list[Any]] = mapped_column()  # the batch this request carried
    request_fingerprint: Mapped[str] = mapped_column(String(64))
    method: Mapped[str] = mapped_column(String(10))
    url: Mapped[str] = mapped_column(Text)
    request_headers: Mapped[dict[str, Any]] = mapped_column()  # secrets redacted
    request_body: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    response_headers: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    response_body: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    transport_error: Mapped[str | None] = mapped_column(Text, default=None)
    sent_at: Mapped[dt.datetime] = mapped_column()
    finished_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    elapsed_ms: Mapped[float | None] = mapped_column(Float, default=None)
    # The body was longer than --max-body: response_body holds its first bytes only
    # (exported with WARC-Truncated: length).
    body_truncated: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())


class ParseOutcome(Base):
    """One parse of one exchange. The newest row per exchange is the one in force
    (``engines reparse`` adds rows under a newer parser version; older rows stay)."""

    __tablename__ = "parse_outcomes"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    exchange_id: Mapped[int] = mapped_column(ForeignKey("exchanges.id"), index=True)
    parser_version: Mapped[int] = mapped_column(Integer)
    ok: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    # Items dropped by a tolerant parse (valid envelope, bad item), over the whole
    # batch, and the first reason; survivors keep their as-returned ranks.
    dropped_items: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    drop_reason: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Answer(Base):
    """One configuration's ranked list for one query text in one epoch.

    At most one *current* answer per (configuration, text, epoch): a partial unique
    index over the rows with ``superseded`` false. ``engines reparse`` marks the old
    answer superseded and adds the new parser version's answer; scoring and the views
    read current answers only.
    """

    __tablename__ = "answers"
    __table_args__ = (
        Index(
            "uq_answers_current", "config_id", "query_sha256", "epoch", unique=True,
            sqlite_where=sa_text("superseded = 0"), postgresql_where=sa_text("NOT superseded"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("engine_configs.id"))
    query_text: Mapped[str] = mapped_column(Text)
    query_sha256: Mapped[str] = mapped_column(String(64), index=True)
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    exchange_id: Mapped[int | None] = mapped_column(ForeignKey("exchanges.id"), default=None)
    parser_version: Mapped[int | None] = mapped_column(Integer, default=None)
    fetched_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    n_returned: Mapped[int] = mapped_column(Integer, default=0)
    latency_ms: Mapped[float | None] = mapped_column(Float, default=None)
    meta: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    superseded: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    dropped_items: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # see ParseOutcome

    hits: Mapped[list[Hit]] = relationship(
        back_populates="answer", cascade="all, delete-orphan", order_by="Hit.rank"
    )


class Hit(Base):
    __tablename__ = "hits"
    __table_args__ = (UniqueConstraint("answer_id", "rank"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    answer_id: Mapped[int] = mapped_column(ForeignKey("answers.id", ondelete="CASCADE"))
    rank: Mapped[int] = mapped_column(Integer)  # 1-based, as returned
    name: Mapped[str] = mapped_column(Text)  # as returned (dotted if the engine sent a list)
    normalized_name: Mapped[str | None] = mapped_column(Text, default=None, index=True)
    raw: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    resolved_corpus_id: Mapped[int | None] = mapped_column(ForeignKey("corpora.id"), default=None)
    declaration_id: Mapped[int | None] = mapped_column(ForeignKey("declarations.id"), default=None)
    resolution: Mapped[str | None] = mapped_column(String(20), default=None)  # resolved | not_in_corpus

    answer: Mapped[Answer] = relationship(back_populates="hits")


class Position(Base):
    """Rank of the earliest hit of a gold unit (NULL = not within k_max)."""

    __tablename__ = "positions"
    __table_args__ = (UniqueConstraint("config_id", "epoch", "corpus_id", "gold_unit_id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("engine_configs.id"))
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    corpus_id: Mapped[int] = mapped_column(ForeignKey("corpora.id", ondelete="CASCADE"))
    query_id: Mapped[int] = mapped_column(ForeignKey("queries.id", ondelete="CASCADE"), index=True)
    gold_unit_id: Mapped[int] = mapped_column(ForeignKey("gold_units.id", ondelete="CASCADE"))
    pos: Mapped[int | None] = mapped_column(Integer, default=None)
    n_retrieved: Mapped[int] = mapped_column(Integer, default=0)
    computed_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


# ----------------------------------------------------------- pacing and work sharing


class SendLog(Base):
    """Send times per host, shared by every crawler process (sliding-window pacing)."""

    __tablename__ = "send_log"
    __table_args__ = (Index(None, "host", "sent_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    sent_at: Mapped[float] = mapped_column(Float)  # unix seconds
    worker: Mapped[str | None] = mapped_column(String(100), default=None)
    # Granted, not yet left: other workers count it as leaving "now" until the sender
    # corrects sent_at to the departure (crawler.pacing.DbLedger, PENDING_MAX).
    pending: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())


class HostState(Base):
    """Per host: a pause (429 / Retry-After / outage) every worker and the next run honour."""

    __tablename__ = "host_state"

    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    paused_until: Mapped[float | None] = mapped_column(Float, default=None)  # unix seconds
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # An outage (maintenance page, restarting backend): since when, why, and how many
    # consecutive outage answers (the backoff grows with it); cleared by a good answer.
    outage_since: Mapped[float | None] = mapped_column(Float, default=None)  # unix seconds
    outage_reason: Mapped[str | None] = mapped_column(Text, default=None)
    outage_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class WorkLease(Base):
    """Crawl work state per (config, query text, epoch): a row exists while it is unanswered.

    ``status`` "leased": claimable when ``leased_until`` has passed (dead workers' leases
    expire); "failed": a permanent failure (non-retryable 4xx, engine-reported error),
    skipped until ``engines crawl --retry-failed``. The row is deleted with the answer.
    """

    __tablename__ = "work_leases"
    __table_args__ = (Index(None, "config_id", "epoch", "status", "leased_until"),)

    config_id: Mapped[int] = mapped_column(ForeignKey("engine_configs.id"), primary_key=True)
    query_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    worker: Mapped[str] = mapped_column(String(100))
    leased_until: Mapped[float] = mapped_column(Float)  # unix seconds
    status: Mapped[str] = mapped_column(String(20), default="leased", server_default="leased")
    note: Mapped[str | None] = mapped_column(Text, default=None)  # the last failure, one line
