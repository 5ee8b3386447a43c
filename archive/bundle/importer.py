"""Import: a WARC bundle (ours, or another tool's) into the database, all or nothing.

One pass over the records (archive.bundle.records reads and verifies them), pairing each
request with its response (archive.bundle.pairing), inside one transaction: exchanges are
written in batches, keyed by (configuration, request fingerprint, send time, attempt), so
importing twice adds nothing; then the imported exchanges are parsed into answers
(archive.bundle.parse) in the same transaction. Our records name their configuration
(``WARC-Engines-Config``, described in the warcinfo record and checked by
archive.bundle.checks); another tool's are recognised by their engine's adapter
(archive.bundle.foreign).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa

from archive.bundle import records
from archive.bundle.checks import check_identity, expected_host, int_in, our_fields, restore_headers, url_belongs
from archive.bundle.foreign import foreign_identity, known_hosts
from archive.bundle.pairing import Pairing
from archive.bundle.parse import Feed, Row, parse_imported
from archive.bundle.records import Record
from archive.bundle.warc import IMPORT_BATCH, H_CONFIG, BadBundle, ImportSummary, parse_warc_date, fingerprint
from store.errors import InputError, UserError
from store.models import Crawl, EngineConfig, Epoch, Exchange
from store.sniff import refuse_other_kinds
from store.types import utcnow


def import_bundle(db, path: str | Path, *, progress=None) -> ImportSummary:
    """Import a WARC bundle: all exchanges and the answers parsed from them in one transaction."""
    from engines import code_version

    path = Path(path)
    if not path.is_file():
        raise InputError(f"bundle {path} does not exist; give the path of a .warc.gz file")
    refuse_other_kinds(path, ("warc",), "a WARC bundle")
    summary = ImportSummary()
    t0 = time.perf_counter()
    with db.session() as s, s.begin(), open(path, "rb") as fh:
        crawl = Crawl(hostname=socket.gethostname(), pid=os.getpid(), worker="import", code_version=code_version(),
                      args={"import": path.name}, status="imported")
        s.add(crawl)
        s.flush()
        imp = _Import(db, s, str(path), summary, crawl.id, progress)
        # In the same transaction: a failure or Ctrl-C while parsing leaves nothing behind.
        imp.feed = Feed(s.connection(), summary, imp.adapters)
        ok = False
        try:
            imp.read(fh, path.stat().st_size)
            imp.add_epochs()
            crawl.finished_at = utcnow()
            crawl.summary = {"added": summary.added, "duplicates": summary.duplicates, "records": summary.records}
            s.flush()
            summary.seconds_archive = time.perf_counter() - t0
            ok = True
        finally:
            imp.feed.close(write=ok)  # the last batches parsed as the records were read
        parse_imported(db, summary, into=s.connection(), adapters=imp.adapters)  # any other unparsed exchange
    summary.seconds_parse = time.perf_counter() - t0 - summary.seconds_archive
    return summary


class _Import:
    """One import's state inside its transaction (session ``s``)."""

    def __init__(self, db, s, label: str, summary: ImportSummary, crawl_id: int, progress) -> None:
        self.db, self.s, self.label, self.summary = db, s, label, summary
        self.crawl_id, self.progress = crawl_id, progress
        self.hosts = known_hosts()
        self.configs_by_hash: dict[str, int] = {}
        self.adapters: dict[int, Any] = {}  # config id -> its rebuilt adapter (checked before its exchanges are written)
        self.config_meta: dict[int, tuple[str, dict[str, Any]]] = {}  # config id → (engine, params)
        self.info_configs: dict[str, dict[str, Any]] = {}
        self.info_epochs: list[dict[str, Any]] = []
        self.epoch_of_foreign: dict[int, int] = {}
        self.rows: list[dict[str, Any]] = []
        self.held = 0  # body bytes in `rows`
        self.feed: Feed | None = None  # parses the exchanges as they are inserted

    def read(self, fh, size: int) -> None:
        """Every record of the file: warcinfo lines kept, pairs written as exchanges."""
        label, summary = self.label, self.summary
        pairing = Pairing(label)
        walk = records.Walk()
        for rec in records.read_records(fh, label, size, walk):
            summary.records += 1
            if rec.type == "warcinfo":
                self.warcinfo(rec)
                continue
            if rec.type not in ("request", "response", "metadata"):
                continue
            pair = pairing.offer(rec)
            if pair is not None:
                self.exchange(*pair)
        if summary.records == 0:
            raise BadBundle(f"{label}: no WARC records in the file (empty, or not a WARC); nothing was imported")
        for rec in pairing.leftovers():
            if rec.headers.get(H_CONFIG) or rec.type == "response" and rec.headers.get("WARC-Concurrent-To"):
                raise BadBundle(f"{label}: {rec.name()} has no partner record (request without response, or the "
                                "reverse); the bundle is incomplete; nothing was imported")
            summary.unpaired += 1
        summary.unterminated = walk.unterminated
        self.flush()

    def warcinfo(self, rec: Record) -> None:
        """The configurations and epochs a warcinfo record describes (checked when used)."""
        for line in rec.body.decode("utf-8", "replace").splitlines():
            key, _, value = line.partition(":")
            if key not in ("config", "epoch"):
                continue
            try:
                c = json.loads(value)
                if key == "config":
                    self.info_configs[str(c["config_hash"])] = c
                else:
                    int_in(c["epoch"], 0, "epoch")
                    c["started_at"] and parse_warc_date(c["started_at"])
                    self.info_epochs.append(c)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise BadBundle(f"{self.label}: {rec.name()} has a bad {key!r} line ({type(exc).__name__}: "
                                f"{str(exc)[:120]}): {value.strip()[:80]!r}; nothing was imported") from None

    def config_id_for(self, h: str, rec: Record) -> int:
        """The id of configuration ``h`` (stored, or added from the warcinfo record), its adapter rebuilt."""
        if h in self.configs_by_hash:
            return self.configs_by_hash[h]
        from engines.registry import adapter_for_config
        from store.writes import ensure_config

        label, s = self.label, self.s
        stored = s.execute(sa.select(EngineConfig.id, EngineConfig.engine, EngineConfig.params)
                           .where(EngineConfig.config_hash == h)).one_or_none()
        found = stored.id if stored is not None else None
        c = self.info_configs.get(h) if stored is None else {"engine": stored.engine, "params": stored.params}
        if c is None:
            raise BadBundle(f"{label}: {rec.name()} names configuration {h[:12]} that the warcinfo record "
                            "does not describe; nothing was imported")
        if stored is None:
            check_identity(c, h, label)
        try:
            adapter = adapter_for_config(c["engine"], c.get("params"))
        except UserError as exc:
            raise BadBundle(f"{label}: configuration {h[:12]} ({c.get('label') or c['engine']}) cannot be "
                            f"parsed by this version: {exc.message}; nothing was imported") from None
        if found is not None:
            self.config_meta[found] = (stored.engine, dict(stored.params or {}))
        if found is None:
            cfg = ensure_config(s, engine=c["engine"], endpoint_version=c["endpoint_version"], params=c["params"],
                                config_hash=h, label=c.get("label"), result_cap=c.get("result_cap"),
                                licence=c.get("licence"))
            s.flush()
            found = cfg.id
            self.config_meta[found] = (c["engine"], dict(c["params"]))
            self.summary.configs_added += 1
        self.configs_by_hash[h] = found
        self.adapters[found] = adapter
        return found

    def flush(self) -> None:
        """Insert the rows read so far that are not stored yet (the rest count as duplicates)."""
        if not self.rows:
            return
        s = self.s
        by_cfg: dict[int, list[dict[str, Any]]] = {}
        for r in self.rows:
            by_cfg.setdefault(r["config_id"], []).append(r)
        new: list[dict[str, Any]] = []
        for cid, group in by_cfg.items():
            if self.feed is not None:
                self.feed.takes(cid)  # asked before this batch is stored
            fps = sorted({r["request_fingerprint"] for r in group})
            have = {
                (fp, t.isoformat(), a)
                for fp, t, a in s.execute(
                    sa.select(Exchange.request_fingerprint, Exchange.sent_at, Exchange.attempt)
                    .where(Exchange.config_id == cid, Exchange.request_fingerprint.in_(fps))
                )
            }
            for r in group:
                key = (r["request_fingerprint"], r["sent_at"].isoformat(), r["attempt"])
                if key in have:
                    self.summary.duplicates += 1
                    continue
                have.add(key)
                new.append(r)
        if new:
            # Ids by key, not by order: RETURNING in parameter order made SQLAlchemy insert row by row.
            ids = {(c, fp, t, a): i for i, c, fp, t, a in s.execute(sa.insert(Exchange).returning(
                Exchange.id, Exchange.config_id, Exchange.request_fingerprint, Exchange.sent_at, Exchange.attempt), new)}
            self.summary.added += len(new)
            feed: dict[int, list[Row]] = {}
            for r in new:
                cid = r["config_id"]
                if self.feed is None or cid not in self.feed.fed:
                    continue
                ex_id = ids.get((cid, r["request_fingerprint"], r["sent_at"], r["attempt"]))
                if ex_id is None:  # not found by its key (a time the database stores otherwise): parsed afterwards
                    self.feed.stop(cid)
                    continue
                feed.setdefault(cid, []).append(Row(ex_id, r["epoch"], r["query_texts"], r["status_code"],
                                                    r["response_headers"], r["response_body"], r["elapsed_ms"]))
            for cid, rows in feed.items():
                self.feed.add(cid, rows)  # parsed while the next records are read
        self.rows.clear()
        self.held = 0

    def exchange(self, req: Record, second: Record) -> None:
        """One request and its response (or transport-error metadata) as an exchange row."""
        method = req.http_line.strip().upper()
        h = req.headers.get(H_CONFIG)
        known = self.ours(req, h) if h else self.foreign(req, method)
        if known is None:
            return
        cid, epoch, attempt, texts, elapsed, finished, ours = known
        self.summary.configs.add(cid)
        row = self.request_row(req, method, cid, epoch, attempt, texts, elapsed, finished, ours)
        self.response_fields(row, second, ours)
        self.rows.append(row)
        self.summary.exchanges_read += 1
        self.held += len(row["response_body"] or b"") + len(row["request_body"] or b"")
        if len(self.rows) >= IMPORT_BATCH or self.held > records.MAX_HELD_BYTES:
            self.flush()
            if self.progress is not None:
                self.progress(self.summary.exchanges_read)

    def ours(self, req: Record, h: str) -> tuple:
        """(config id, epoch, attempt, texts, elapsed, finished, True) of a request we exported."""
        cid = self.config_id_for(h, req)
        if not url_belongs(*self.config_meta[cid], req.uri):
            engine, params = self.config_meta[cid]
            raise BadBundle(f"{self.label}: {req.name()} is filed under configuration {h[:12]} ({engine}) but "
                            f"targets {urlsplit(req.uri).netloc or repr(req.uri)[:80]}, not that configuration's "
                            f"host ({expected_host(engine, params)}); nothing was imported")
        epoch, attempt, texts, elapsed, finished = our_fields(req, self.label)
        return cid, epoch, attempt, texts, elapsed, finished, True

    def foreign(self, req: Record, method: str) -> tuple | None:
        """The same for another tool's request to an engine's public host; None (unpaired) when
        it is not an engine's request."""
        from store.epochs import current_epoch
        from engines.base import config_hash

        engine = self.hosts.get(urlsplit(req.uri).netloc)
        if engine is None:
            self.summary.unpaired += 1  # not an engine exchange: ignored
            return None
        try:
            adapter, texts = foreign_identity(engine, method, req.uri, req.body)
        except (ValueError, TypeError, AttributeError, UserError) as exc:
            raise BadBundle(f"{self.label}: {req.name()}: its request cannot be read as a {engine} query "
                            f"({str(exc)[:160]}); nothing was imported") from None
        if not texts:
            self.summary.unpaired += 1
            return None
        ident = adapter.identity()
        hsh = config_hash(ident)
        if hsh not in self.info_configs:
            self.info_configs[hsh] = {"engine": adapter.engine, "endpoint_version": adapter.endpoint_version,
                                      "params": ident, "label": adapter.engine,
                                      "result_cap": adapter.defaults.result_cap}
        cid = self.config_id_for(hsh, req)
        if cid not in self.epoch_of_foreign:
            self.epoch_of_foreign[cid] = current_epoch(self.db, cid)
        self.summary.foreign += 1
        return cid, self.epoch_of_foreign[cid], 1, texts, None, None, False

    def request_row(self, req: Record, method: str, cid: int, epoch: int, attempt: int, texts: list[str],
                    elapsed, finished, ours: bool) -> dict[str, Any]:
        """The exchange row of a request (its response fields still empty)."""
        body = req.body or None
        try:
            sent_at = parse_warc_date(req.date)
        except (ValueError, TypeError):
            raise BadBundle(f"{self.label}: {req.name()} has a bad WARC-Date {req.date[:40]!r} (want an ISO 8601 "
                            "time); nothing was imported") from None
        return {
            "crawl_id": self.crawl_id, "config_id": cid, "attempt": attempt, "epoch": epoch, "query_texts": texts,
            "request_fingerprint": fingerprint(method, req.uri, body), "method": method, "url": req.uri,
            "request_headers": ({k: v for k, v in req.http_headers} if ours
                                else {k.lower(): v for k, v in req.http_headers}),
            "request_body": body, "sent_at": sent_at, "finished_at": finished,
            "elapsed_ms": elapsed, "status_code": None, "response_headers": None, "response_body": None,
            "transport_error": None, "body_truncated": False,
        }

    def response_fields(self, row: dict[str, Any], second: Record, ours: bool) -> None:
        """The response (or transport error) of ``second`` into ``row``."""
        if second.type == "metadata":
            try:
                row["transport_error"] = json.loads(second.body).get("transport_error") or "transport error"
            except ValueError:
                raise BadBundle(f"{self.label}: {second.name()} is not the JSON metadata of a transport error; "
                                "nothing was imported") from None
            return
        try:
            row["status_code"] = int(second.http_line.split()[0])
        except (IndexError, ValueError):
            raise BadBundle(f"{self.label}: {second.name()} has no HTTP status line; nothing was imported") from None
        row["response_headers"] = restore_headers(second.http_headers, ours)
        row["response_body"] = second.body
        row["body_truncated"] = bool(second.headers.get("WARC-Truncated"))

    def add_epochs(self) -> None:
        """Epoch labels and starts travel with the bundle; existing rows keep theirs."""
        s = self.s
        for e in self.info_epochs:
            cid = self.configs_by_hash.get(e["config_hash"])
            if cid is None or s.get(Epoch, (cid, e["epoch"])) is not None:
                continue
            s.add(Epoch(config_id=cid, epoch=e["epoch"], label=e.get("label"),
                        started_at=parse_warc_date(e["started_at"]) if e.get("started_at") else None))
