"""The bundle's format, shared by export and import: the WARC header names of our own
fields, the date form, the request fingerprint; and what an import reports (its summary,
and the error every refused import raises)."""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from dataclasses import dataclass, field

from store.errors import UserError

BUNDLE_FORMAT = "engines.bundle/1"
H_CONFIG = "WARC-Engines-Config"
H_EPOCH = "WARC-Engines-Epoch"
H_ATTEMPT = "WARC-Engines-Attempt"
H_TEXTS = "WARC-Engines-Query-Texts"
H_ELAPSED = "WARC-Engines-Elapsed-Ms"
H_FINISHED = "WARC-Engines-Finished-At"
ORIG = "X-Archive-Orig-"
# Response headers that no longer describe the stored (decoded) body: written as ORIG + name.
MOVED = ("content-length", "content-encoding", "transfer-encoding")
IMPORT_BATCH = 500  # exchanges an import reads (and parses) a batch


class BadBundle(UserError):
    pass


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
    unterminated: bool = False  # no end record announced (written before end records): a cut at a record boundary is unseen
    configs: set[int] = field(default_factory=set)
    # Reading, verifying and inserting the exchanges (one transaction), and parsing them into answers
    # as they are inserted (archive.bundle.parse.Feed: all but the last batch) ...
    seconds_archive: float = 0.0
    seconds_parse: float = 0.0  # ... then the last batch, any other unparsed exchange, and the commit


def warc_date(t: dt.datetime) -> str:
    """A time as a bundle writes it (``WARC-Date``, warcinfo fields): UTC, microseconds, ``Z``."""
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_warc_date(text: str) -> dt.datetime:
    """The inverse of :func:`warc_date` (a time without a zone is UTC)."""
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def fingerprint(method: str, url: str, body: bytes | None) -> str:
    """The crawler's request fingerprint (crawler.fetch.Fetcher._archive)."""
    return hashlib.sha256(b"\0".join([method.encode(), url.encode(), body or b""])).hexdigest()


def record_id(*parts: object) -> str:
    """A ``WARC-Record-ID`` derived from what the record holds (an RFC 9562 version-8 UUID
    made of the sha256 of ``parts``), never a random one: the same database and options
    write the same bundle, byte for byte, so a bundle's sha256 names what it holds."""
    h = hashlib.sha256()
    for part in parts:
        b = part if isinstance(part, bytes) else str(part).encode("utf-8")
        h.update(len(b).to_bytes(8, "big") + b)
    raw = bytearray(h.digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x80  # version 8 (custom)
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC variant
    return f"<urn:uuid:{uuid.UUID(bytes=bytes(raw))}>"
