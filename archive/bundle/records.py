"""Reading a bundle's records: every record fully read, digest-verified and bounded.

Bounds on what an import decompresses (a 9 KB gzip bomb must not become gigabytes): one
record's body at most MAX_RECORD_BYTES once decoded (twice the crawler's default
--max-body, far above any real answer); the whole bundle at most MAX_TOTAL_RATIO times its
file size, and never less than MIN_TOTAL_BYTES; bodies held in memory at once (a batch of
rows, records waiting for their partner) at most MAX_HELD_BYTES. The first bad record
(truncated, corrupt, a digest mismatch, a repeated record id, a bomb) is one
:class:`BadBundle` line naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from archive.bundle.warc import H_CONFIG, BadBundle

MAX_RECORD_BYTES = 32 * 2**20
MAX_TOTAL_RATIO = 100
MIN_TOTAL_BYTES = 256 * 2**20
MAX_HELD_BYTES = 64 * 2**20


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


def read_records(fh, label: str, size: int = 0) -> Iterator[Record]:
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
        yield Record(index, rid, rtype, uri, h.get_header("WARC-Date") or "", dict(h.headers),
                   (hh.protocol if rtype == "request" else hh.statusline) if hh is not None else "", list(hh.headers) if hh is not None else [], body)
        last = here


def _bomb(label: str, where: str, exc: _TooLarge) -> BadBundle:
    return BadBundle(f"{label}: {where} decompresses to {exc} (limits: {MAX_RECORD_BYTES // 2**20} MiB per "
                     f"record, {MAX_TOTAL_RATIO}x the file size in total); refused as a decompression bomb; "
                     "nothing was imported")
