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
with the *current* parser into answers (:func:`archive.outcome.write_outcomes`), exactly as
the crawler does, in the same transaction: an import that fails or is interrupted leaves
the database as it found it.

A WARC written by another tool imports too when its request/response records target
a known engine host (the public URL of an engine) and that engine's adapter recognises the
request (``read_request``, the inverse of its ``build_request``): the configuration is the
engine's default one with the parameters the request shows (``num_results``...), the epoch
the configuration's current one.

The rooms: :mod:`archive.bundle.warc` (the format's header names, dates, fingerprint),
:mod:`~archive.bundle.export`, :mod:`~archive.bundle.records` (reading records: digests,
decompression caps), :mod:`~archive.bundle.pairing`, :mod:`~archive.bundle.checks`
(identity and header checks), :mod:`~archive.bundle.foreign` (another tool's requests, read
by the engine's adapter), :mod:`~archive.bundle.importer` and :mod:`~archive.bundle.parse`
(answers from the imported exchanges). Their public names are importable from here: the one
writer (:class:`BundleWriter`, used by export and ``engines publish``), the one bounded record
reader (:func:`read_records`, used by import) and the date form (:func:`warc_date`,
:func:`parse_warc_date`).
"""

from __future__ import annotations

from archive.bundle.export import (
    BundleWriter, ExportSummary, exchange_columns, export_bundle, software_fields, warcinfo_fields,
)
from archive.bundle.importer import import_bundle
from archive.bundle.parse import parse_imported
from archive.bundle.records import (
    MAX_HELD_BYTES, MAX_RECORD_BYTES, MAX_TOTAL_RATIO, MIN_TOTAL_BYTES, Record, read_records,
)
from archive.bundle.warc import (
    BUNDLE_FORMAT, H_ATTEMPT, H_CONFIG, H_ELAPSED, H_EPOCH, H_FINISHED, H_TEXTS, ORIG, BadBundle, ImportSummary,
    parse_warc_date, record_id, warc_date, fingerprint,
)

__all__ = [
    "BUNDLE_FORMAT", "H_ATTEMPT", "H_CONFIG", "H_ELAPSED", "H_EPOCH", "H_FINISHED", "H_TEXTS", "ORIG",
    "MAX_HELD_BYTES", "MAX_RECORD_BYTES", "MAX_TOTAL_RATIO", "MIN_TOTAL_BYTES",
    "BadBundle", "BundleWriter", "ExportSummary", "ImportSummary", "Record", "exchange_columns", "export_bundle", "fingerprint",
    "import_bundle", "parse_imported", "parse_warc_date", "read_records", "record_id", "software_fields", "warc_date",
    "warcinfo_fields",
]
