"""Archive bundles: the exchange archive as standard WARC/1.1 (export) and back (import).

A bundle is a ``.warc.gz`` (one gzip member per record, as ``warcio`` writes it):

- one ``warcinfo`` record: tool and version, every exported configuration (identity
  hash, engine, endpoint version, parameters, label), its epochs (label, start), and
  the loaded benchmarks' and corpora's hashes (``application/warc-fields``; the
  structured values are one-line JSON);
- per exchange a ``request`` record (the HTTP request as archived: secrets were
  redacted before it was stored) and a ``response`` record, linked both ways by
  ``WARC-Concurrent-To``; ``WARC-Date`` is when the request was sent (microseconds);
  block and payload digests (sha1, base32, as WARC tools expect). An exchange that
  ended in a transport error has a ``metadata`` record (JSON) instead of a response.
- our own headers on the request record: ``WARC-Engines-Config`` (identity hash),
  ``-Epoch``, ``-Attempt``, ``-Query-Texts`` (JSON), ``-Elapsed-Ms``, ``-Finished-At``.

Response bodies are stored decoded (as the parser saw them), so the original
``Content-Length`` / ``Content-Encoding`` / ``Transfer-Encoding`` travel as
``X-Archive-Orig-*`` (the convention of web-archive replay tools) and are restored on
import. Export streams rows from the database and records to a temporary file, so
memory stays flat; the file appears under its name only when complete.

Import reads a bundle once, verifying every digest, inside one transaction: the first
bad record (digest mismatch, truncation, a response without its request) aborts it
with one line naming that record, and nothing is written. Exchanges are keyed by
(configuration, request fingerprint, send time, attempt), so importing twice adds
nothing. Every configuration's adapter is rebuilt (:func:`engines.registry.adapter_for_config`)
when its first exchange is read: one that cannot be (an unknown parameter, an endpoint the
adapter no longer speaks) aborts the import too. Every imported 2xx exchange is then parsed
with the *current* parser into answers (:func:`crawler.fetch.write_answers_in`), exactly as
the crawler does, in the same transaction: an import that fails or is interrupted leaves
the database as it found it.

A WARC written by another tool imports too when its request/response records target
a known engine host (the public URL of an engine): the configuration is the engine's
default one with the request's ``num_results``, the epoch the configuration's current one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http
import io
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import parse_qs, urlsplit

import sqlalchemy as sa

from store.errors import InputError, UserError
from store.models import Benchmark, Corpus, Crawl, EngineConfig, Epoch, Exchange, ParseOutcome
from store.types import utcnow

BUNDLE_FORMAT = "engines.bundle/1"
H_CONFIG = "WARC-Engines-Config"
H_EPOCH = "WARC-Engines-Epoch"
H_ATTEMPT = "WARC-Engines-Attempt"
H_TEXTS = "WARC-Engines-Query-Texts"
H_ELAPSED = "WARC-Engines-Elapsed-Ms"
H_FINISHED = "WARC-Engines-Finished-At"
ORIG = "X-Archive-Orig-"
_MOVED = ("content-length", "content-encoding", "transfer-encoding")
_BATCH = 500
# Bounds on what an import decompresses (a 9 KB gzip bomb must not become gigabytes): one
# record's body at most MAX_RECORD_BYTES once decoded (twice the crawler's default
# --max-body, far above any real answer); the whole bundle at most MAX_TOTAL_RATIO times its
# file size, and never less than MIN_TOTAL_BYTES; bodies held in memory at once (a batch of
# rows, records waiting for their partner) at most MAX_HELD_BYTES.
MAX_RECORD_BYTES = 32 * 2**20
MAX_TOTAL_RATIO = 100
MIN_TOTAL_BYTES = 256 * 2**20
MAX_HELD_BYTES = 64 * 2**20


def _warc_date(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_date(text: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def fingerprint(method: str, url: str, body: bytes | None) -> str:
    """The crawler's request fingerprint (crawler.fetch.Fetcher._archive)."""
    return hashlib.sha256(b"\0".join([method.encode(), url.encode(), body or b""])).hexdigest()


# --------------------------------------------------------------------------- export


@dataclass
class ExportSummary:
    path: Path
    exchanges: int = 0
    records: int = 0
    configs: int = 0
    transport_errors: int = 0
    bytes: int = 0


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
        out.append((ORIG + k if k.lower() in _MOVED else k, str(v)))
    out.append(("Content-Length", str(body_len)))
    return StatusAndHeaders(f"{status} {reason}", out, protocol="HTTP/1.1")


def _warcinfo_fields(session, configs: list[EngineConfig], epoch_sel: dict[int, list[int] | None]) -> bytes:
    from engines import code_version

    lines = [f"software: engines/{code_version()}", f"format: {BUNDLE_FORMAT}", "conformsTo: WARC/1.1",
             f"created: {_warc_date(utcnow())}"]
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
                    "started_at": _warc_date(e.started_at) if e.started_at else None,
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
    from warcio.warcwriter import WARCWriter

    path = Path(out)
    if not path.parent.exists():
        raise InputError(f"directory {path.parent} for --out {path} does not exist; create it first")
    summary = ExportSummary(path=path)
    tmp = path.with_name(path.name + ".part")
    with db.session() as s:
        configs = _select_configs(s, engines)
        if not configs:
            raise InputError("no remote engine configurations in this database: nothing to export (crawl first)")
        epoch_sel = _epoch_filter(s, configs, epochs)
        info = _warcinfo_fields(s, configs, epoch_sel)
    hashes = {c.id: c.config_hash for c in configs}
    ex = Exchange.__table__
    cols = exchange_columns()
    try:
        with open(tmp, "wb") as fh:
            writer = WARCWriter(fh, gzip=path.name.endswith(".gz"), warc_version="WARC/1.1")
            rec = writer.create_warc_record(path.name, "warcinfo", payload=io.BytesIO(info), length=len(info),
                                            warc_content_type="application/warc-fields",
                                            warc_headers_dict={"WARC-Filename": path.name})
            writer.write_record(rec)
            summary.records += 1
            for cid in hashes:
                q = sa.select(*cols).where(ex.c.config_id == cid).order_by(ex.c.sent_at, ex.c.id)
                if epoch_sel[cid] is not None:
                    q = q.where(ex.c.epoch.in_(epoch_sel[cid] or [-1]))
                # A server-side cursor on PostgreSQL, batches on SQLite: never the whole table in memory.
                with db.engine.connect() as conn:
                    result = conn.execution_options(stream_results=True, yield_per=1000).execute(q)
                    for row in result:
                        _write_exchange(writer, row, hashes[cid], summary)
                        if progress is not None:
                            progress(summary.exchanges)
        summary.configs = len(hashes)
        summary.bytes = tmp.stat().st_size
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return summary


def exchange_columns() -> list:
    """The exchange columns :func:`_write_exchange` reads (export and publish select these)."""
    ex = Exchange.__table__
    return [ex.c.id, ex.c.config_id, ex.c.attempt, ex.c.epoch, ex.c.query_texts, ex.c.method, ex.c.url,
            ex.c.request_headers, ex.c.request_body, ex.c.status_code, ex.c.response_headers, ex.c.response_body,
            ex.c.transport_error, ex.c.sent_at, ex.c.finished_at, ex.c.elapsed_ms, ex.c.body_truncated]


def _write_exchange(writer, row, config_hash: str, summary: ExportSummary) -> None:
    url = row.url
    date = _warc_date(row.sent_at)
    req_body = bytes(row.request_body) if row.request_body is not None else b""
    meta = {
        "WARC-Date": date,
        H_CONFIG: config_hash,
        H_EPOCH: str(row.epoch),
        H_ATTEMPT: str(row.attempt),
        H_TEXTS: json.dumps(list(row.query_texts), ensure_ascii=True),
    }
    if row.elapsed_ms is not None:
        meta[H_ELAPSED] = repr(float(row.elapsed_ms))
    if row.finished_at is not None:
        meta[H_FINISHED] = _warc_date(row.finished_at)
    req = writer.create_warc_record(
        url, "request", payload=io.BytesIO(req_body), length=len(req_body),
        http_headers=_http_request_block(row.method, url, dict(row.request_headers or {})),
        warc_headers_dict=meta,
    )
    req_id = req.rec_headers.get_header("WARC-Record-ID")
    if row.status_code is None:
        payload = json.dumps({"transport_error": row.transport_error, "elapsed_ms": row.elapsed_ms},
                             ensure_ascii=False).encode("utf-8")
        second = writer.create_warc_record(
            url, "metadata", payload=io.BytesIO(payload), length=len(payload),
            warc_content_type="application/json",
            warc_headers_dict={"WARC-Date": date, "WARC-Concurrent-To": req_id, "WARC-Refers-To": req_id},
        )
        summary.transport_errors += 1
    else:
        body = bytes(row.response_body) if row.response_body is not None else b""
        second = writer.create_warc_record(
            url, "response", payload=io.BytesIO(body), length=len(body),
            http_headers=_http_response_block(row.status_code, dict(row.response_headers or {}), len(body)),
            # A body cut at --max-body says so (WARC 1.1 §5.13).
            warc_headers_dict={"WARC-Date": date, "WARC-Concurrent-To": req_id,
                               **({"WARC-Truncated": "length"} if row.body_truncated else {})},
        )
    req.rec_headers.add_header("WARC-Concurrent-To", second.rec_headers.get_header("WARC-Record-ID"))
    writer.write_record(req)
    writer.write_record(second)
    summary.records += 2
    summary.exchanges += 1


# --------------------------------------------------------------------------- import


@dataclass
class ImportSummary:
    records: int = 0
    exchanges_read: int = 0
    added: int = 0
    duplicates: int = 0
    configs_added: int = 0
    answers: int = 0
    parse_failures: int = 0
    unpaired: int = 0
    foreign: int = 0
    configs: set[int] = field(default_factory=set)
    seconds_archive: float = 0.0  # reading, verifying and inserting the exchanges (one transaction)
    seconds_parse: float = 0.0  # parsing them into answers afterwards


class BadBundle(UserError):
    pass


@dataclass
class _Rec:
    index: int
    rid: str
    type: str
    uri: str
    date: str
    headers: dict[str, str]  # WARC headers
    http_line: str  # requests: "METHOD"; responses: "STATUS REASON"
    http_headers: list[tuple[str, str]]
    body: bytes

    def name(self) -> str:
        return f"record {self.index} ({self.type} {self.rid} {self.uri})"


class _TooLarge(Exception):
    pass


def _total_cap(size: int) -> int:
    return max(MIN_TOTAL_BYTES, MAX_TOTAL_RATIO * size)


def _bounded_iterator(fh, cap: int):
    """warcio's ArchiveIterator whose gzip reader stops (``_TooLarge``) after ``cap``
    decompressed bytes, headers and padding included."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.bufferedreaders import DecompressingBufferedReader

    class Counting(DecompressingBufferedReader):
        def _process_read(self, data):
            super()._process_read(data)
            if self.num_read > cap:
                raise _TooLarge(f"more than {cap:,} bytes")

    it = ArchiveIterator(fh, check_digests=True)
    it.reader = Counting(it.fh, block_size=it.reader.block_size)
    return it


def _read_capped(stream, cap: int) -> bytes:
    """All of ``stream``, or ``_TooLarge`` as soon as it passes ``cap`` bytes."""
    parts, n = [], 0
    while True:
        chunk = stream.read(min(1 << 20, cap + 1 - n))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        n += len(chunk)
        if n > cap:
            raise _TooLarge(f"a body of more than {cap:,} bytes")


def _records(fh, label: str, size: int = 0) -> Iterator[_Rec]:
    """Every record, fully read and digest-verified; BadBundle names the first bad one."""
    index = 0
    last = "the start of the file"
    cap = _total_cap(size)
    it = _bounded_iterator(fh, cap)
    seen: set[str] = set()
    decoded = 0
    while True:
        try:
            record = next(it)
        except StopIteration:
            return
        except _TooLarge as exc:
            raise _bomb(label, f"record {index + 1} (after {last})", exc) from None
        except Exception as exc:  # noqa: BLE001 - any decoding failure is a bad bundle
            raise BadBundle(f"{label}: record {index + 1} (after {last}) is truncated or corrupt "
                            f"({type(exc).__name__}: {str(exc)[:120]}); nothing was imported") from None
        index += 1
        h = record.rec_headers
        rid = h.get_header("WARC-Record-ID") or "?"
        rtype = h.get_header("WARC-Type") or "?"
        uri = h.get_header("WARC-Target-URI") or ""
        here = f"record {index} ({rtype} {rid} {uri})".replace("  ", " ")
        if rid in seen and rtype != "warcinfo":
            raise BadBundle(f"{label}: {here} repeats the WARC-Record-ID of an earlier record (record ids "
                            "must be unique: it could pair a request with another's answer); nothing was imported")
        seen.add(rid)
        try:
            body = _read_capped(record.content_stream() if rtype in ("response", "request") else record.raw_stream,
                                MAX_RECORD_BYTES)
            # Drain what content_stream left (it stops at the decoded end) so the digests see every byte.
            while record.raw_stream.read(1 << 20):
                pass
            decoded += len(body)
            if decoded > cap:
                raise _TooLarge(f"more than {cap:,} bytes")
        except _TooLarge as exc:
            raise _bomb(label, here, exc) from None
        except Exception as exc:  # noqa: BLE001
            raise BadBundle(f"{label}: {here} is truncated or corrupt ({type(exc).__name__}: {str(exc)[:120]}); "
                            "nothing was imported") from None
        has_digest = h.get_header("WARC-Block-Digest") or h.get_header("WARC-Payload-Digest")
        checker = record.digest_checker
        if checker.passed is False or checker.problems:
            raise BadBundle(f"{label}: {here} failed its digest check ({'; '.join(checker.problems)[:160]}); "
                            "the bundle was changed or damaged; nothing was imported")
        if has_digest and checker.passed is not True:
            raise BadBundle(f"{label}: {here} is truncated (its digest could not be verified); nothing was imported")
        if h.get_header(H_CONFIG) and not has_digest:
            raise BadBundle(f"{label}: {here} carries no digest; nothing was imported")
        hh = record.http_headers
        yield _Rec(index, rid, rtype, uri, h.get_header("WARC-Date") or "", dict(h.headers),
                   (hh.protocol if rtype == "request" else hh.statusline) if hh is not None else "", list(hh.headers) if hh is not None else [], body)
        last = here


def _bomb(label: str, where: str, exc: _TooLarge) -> BadBundle:
    return BadBundle(f"{label}: {where} decompresses to {exc} (limits: {MAX_RECORD_BYTES // 2**20} MiB per "
                     f"record, {MAX_TOTAL_RATIO}x the file size in total); refused as a decompression bomb; "
                     "nothing was imported")


def _restore_headers(pairs: list[tuple[str, str]], ours: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    if ours:
        for k, v in pairs:
            if k.lower() == "content-length":
                continue  # ours: the length of the decoded body; the original is X-Archive-Orig-
            if k.startswith(ORIG) or k.lower().startswith(ORIG.lower()):
                k = k[len(ORIG):]
            out[k] = v
    else:
        for k, v in pairs:
            if k.lower() in ("transfer-encoding", "content-encoding"):
                continue  # the body was decoded by the reader
            out[k.lower()] = v
    return out


def _int_in(value: Any, low: int, name: str) -> int:
    """An integer column value in low..2**31-1 (a bigger one would fail the INSERT on PostgreSQL)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{name} {value!r} is not an integer")
    n = int(value)
    if not low <= n < 2**31:
        raise ValueError(f"{name} {n} is out of range {low}..{2**31 - 1}")
    return n


def _our_fields(req: _Rec, label: str) -> tuple[int, int, list[str], float | None, dt.datetime | None]:
    """Epoch, attempt, query texts, elapsed ms and finish time from our headers; BadBundle names
    the record and the header when one of them is not what ``export`` writes."""
    import math

    name = ""
    try:
        name = H_EPOCH
        epoch = _int_in(req.headers.get(H_EPOCH, "0"), 0, "epoch")
        name = H_ATTEMPT
        attempt = _int_in(req.headers.get(H_ATTEMPT, "1"), 1, "attempt")
        name = H_TEXTS
        texts = json.loads(req.headers.get(H_TEXTS, "[]"))
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValueError("not a JSON list of strings")
        name = H_ELAPSED
        elapsed = float(req.headers[H_ELAPSED]) if H_ELAPSED in req.headers else None
        if elapsed is not None and not math.isfinite(elapsed):
            raise ValueError("not a finite number")
        name = H_FINISHED
        finished = _parse_date(req.headers[H_FINISHED]) if H_FINISHED in req.headers else None
    except (ValueError, TypeError) as exc:
        raise BadBundle(f"{label}: {req.name()} has a bad {name} value {str(req.headers.get(name))[:60]!r} "
                        f"({str(exc)[:80]}); nothing was imported") from None
    return epoch, attempt, texts, elapsed, finished


def _check_identity(c: Any, h: str, label: str) -> None:
    """A configuration a bundle describes must be what its hash says: the hash recomputed from
    its parameters, the engine and endpoint version those of the parameters, a known engine."""
    from engines.base import config_hash
    from engines.registry import ENGINES

    params = c.get("params") if isinstance(c, dict) else None
    if not isinstance(params, dict):
        raise BadBundle(f"{label}: the warcinfo record describes configuration {h[:12]} without parameters; "
                        "nothing was imported")
    if config_hash(params) != h:
        raise BadBundle(f"{label}: configuration {h[:12]} in the warcinfo record does not match its parameters "
                        f"(they hash to {config_hash(params)[:12]}); the bundle was changed; nothing was imported")
    engine = c.get("engine")
    if engine not in ENGINES or params.get("engine") != engine or params.get("endpoint_version") != c.get(
            "endpoint_version"):
        raise BadBundle(f"{label}: configuration {h[:12]} in the warcinfo record names engine {engine!r} "
                        f"(endpoint {c.get('endpoint_version')!r}) but its parameters say {params.get('engine')!r} "
                        f"({params.get('endpoint_version')!r}), or the engine is unknown; nothing was imported")


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _origin(url: str) -> tuple[str, str, int | None] | None:
    try:
        p = urlsplit(url)
        port = p.port or {"http": 80, "https": 443}.get(p.scheme)
    except ValueError:
        return None
    return (p.scheme, (p.hostname or "").lower(), port)


def _expected_host(engine: str, params: dict[str, Any]) -> str:
    from engines.registry import ENGINES

    if "stand_in" in params:
        return "a loopback address: a stand-in"
    base = params.get("base_url") or getattr(ENGINES.get(engine), "DEFAULT_URL", "") or "?"
    return urlsplit(base).netloc or base


def _url_belongs(engine: str, params: dict[str, Any], url: str) -> bool:
    """Whether an exchange's target URL is one its configuration sends to: the configuration's
    base URL (or the engine's public one); a stand-in configuration, any loopback port."""
    from engines.registry import ENGINES

    got = _origin(url)
    if got is None or got[0] not in ("http", "https"):
        return False
    if "stand_in" in params:
        return _is_loopback(got[1])
    base = params.get("base_url") or getattr(ENGINES.get(engine), "DEFAULT_URL", None)
    return bool(base) and got == _origin(base)


def _known_hosts() -> dict[str, str]:
    from engines.registry import ENGINES

    return {urlsplit(cls.DEFAULT_URL).netloc: name for name, cls in ENGINES.items()}


def _foreign_identity(engine: str, method: str, url: str, body: bytes) -> tuple[Any, list[str]]:
    """(adapter, query texts) of a request another tool archived, from the engine's request shape."""
    from engines.registry import adapter_for_config

    q = parse_qs(urlsplit(url).query)
    data: Any = {}
    if body:
        try:
            data = json.loads(body)
        except ValueError:
            data = {}
    params: dict[str, Any] = {}
    if engine == "leansearch":
        texts = list(data.get("query") or []) if isinstance(data, dict) else []
        if isinstance(data, dict) and data.get("num_results"):
            params["num_results"] = int(data["num_results"])
    elif engine == "leanfinder":
        texts = [data["inputs"]] if isinstance(data, dict) and "inputs" in data else []
        if isinstance(data, dict) and data.get("top_k"):
            params["num_results"] = int(data["top_k"])
        if isinstance(data, dict) and data.get("version") is not None:
            params["version"] = data["version"]
    elif engine == "leanexplore":
        texts = q.get("q", [])[:1]
        if q.get("limit"):
            params["num_results"] = int(q["limit"][0])
        if q.get("packages"):
            params["packages"] = q["packages"][0]
    else:  # loogle
        texts = q.get("q", [])[:1]
    return adapter_for_config(engine, params), [str(t) for t in texts]


def import_bundle(db, path: str | Path, *, progress=None) -> ImportSummary:
    """Import a WARC bundle: all exchanges and the answers parsed from them in one transaction."""
    from engines import code_version
    from store.writes import ensure_config

    path = Path(path)
    if not path.is_file():
        raise InputError(f"bundle {path} does not exist; give the path of a .warc.gz file")
    label = str(path)
    summary = ImportSummary()
    t0 = time.perf_counter()
    hosts = _known_hosts()
    configs_by_hash: dict[str, int] = {}
    adapters: dict[int, Any] = {}  # config id -> its rebuilt adapter (checked before its exchanges are written)
    config_meta: dict[int, tuple[str, dict[str, Any]]] = {}  # config id → (engine, params)
    info_configs: dict[str, dict[str, Any]] = {}
    info_epochs: list[dict[str, Any]] = []
    pending: dict[str, _Rec] = {}  # requests (or responses) waiting for their partner, by record id
    by_uri: dict[tuple[str, bool], list[str]] = {}  # (URI, is a request) → pending record ids, in order
    held = [0, 0]  # body bytes in `rows`, in `pending`
    rows: list[dict[str, Any]] = []

    with db.session() as s, s.begin(), open(path, "rb") as fh:
        crawl = Crawl(hostname=socket.gethostname(), pid=os.getpid(), worker="import", code_version=code_version(),
                      args={"import": path.name}, status="imported")
        s.add(crawl)
        s.flush()
        crawl_id = crawl.id

        def config_id_for(h: str, rec: _Rec) -> int:
            if h in configs_by_hash:
                return configs_by_hash[h]
            from engines.registry import adapter_for_config

            stored = s.execute(sa.select(EngineConfig.id, EngineConfig.engine, EngineConfig.params)
                               .where(EngineConfig.config_hash == h)).one_or_none()
            found = stored.id if stored is not None else None
            c = info_configs.get(h) if stored is None else {"engine": stored.engine, "params": stored.params}
            if c is None:
                raise BadBundle(f"{label}: {rec.name()} names configuration {h[:12]} that the warcinfo record "
                                "does not describe; nothing was imported")
            if stored is None:
                _check_identity(c, h, label)
            try:
                adapter = adapter_for_config(c["engine"], c.get("params"))
            except UserError as exc:
                raise BadBundle(f"{label}: configuration {h[:12]} ({c.get('label') or c['engine']}) cannot be "
                                f"parsed by this version: {exc.message}; nothing was imported") from None
            if found is not None:
                config_meta[found] = (stored.engine, dict(stored.params or {}))
            if found is None:
                cfg = ensure_config(s, engine=c["engine"], endpoint_version=c["endpoint_version"], params=c["params"],
                                    config_hash=h, label=c.get("label"), result_cap=c.get("result_cap"),
                                    licence=c.get("licence"))
                s.flush()
                found = cfg.id
                config_meta[found] = (c["engine"], dict(c["params"]))
                summary.configs_added += 1
            configs_by_hash[h] = found
            adapters[found] = adapter
            return found

        def flush() -> None:
            if not rows:
                return
            by_cfg: dict[int, list[dict[str, Any]]] = {}
            for r in rows:
                by_cfg.setdefault(r["config_id"], []).append(r)
            new: list[dict[str, Any]] = []
            for cid, group in by_cfg.items():
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
                        summary.duplicates += 1
                        continue
                    have.add(key)
                    new.append(r)
            if new:
                s.execute(sa.insert(Exchange), new)
                summary.added += len(new)
            rows.clear()
            held[0] = 0

        def exchange(req: _Rec, second: _Rec) -> None:
            h = req.headers.get(H_CONFIG)
            method = req.http_line.strip().upper()
            body = req.body or None
            if h:
                cid = config_id_for(h, req)
                if not _url_belongs(*config_meta[cid], req.uri):
                    engine, params = config_meta[cid]
                    raise BadBundle(f"{label}: {req.name()} is filed under configuration {h[:12]} ({engine}) but "
                                    f"targets {urlsplit(req.uri).netloc or repr(req.uri)[:80]}, not that configuration's "
                                    f"host ({_expected_host(engine, params)}); nothing was imported")
                epoch, attempt, texts, elapsed, finished = _our_fields(req, label)
                ours = True
            else:
                engine = hosts.get(urlsplit(req.uri).netloc)
                if engine is None:
                    summary.unpaired += 1  # not an engine exchange: ignored
                    return
                try:
                    adapter, texts = _foreign_identity(engine, method, req.uri, req.body)
                except (ValueError, TypeError, AttributeError, UserError) as exc:
                    raise BadBundle(f"{label}: {req.name()}: its request cannot be read as a {engine} query "
                                    f"({str(exc)[:160]}); nothing was imported") from None
                if not texts:
                    summary.unpaired += 1
                    return
                from crawler.plan import current_epoch
                from engines.base import config_hash

                ident = adapter.identity()
                hsh = config_hash(ident)
                if hsh not in info_configs:
                    info_configs[hsh] = {"engine": adapter.engine, "endpoint_version": adapter.endpoint_version,
                                         "params": ident, "label": adapter.engine,
                                         "result_cap": adapter.defaults.result_cap}
                cid = config_id_for(hsh, req)
                if cid not in epoch_of_foreign:
                    epoch_of_foreign[cid] = current_epoch(db, cid)
                epoch = epoch_of_foreign[cid]
                attempt, elapsed, finished, ours = 1, None, None, False
                summary.foreign += 1
            summary.configs.add(cid)
            try:
                sent_at = _parse_date(req.date)
            except (ValueError, TypeError):
                raise BadBundle(f"{label}: {req.name()} has a bad WARC-Date {req.date[:40]!r} (want an ISO 8601 "
                                "time); nothing was imported") from None
            row: dict[str, Any] = {
                "crawl_id": crawl_id, "config_id": cid, "attempt": attempt, "epoch": epoch, "query_texts": texts,
                "request_fingerprint": fingerprint(method, req.uri, body), "method": method, "url": req.uri,
                "request_headers": ({k: v for k, v in req.http_headers} if ours
                                    else {k.lower(): v for k, v in req.http_headers}),
                "request_body": body, "sent_at": sent_at, "finished_at": finished,
                "elapsed_ms": elapsed, "status_code": None, "response_headers": None, "response_body": None,
                "transport_error": None, "body_truncated": False,
            }
            if second.type == "metadata":
                try:
                    row["transport_error"] = json.loads(second.body).get("transport_error") or "transport error"
                except ValueError:
                    raise BadBundle(f"{label}: {second.name()} is not the JSON metadata of a transport error; "
                                    "nothing was imported") from None
            else:
                try:
                    row["status_code"] = int(second.http_line.split()[0])
                except (IndexError, ValueError):
                    raise BadBundle(f"{label}: {second.name()} has no HTTP status line; nothing was imported") from None
                row["response_headers"] = _restore_headers(second.http_headers, ours)
                row["response_body"] = second.body
                row["body_truncated"] = bool(second.headers.get("WARC-Truncated"))
            rows.append(row)
            summary.exchanges_read += 1
            held[0] += len(row["response_body"] or b"") + len(body or b"")
            if len(rows) >= _BATCH or held[0] > MAX_HELD_BYTES:
                flush()
                if progress is not None:
                    progress(summary.exchanges_read)

        epoch_of_foreign: dict[int, int] = {}
        for rec in _records(fh, label, path.stat().st_size):
            summary.records += 1
            if rec.type == "warcinfo":
                for line in rec.body.decode("utf-8", "replace").splitlines():
                    key, _, value = line.partition(":")
                    if key not in ("config", "epoch"):
                        continue
                    try:
                        c = json.loads(value)
                        if key == "config":
                            info_configs[str(c["config_hash"])] = c
                        else:
                            _int_in(c["epoch"], 0, "epoch")
                            c["started_at"] and _parse_date(c["started_at"])
                            info_epochs.append(c)
                    except (ValueError, TypeError, KeyError, AttributeError) as exc:
                        raise BadBundle(f"{label}: {rec.name()} has a bad {key!r} line ({type(exc).__name__}: "
                                        f"{str(exc)[:120]}): {value.strip()[:80]!r}; nothing was imported") from None
                continue
            if rec.type not in ("request", "response", "metadata"):
                continue
            partner_id = rec.headers.get("WARC-Concurrent-To")
            partner = pending.pop(partner_id, None) if partner_id else None
            if partner is None:
                # Tools without WARC-Concurrent-To: pair a response with the last request to the same URI
                # (an index by URI and side, so pairing stays linear in the records).
                if not partner_id:
                    stack = by_uri.get((rec.uri, rec.type != "request"))
                    while stack:
                        k = stack.pop()
                        if k in pending:
                            partner = pending.pop(k)
                            break
            if partner is None:
                if rec.type == "metadata" and not rec.headers.get(H_CONFIG) and partner_id is None:
                    continue  # free-standing metadata of another tool
                pending[rec.rid] = rec
                by_uri.setdefault((rec.uri, rec.type == "request"), []).append(rec.rid)
                held[1] += len(rec.body)
                if held[1] > MAX_HELD_BYTES:
                    raise BadBundle(f"{label}: at {rec.name()}, {len(pending):,} records wait for their partner "
                                    f"record, more than {MAX_HELD_BYTES // 2**20} MiB of bodies (a bundle keeps a "
                                    "request next to its response); nothing was imported")
                continue
            held[1] -= len(partner.body)
            req, second = (partner, rec) if partner.type == "request" else (rec, partner)
            if req.type != "request" or second.type == "request":
                raise BadBundle(f"{label}: {rec.name()} is linked to {partner.name()}, not a request/response pair; "
                                "nothing was imported")
            exchange(req, second)
        if summary.records == 0:
            raise BadBundle(f"{label}: no WARC records in the file (empty, or not a WARC); nothing was imported")
        for rec in pending.values():
            if rec.headers.get(H_CONFIG) or rec.type == "response" and rec.headers.get("WARC-Concurrent-To"):
                raise BadBundle(f"{label}: {rec.name()} has no partner record (request without response, or the "
                                "reverse); the bundle is incomplete; nothing was imported")
            summary.unpaired += 1
        flush()
        # Epoch labels and starts travel with the bundle; existing rows keep theirs.
        for e in info_epochs:
            cid = configs_by_hash.get(e["config_hash"])
            if cid is None or s.get(Epoch, (cid, e["epoch"])) is not None:
                continue
            s.add(Epoch(config_id=cid, epoch=e["epoch"], label=e.get("label"),
                        started_at=_parse_date(e["started_at"]) if e.get("started_at") else None))
        crawl.finished_at = utcnow()
        crawl.summary = {"added": summary.added, "duplicates": summary.duplicates, "records": summary.records}
        s.flush()
        summary.seconds_archive = time.perf_counter() - t0
        # In the same transaction: a failure or Ctrl-C while parsing leaves nothing behind.
        parse_imported(db, summary, into=s.connection(), adapters=adapters)
    summary.seconds_parse = time.perf_counter() - t0 - summary.seconds_archive
    return summary


def parse_imported(db, summary: ImportSummary, *, into=None, adapters: dict[int, Any] | None = None) -> None:
    """Answers from every unparsed 2xx exchange of the imported configurations (current parsers),
    in the transaction of connection ``into`` when given, else one transaction per batch.

    As the crawler writes them (its statements: an answer already current for the text stays,
    fetch once), 500 exchanges at a time, their parse in reparse's worker process while the
    previous batch is written (crawler.reparse._Parser) when there are many and a core is free.
    """
    from contextlib import nullcontext

    from crawler.fetch import _ANSWER, _LEASES_DONE, _PARSE
    from crawler.reparse import WORKER_MIN, _Parser, spare_core
    from engines.registry import adapter_for_config
    from store.benchmarks import query_sha256
    from store.writes import paused_gc, write_hit_rows

    if summary.configs:
        db.refresh_statistics("exchanges", "parse_outcomes", "answers", "hits", conn=into)
    answer = _ANSWER["postgresql" if db.dialect == "postgresql" else "sqlite"]
    for cid in sorted(summary.configs):
        adapter = (adapters or {}).get(cid)
        if adapter is None:
            with db.session() as s:
                cfg = s.get(EngineConfig, cid)
                adapter = adapter_for_config(cfg.engine, cfg.params)
        version = adapter.parser_version
        unparsed = (Exchange.config_id == cid, Exchange.status_code >= 200, Exchange.status_code < 300,
                    ~sa.exists().where(ParseOutcome.exchange_id == Exchange.id))
        with (nullcontext(into) if into is not None else db.session()) as s:
            todo = s.scalar(sa.select(sa.func.count()).select_from(Exchange).where(*unparsed))
        parser = _Parser(adapter, worker=todo >= WORKER_MIN and spare_core())

        def read(after: int):
            with (nullcontext(into) if into is not None else db.session()) as s:
                rows = s.execute(
                    sa.select(Exchange.id, Exchange.epoch, Exchange.query_texts, Exchange.status_code,
                              Exchange.response_headers, Exchange.response_body, Exchange.elapsed_ms)
                    .where(Exchange.id > after, *unparsed).order_by(Exchange.id).limit(_BATCH)
                ).all()
            return (rows, parser.submit(rows)) if rows else None

        try:
            ahead = read(0)
            while ahead is not None:
                batch, parsed = ahead
                ahead = read(batch[-1].id)
                results = parsed()
                # One transaction per batch of exchanges (a transaction each made import a
                # commit-bound 10 exchanges/s on PostgreSQL): outcomes, answers and hits together.
                with (nullcontext(into) if into is not None else db.engine.begin()) as conn, paused_gc():
                    outcomes = []
                    for ex, (lists, error, _) in zip(batch, results):
                        if lists is None:
                            # As the crawler records them; an outage body (Loogle "Restarting") too.
                            outcomes.append(dict(exchange_id=ex.id, parser_version=version, ok=False, error=error,
                                                 dropped_items=0, drop_reason=None))
                            summary.parse_failures += 1
                        else:
                            outcomes.append(dict(exchange_id=ex.id, parser_version=version, ok=True, error=None,
                                                 dropped_items=sum(d for _, d, _ in lists),
                                                 drop_reason=next((w for _, _, w in lists if w), None)))
                    conn.execute(_PARSE, outcomes)
                    hit_rows: list[tuple] = []
                    leases: dict[int, list[str]] = {}
                    fetched_at = utcnow()
                    for ex, (lists, _, _) in zip(batch, results):
                        if lists is None:
                            continue
                        shas = [query_sha256(t) for t in ex.query_texts]
                        for text, sha, (hits, dropped, _) in zip(ex.query_texts, shas, lists):
                            answer_id = conn.execute(answer, dict(
                                config_id=cid, query_text=text, query_sha256=sha, epoch=ex.epoch,
                                exchange_id=ex.id, parser_version=version, fetched_at=fetched_at,
                                n_returned=len(hits), latency_ms=ex.elapsed_ms, meta=None, superseded=False,
                                dropped_items=dropped)).scalar()
                            if answer_id is None:
                                continue  # answered meanwhile (another path); fetch-once keeps the first
                            hit_rows.extend((answer_id, *h, None, None, None) for h in hits)
                            summary.answers += 1
                        leases.setdefault(ex.epoch, []).extend(shas)
                    write_hit_rows(conn, hit_rows)
                    for epoch, shas in leases.items():
                        for i in range(0, len(shas), 500):
                            conn.execute(_LEASES_DONE, {"c": cid, "e": epoch, "shas": shas[i:i + 500]})
        finally:
            parser.close()
