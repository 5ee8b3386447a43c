"""Export: the selected exchanges of the database as a WARC/1.1 bundle (archive.bundle).

Rows are streamed from the database (a server-side cursor on PostgreSQL) and records
written to ``<name>.part``, renamed to the bundle's name only when complete. The one
writer of bundles is :class:`BundleWriter`; export and publish (pipelines.publish) both
write through it, with the warcinfo fields of :func:`warcinfo_fields`.
"""

from __future__ import annotations

import http
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlsplit

import sqlalchemy as sa

from archive.bundle.records import END_URI, H_END, H_RECORDS
from archive.bundle.warc import (
    BUNDLE_FORMAT, H_ATTEMPT, H_CONFIG, H_ELAPSED, H_EPOCH, H_FINISHED, H_TEXTS, MOVED, ORIG, record_id,
    warc_date,
)
from store.errors import InputError
from store.models import Benchmark, Corpus, EngineConfig, Epoch, Exchange
from store.types import utcnow


@dataclass
class ExportSummary:
    path: Path
    exchanges: int = 0
    records: int = 0
    configs: int = 0
    transport_errors: int = 0
    bytes: int = 0
    # Record ids given to exchanges sent at one instant (rows come in send-time order): two
    # exchanges identical in every field would otherwise share an id (see unique_id).
    _ids_at: tuple[str, set[str]] = field(default=("", frozenset()), repr=False)

    def unique_id(self, date: str, rid: str) -> str:
        """``rid``, or a variant of it when an exchange sent at the same instant took it already."""
        if self._ids_at[0] != date:
            self._ids_at = (date, set())
        seen, n, out = self._ids_at[1], 0, rid
        while out in seen:
            n += 1
            out = record_id(rid, n)
        seen.add(out)
        return out


def _select_configs(session, engines: Sequence[str] | None) -> list[EngineConfig]:
    rows = list(session.execute(sa.select(EngineConfig).where(EngineConfig.local.is_(False))
                                .order_by(EngineConfig.id)).scalars())
    if not engines:
        return rows
    out: list[EngineConfig] = []
    for want in engines:
        w = want.strip()
        hits = [c for c in rows if w.lower() in (c.engine, c.label.lower())
                or (len(w) >= 6 and c.config_hash.startswith(w))]
        if not hits:
            known = ", ".join(sorted({c.engine for c in rows})) or "none"
            raise InputError(f"--engine {want!r}: no remote configuration matches (engines with exchanges: {known})")
        out.extend(c for c in hits if c not in out)
    return out


def _epoch_filter(session, configs: list[EngineConfig], epochs: Sequence[str] | None) -> dict[int, list[int] | None]:
    """config id → epochs to export (None: all). An epoch is a number or an epoch label."""
    if not epochs:
        return {c.id: None for c in configs}
    out: dict[int, list[int] | None] = {}
    for c in configs:
        labels = {e.label: e.epoch for e in session.execute(sa.select(Epoch).where(Epoch.config_id == c.id)).scalars()}
        chosen = []
        for spec in epochs:
            if spec.isdigit():
                chosen.append(int(spec))
            elif spec in labels:
                chosen.append(labels[spec])
        out[c.id] = sorted(set(chosen))
    if not any(out.values()):
        raise InputError(f"--epoch {', '.join(epochs)}: no exported configuration has that epoch (give a number or an epoch label)")
    return out


def _http_request_block(method: str, url: str, headers: dict[str, Any]):
    from warcio.statusandheaders import StatusAndHeaders

    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return StatusAndHeaders(f"{method} {target} HTTP/1.1", [(k, str(v)) for k, v in headers.items()],
                            is_http_request=True)


def _http_response_block(status: int, headers: dict[str, Any], body_len: int):
    from warcio.statusandheaders import StatusAndHeaders

    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    out = []
    for k, v in headers.items():
        out.append((ORIG + k if k.lower() in MOVED else k, str(v)))
    out.append(("Content-Length", str(body_len)))
    return StatusAndHeaders(f"{status} {reason}", out, protocol="HTTP/1.1")


def software_fields(created: str | None = None) -> list[str]:
    """The warcinfo lines every bundle starts with: tool and version, format, WARC version, and
    ``created`` (default now; ``engines publish`` passes the data's own time, so that its
    bundle depends on the data only)."""
    from engines import code_version

    return [f"software: engines/{code_version()}", f"format: {BUNDLE_FORMAT}", "conformsTo: WARC/1.1",
            f"created: {created or warc_date(utcnow())}"]


def warcinfo_fields(session, configs: list[EngineConfig], epoch_sel: dict[int, list[int] | None],
                    created: str | None = None) -> bytes:
    """The export's warcinfo block: :func:`software_fields`, then every configuration with its
    selected epochs (``epoch_sel``: config id → epochs, None for all), the loaded benchmarks and corpora."""
    lines = software_fields(created)
    for c in configs:
        lines.append("config: " + json.dumps({
            "config_hash": c.config_hash, "engine": c.engine, "endpoint_version": c.endpoint_version,
            "params": c.params, "label": c.label, "result_cap": c.result_cap, "licence": c.licence,
        }, sort_keys=True, ensure_ascii=True))
        want = epoch_sel.get(c.id)
        for e in session.execute(sa.select(Epoch).where(Epoch.config_id == c.id).order_by(Epoch.epoch)).scalars():
            if want is None or e.epoch in want:
                lines.append("epoch: " + json.dumps({
                    "config_hash": c.config_hash, "epoch": e.epoch, "label": e.label,
                    "started_at": warc_date(e.started_at) if e.started_at else None,
                }, sort_keys=True, ensure_ascii=True))
    for b in session.execute(sa.select(Benchmark).order_by(Benchmark.name)).scalars():
        lines.append("benchmark: " + json.dumps({"name": b.name, "sha256": b.sha256}, ensure_ascii=True))
    for k in session.execute(sa.select(Corpus).order_by(Corpus.name, Corpus.revision)).scalars():
        lines.append("corpus: " + json.dumps({"name": k.name, "revision": k.revision, "sha256": k.sha256},
                                             ensure_ascii=True))
    return ("\r\n".join(lines) + "\r\n").encode("utf-8")


def export_bundle(
    db, out: str | Path, *, engines: Sequence[str] | None = None, epochs: Sequence[str] | None = None,
    progress=None,
) -> ExportSummary:
    """Write the selected exchanges as a WARC/1.1 bundle (gzip per record if the name ends in .gz)."""
    path = Path(out)
    if not path.parent.exists():
        raise InputError(f"directory {path.parent} for --out {path} does not exist; create it first")
    with db.session() as s:
        configs = _select_configs(s, engines)
        if not configs:
            raise InputError("no remote engine configurations in this database: nothing to export (crawl first)")
        epoch_sel = _epoch_filter(s, configs, epochs)
        info = warcinfo_fields(s, configs, epoch_sel)
    with BundleWriter(path, info) as writer:
        for c in configs:
            writer.write_exchanges(db, c.id, c.config_hash, epoch_sel[c.id], progress)
    writer.summary.configs = len(configs)
    return writer.summary


class BundleWriter:
    """The one writer of bundles (``engines export`` and ``engines publish``).

    ``with BundleWriter(path, info) as w:`` opens ``<path>.part`` and writes the warcinfo
    record (``info``: its ``application/warc-fields`` block); :meth:`write_exchanges` and
    :meth:`write_exchange` add request/response (or metadata) pairs, :meth:`write_resource`
    a resource record. Leaving the block without an error moves the file into place;
    with one, the partial file is removed. ``summary`` counts what was written (records,
    exchanges, transport errors, bytes). Gzip per record when the name ends in ``.gz``.
    """

    def __init__(self, path: str | Path, info: bytes, *, info_headers: dict[str, str] | None = None):
        self.path = Path(path)
        self.info = info
        self.info_headers = info_headers or {}  # e.g. a derived WARC-Record-ID and WARC-Date (publish)
        self.summary = ExportSummary(path=self.path)
        self._tmp = self.path.with_name(self.path.name + ".part")
        self._fh = None
        self._writer = None

    def __enter__(self) -> "BundleWriter":
        from warcio.warcwriter import WARCWriter

        self._fh = open(self._tmp, "wb")
        self._writer = WARCWriter(self._fh, gzip=self.path.name.endswith(".gz"), warc_version="WARC/1.1")
        rec = self._writer.create_warc_record(self.path.name, "warcinfo", payload=io.BytesIO(self.info),
                                              length=len(self.info), warc_content_type="application/warc-fields",
                                              warc_headers_dict={**self.info_headers,
                                                                 "WARC-Filename": self.path.name, H_END: END_URI})
        self._writer.write_record(rec)
        self.summary.records += 1
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:  # the end record, announced by the warcinfo record's H_END
                write_end(self._writer, self.summary.records, self.info_headers.get("WARC-Date"))
            self._fh.close()
            if exc_type is None:
                self.summary.bytes = self._tmp.stat().st_size
                self._tmp.replace(self.path)
        finally:
            if self._tmp.exists():
                self._tmp.unlink()

    def write_exchanges(self, db, config_id: int, config_hash: str, epochs: Sequence[int] | None = None,
                        progress=None) -> None:
        """Every exchange of the configuration (of ``epochs`` only, unless None), in send order,
        streamed: a server-side cursor on PostgreSQL, batches on SQLite, never the whole table in memory."""
        ex = Exchange.__table__
        q = sa.select(*exchange_columns()).where(ex.c.config_id == config_id).order_by(ex.c.sent_at, ex.c.id)
        if epochs is not None:
            q = q.where(ex.c.epoch.in_(epochs or [-1]))
        with db.engine.connect() as conn:
            for row in conn.execution_options(stream_results=True, yield_per=1000).execute(q):
                self.write_exchange(row, config_hash)
                if progress is not None:
                    progress(self.summary.exchanges)

    def write_exchange(self, row, config_hash: str) -> None:
        """One exchange (a row with :func:`exchange_columns`) as its request and response (or metadata) records."""
        _write_exchange(self._writer, row, config_hash, self.summary)

    def write_resource(self, uri: str, payload, length: int, content_type: str, headers: dict[str, str]) -> None:
        """One ``resource`` record: ``payload`` a binary stream of ``length`` bytes."""
        self._writer.write_record(self._writer.create_warc_record(
            uri, "resource", payload=payload, length=length, warc_content_type=content_type,
            warc_headers_dict=headers))
        self.summary.records += 1


def write_end(writer, records: int, date: str | None = None) -> None:
    """The end record: the count of the records before it (a cut at a record boundary is
    then seen by the reader, archive.bundle.records.checked_records); its id made of the
    count, and its date ``date`` when given (publish writes the same bundle byte for byte)."""
    body = json.dumps({"records": records}).encode()
    headers = {"WARC-Record-ID": record_id("end", records), H_RECORDS: str(records)}
    if date is not None:
        headers["WARC-Date"] = date
    writer.write_record(writer.create_warc_record(
        END_URI, "resource", payload=io.BytesIO(body), length=len(body), warc_content_type="application/json",
        warc_headers_dict=headers))


def exchange_columns() -> list:
    """The exchange columns :meth:`BundleWriter.write_exchange` reads."""
    ex = Exchange.__table__
    return [ex.c.id, ex.c.config_id, ex.c.attempt, ex.c.epoch, ex.c.query_texts, ex.c.method, ex.c.url,
            ex.c.request_headers, ex.c.request_body, ex.c.status_code, ex.c.response_headers, ex.c.response_body,
            ex.c.transport_error, ex.c.sent_at, ex.c.finished_at, ex.c.elapsed_ms, ex.c.body_truncated]


def _write_exchange(writer, row, config_hash: str, summary: ExportSummary) -> None:
    url = row.url
    date = warc_date(row.sent_at)
    req_body = bytes(row.request_body) if row.request_body is not None else b""
    # Ids derived from the exchange (what was sent, to whom, when), not random ones.
    req_id = summary.unique_id(date, record_id("request", config_hash, row.epoch, row.attempt, row.method, url,
                                               date, req_body))
    meta = {
        "WARC-Record-ID": req_id,
        "WARC-Date": date,
        H_CONFIG: config_hash,
        H_EPOCH: str(row.epoch),
        H_ATTEMPT: str(row.attempt),
        H_TEXTS: json.dumps(list(row.query_texts), ensure_ascii=True),
    }
    if row.elapsed_ms is not None:
        meta[H_ELAPSED] = repr(float(row.elapsed_ms))
    if row.finished_at is not None:
        meta[H_FINISHED] = warc_date(row.finished_at)
    req = writer.create_warc_record(
        url, "request", payload=io.BytesIO(req_body), length=len(req_body),
        http_headers=_http_request_block(row.method, url, dict(row.request_headers or {})),
        warc_headers_dict=meta,
    )
    if row.status_code is None:
        payload = json.dumps({"transport_error": row.transport_error, "elapsed_ms": row.elapsed_ms},
                             ensure_ascii=False).encode("utf-8")
        second = writer.create_warc_record(
            url, "metadata", payload=io.BytesIO(payload), length=len(payload),
            warc_content_type="application/json",
            warc_headers_dict={"WARC-Record-ID": record_id("metadata", req_id, payload), "WARC-Date": date,
                               "WARC-Concurrent-To": req_id, "WARC-Refers-To": req_id},
        )
        summary.transport_errors += 1
    else:
        body = bytes(row.response_body) if row.response_body is not None else b""
        second = writer.create_warc_record(
            url, "response", payload=io.BytesIO(body), length=len(body),
            http_headers=_http_response_block(row.status_code, dict(row.response_headers or {}), len(body)),
            # A body cut at --max-body says so (WARC 1.1 §5.13).
            warc_headers_dict={"WARC-Record-ID": record_id("response", req_id, row.status_code, body),
                               "WARC-Date": date, "WARC-Concurrent-To": req_id,
                               **({"WARC-Truncated": "length"} if row.body_truncated else {})},
        )
    req.rec_headers.add_header("WARC-Concurrent-To", second.rec_headers.get_header("WARC-Record-ID"))
    writer.write_record(req)
    writer.write_record(second)
    summary.records += 2
    summary.exchanges += 1
