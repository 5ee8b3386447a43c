"""Reading a bundle's records: every record fully read, digest-verified and bounded.

Bounds on what an import decompresses (a 9 KB gzip bomb must not become gigabytes): one
record's body at most MAX_RECORD_BYTES once decoded (twice the crawler's default
--max-body, far above any real answer); the whole bundle at most MAX_TOTAL_RATIO times its
file size, and never less than MIN_TOTAL_BYTES; bodies held in memory at once (a batch of
rows, records waiting for their partner) at most MAX_HELD_BYTES. The first bad record
(truncated, corrupt, a digest mismatch, a repeated record id, a bomb) is one
:class:`BadBundle` line naming it.

Truncation is always damage, wherever the cut lands: a gzip member that stops before its
trailer (warcio reads such a member as the end of the file), a member that fails to
inflate part-way (warcio would print the error and read on as if the file ended), and --
for a bundle whose warcinfo record announces it (``WARC-Engines-End``, written by export
and publish since the end record was introduced) -- a file that stops exactly at a
record boundary before its end record (a ``resource`` record ``urn:engines:end`` whose
``WARC-Engines-Records`` counts the records before it). A bundle written before end
records has no such header: a cut at a record boundary cannot be seen in it
(:func:`checked_records` reports it as ``unterminated``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Iterator

from archive.bundle.warc import H_CONFIG, BadBundle

MAX_RECORD_BYTES = 32 * 2**20
MAX_TOTAL_RATIO = 100
MIN_TOTAL_BYTES = 256 * 2**20
MAX_HELD_BYTES = 64 * 2**20
END_URI = "urn:engines:end"
H_END = "WARC-Engines-End"  # on the warcinfo record: the bundle closes with END_URI
H_RECORDS = "WARC-Engines-Records"  # on the end record: how many records come before it


@dataclass
class Record:
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


class _Damaged(Exception):
    pass


def _bounded_iterator(fh, cap: int):
    """warcio's ArchiveIterator whose gzip reader stops (``_TooLarge``) after ``cap``
    decompressed bytes, headers and padding included, raises ``_Damaged`` on a member that
    fails to inflate part-way, and remembers (``reader.cut``) a last member that ended
    before its gzip trailer."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.bufferedreaders import DecompressingBufferedReader

    class Counting(DecompressingBufferedReader):
        cut = False

        def _process_read(self, data):
            super()._process_read(data)
            if self.num_read > cap:
                raise _TooLarge(f"more than {cap:,} bytes")

        def _init_decomp(self, decomp_type):
            self.fed = False  # bytes given to this member's decompressor
            super()._init_decomp(decomp_type)

        def _decompress(self, data):
            if self.decompressor and data and self.num_block_read:
                try:
                    return self.decompressor.decompress(data)
                except zlib.error as exc:  # warcio prints it and reads on as if the file ended
                    raise _Damaged(f"a gzip member does not inflate ({exc})") from None
            out = super()._decompress(data)
            self.fed = self.fed or bool(data and self.decompressor)
            return out

        def close_decompressor(self):
            d = self.decompressor
            if d is not None and hasattr(d, "eof") and not d.eof and self.fed:
                self.cut = True  # the member stopped before its trailer: the file was cut
            super().close_decompressor()

    it = ArchiveIterator(fh, check_digests=True)
    it.reader = Counting(it.fh, block_size=it.reader.block_size)
    return it


@dataclass
class Walk:
    """What :func:`checked_records` saw: records read, and whether the bundle announced an
    end record (``unterminated``: a bundle written before end records, whose cut at a record
    boundary cannot be seen)."""

    records: int = 0
    unterminated: bool = False


def checked_records(fh, label: str, size: int, walk: Walk, *, tail: str = "nothing was imported"):
    """warcio's records of the file, bounded in total (:func:`_total_cap`), each truncation
    (inside a gzip member, or at a record boundary before an announced end record) a
    BadBundle; the end record itself is checked and not yielded."""
    cap = _total_cap(size)
    it = _bounded_iterator(fh, cap)
    reader = it.reader  # the iterator drops it when it closes
    announced = ended = False
    while True:
        where = f"record {walk.records + 1}"
        try:
            record = next(it)
        except StopIteration:
            break
        except _TooLarge as exc:
            raise _bomb(label, where, exc, tail) from None
        except _Damaged as exc:
            raise BadBundle(f"{label}: {where} is corrupt ({exc}); {tail}") from None
        except Exception as exc:  # noqa: BLE001 - any decoding failure is a bad bundle
            raise BadBundle(f"{label}: {where} is truncated or corrupt ({type(exc).__name__}: "
                            f"{str(exc)[:120]}); {tail}") from None
        h = record.rec_headers
        if ended:
            raise BadBundle(f"{label}: {where} follows the end record ({END_URI}); two bundles joined, or "
                            f"damage; {tail}")
        if walk.records == 0:
            announced = bool(h.get_header(H_END))
        if h.get_header("WARC-Type") == "resource" and h.get_header("WARC-Target-URI") == END_URI:
            _check_end(record, walk.records, label, where, tail)
            ended = True
            continue
        walk.records += 1
        yield record
    if reader.cut:
        raise BadBundle(f"{label}: the file ends inside record {walk.records + 1} (its gzip member stops before "
                        f"its end): the bundle is truncated; {tail}")
    if announced and not ended:
        raise BadBundle(f"{label}: the file ends after record {walk.records}, before the end record its warcinfo "
                        f"record announces ({END_URI}): the bundle is truncated; {tail}")
    walk.unterminated = walk.records > 0 and not announced


def _check_end(record, before: int, label: str, where: str, tail: str) -> None:
    """The end record: its count of the records before it, its digest."""
    while record.raw_stream.read(1 << 16):
        pass
    try:
        count = int(record.rec_headers.get_header(H_RECORDS) or "")
    except ValueError:
        count = -1
    if count != before or record.digest_checker.passed is False:
        raise BadBundle(f"{label}: {where} (the end record) counts {count} records before it, the file has "
                        f"{before}: records were removed or added; {tail}")


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


def read_records(fh, label: str, size: int = 0, walk: Walk | None = None) -> Iterator[Record]:
    """Every record, fully read and digest-verified; BadBundle names the first bad one."""
    index = 0
    cap = _total_cap(size)
    seen: set[str] = set()
    decoded = 0
    for record in checked_records(fh, label, size, walk if walk is not None else Walk()):
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
        except _Damaged as exc:
            raise BadBundle(f"{label}: {here} is corrupt ({exc}); nothing was imported") from None
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
        yield Record(index, rid, rtype, uri, h.get_header("WARC-Date") or "", dict(h.headers),
                   (hh.protocol if rtype == "request" else hh.statusline) if hh is not None else "", list(hh.headers) if hh is not None else [], body)


def reading_error(exc: Exception, where: str, tail: str) -> BadBundle:
    """The one line for an exception raised while a record's block was read."""
    if isinstance(exc, _TooLarge):
        return BadBundle(f"{where}: the bundle decompresses to {exc} (bound: {MAX_TOTAL_RATIO}x its file size, at "
                         f"least {MIN_TOTAL_BYTES // 2**20} MiB); refused as a decompression bomb; {tail}")
    if isinstance(exc, _Damaged):
        return BadBundle(f"{where} is corrupt ({exc}); {tail}")
    return BadBundle(f"{where} is truncated or corrupt ({type(exc).__name__}: {str(exc)[:120]}); {tail}")


def _bomb(label: str, where: str, exc: _TooLarge, tail: str = "nothing was imported") -> BadBundle:
    return BadBundle(f"{label}: {where} decompresses to {exc} (limits: {MAX_RECORD_BYTES // 2**20} MiB per "
                     f"record, {MAX_TOTAL_RATIO}x the file size in total, at least {MIN_TOTAL_BYTES // 2**20} MiB); "
                     f"refused as a decompression bomb; {tail}")
