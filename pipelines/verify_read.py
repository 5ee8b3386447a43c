"""``engines verify``, reading: every record of a leaderboard bundle, bounded and digest-checked.

The bundle is hostile input: every resource record is bounded in size before it is read
(decompressed bytes, not the compressed length), JSON is bounded in nesting depth, and
the corpus is streamed to a temporary file, never held in memory. Any damage is a
:class:`CannotVerify` (one line, exit 2) before anything is loaded. :mod:`pipelines.verify`
re-derives the claim from what :func:`read_contents` returns.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator

from pipelines.publish import FORMAT, H_META, H_OPTIONS, H_ROLE, H_RUN
from store.errors import UserError


# Upper bounds on what verify reads from a bundle (decompressed bytes).
MAX_JSON = 512 << 20  # claim, benchmark, subsets
MAX_RUN = 512 << 20
MAX_FILE = 64 << 20
MAX_INFO = 16 << 20
MAX_CORPUS = 16 << 30
MAX_DEPTH = 100
MAX_HEADER = 1 << 20


class CannotVerify(UserError):
    """Damaged bundle or absent corpus: one line, exit 2."""

    exit_code = 2


@dataclass
class Contents:
    info: dict[str, list[Any]] = field(default_factory=dict)
    claim: bytes | None = None
    options: dict[str, Any] | None = None
    claim_meta: dict[str, Any] = field(default_factory=dict)
    benchmark: bytes | None = None
    subsets: bytes | None = None
    files: list[tuple[dict[str, Any], bytes]] = field(default_factory=list)
    runs: list[tuple[dict[str, Any], bytes]] = field(default_factory=list)
    corpora: list[tuple[dict[str, Any], Path]] = field(default_factory=list)  # embedded, written to temp files


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


def json_depth(data: bytes) -> int:
    """Nesting depth of a JSON text (strings stripped first), in C-speed passes."""
    stripped = _STRING.sub(b'""', data)
    depth = best = 0
    # Only brackets matter; iterate over them alone.
    for m in re.finditer(rb"[\[\]{}]", stripped):
        if m.group() in (b"[", b"{"):
            depth += 1
            if depth > best:
                best = depth
                if best > MAX_DEPTH:
                    return best
        else:
            depth -= 1
    return best


def load_json(data: bytes, where: str) -> Any:
    if json_depth(data) > MAX_DEPTH:
        raise CannotVerify(f"{where} nests JSON deeper than {MAX_DEPTH} levels; the bundle is damaged or hostile")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise CannotVerify(f"{where} is not valid JSON ({str(exc)[:80]}); the bundle is damaged") from None


def _header_json(value: str | None, where: str) -> Any:
    if value is None:
        return None
    if len(value) > MAX_HEADER:
        raise CannotVerify(f"{where}: a header is longer than {MAX_HEADER} bytes")
    return load_json(value.encode("utf-8"), where)


def read_contents(path: Path, tmp: Path) -> Contents:
    """Every resource record of the bundle, size-bounded and digest-checked."""
    label = str(path)
    out = Contents()
    limits = {"claim": MAX_JSON, "benchmark": MAX_JSON, "subsets": MAX_JSON, "run": MAX_RUN, "file": MAX_FILE,
              "corpus": MAX_CORPUS}
    index = 0
    with open(path, "rb") as fh:
        it = iter(ArchiveIterator(fh, check_digests=True))
        while True:
            try:
                record = next(it)
            except StopIteration:
                break
            except Exception as exc:  # noqa: BLE001 - any decoding failure is a damaged bundle
                raise CannotVerify(f"{label}: record {index + 1} is truncated or corrupt ({type(exc).__name__}); "
                                   "nothing was verified") from None
            index += 1
            _read_record(record, index, label, limits, tmp, out)
    if index == 0:
        raise CannotVerify(f"{label}: no WARC records in the file (empty, or not a WARC)")
    if out.claim is None or not isinstance(out.options, dict) or out.benchmark is None:
        raise CannotVerify(f"{label}: not a leaderboard bundle ({FORMAT}: no claim, options or benchmark record); "
                           "`engines publish` writes one (`engines import` still reads its exchanges)")
    return out


def _read_record(record, index: int, label: str, limits: dict[str, int], tmp: Path, out: Contents) -> None:
    """One record: bounded, read (or only drained), digest-checked, then kept in ``out`` by role."""
    h = record.rec_headers
    rtype = h.get_header("WARC-Type") or "?"
    here = f"{label}: record {index} ({rtype} {h.get_header('WARC-Target-URI') or ''})"
    role = h.get_header(H_ROLE) if rtype == "resource" else ("info" if rtype == "warcinfo" else None)
    try:
        length = int(h.get_header("Content-Length") or "0")
    except ValueError:
        raise CannotVerify(f"{here} has no valid Content-Length; the bundle is damaged") from None
    # Exchanges are read (and stored) by engines import; here only drained, so that
    # truncation and digests are checked before anything is loaded.
    limit = MAX_INFO if role == "info" else limits.get(role, MAX_FILE) if role else MAX_CORPUS
    if length > limit:
        raise CannotVerify(f"{here} is {length:,} bytes, over the {limit:,}-byte bound for a {role} record; "
                           "refusing to read it")
    digest = hashlib.sha256()
    meta = _header_json(h.get_header(H_META), here) or {}
    corpus_file = tmp / f"corpus-{index}.jsonl{'.gz' if str(meta.get('file', '')).endswith('.gz') else ''}"
    total, chunks = _drain(record, here, role, limit, corpus_file if role == "corpus" else None, digest)
    _check_digests(record, here, role, total, length)
    if role is None:
        return
    data = b"".join(chunks)
    if role == "info":
        _read_info(data, here, out)
    elif role == "claim":
        out.claim = data
        out.options = _header_json(h.get_header(H_OPTIONS), here)
        out.claim_meta = meta
    elif role == "benchmark":
        out.benchmark = data
    elif role == "subsets":
        out.subsets = data
    elif role == "file":
        out.files.append((meta, data))
    elif role == "run":
        out.runs.append((_header_json(h.get_header(H_RUN), here) or {}, data))
    elif role == "corpus":
        meta["_file_sha256"] = digest.hexdigest()
        out.corpora.append((meta, corpus_file))


def _drain(record, here: str, role: str | None, limit: int, corpus_file: Path | None,
           digest) -> tuple[int, list[bytes]]:
    """(bytes read, the blocks kept): a corpus streamed to ``corpus_file`` and hashed on the
    way, another role's block kept in memory, an exchange only drained; never over ``limit``."""
    sink = None
    chunks: list[bytes] = []
    total = 0
    if corpus_file is not None:
        sink = open(corpus_file, "wb")  # noqa: SIM115
    try:
        while True:
            try:
                block = record.raw_stream.read(1 << 20)
            except Exception as exc:  # noqa: BLE001
                raise CannotVerify(f"{here} is truncated or corrupt ({type(exc).__name__}); nothing was verified") from None
            if not block:
                break
            total += len(block)
            if total > limit:
                raise CannotVerify(f"{here} holds more than {limit:,} bytes; refusing to read it")
            if sink is not None:
                sink.write(block)
                digest.update(block)
            elif role is not None:
                chunks.append(block)
    finally:
        if sink is not None:
            sink.close()
    return total, chunks


def _check_digests(record, here: str, role: str | None, total: int, length: int) -> None:
    h = record.rec_headers
    checker = record.digest_checker
    has_digest = h.get_header("WARC-Block-Digest") or h.get_header("WARC-Payload-Digest")
    if checker.passed is False or checker.problems:
        raise CannotVerify(f"{here} failed its digest check; the bundle was changed or damaged; nothing was verified")
    if has_digest and checker.passed is not True or record.http_headers is None and total != length:
        raise CannotVerify(f"{here} is truncated (its digest could not be verified); nothing was verified")
    if role not in ("info", None) and not has_digest:
        raise CannotVerify(f"{here} carries no digest; nothing was verified")


def _read_info(data: bytes, here: str, out: Contents) -> None:
    """The warcinfo lines verify uses: the format and publisher, and the JSON lines."""
    for line in data.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition(":")
        if sep and key in ("publish-format", "publisher"):
            out.info.setdefault(key, []).append(value.strip())
        elif sep and key in ("claim", "parser", "run", "corpus-ref", "file", "benchmark-dump", "config"):
            out.info.setdefault(key, []).append(load_json(value.encode("utf-8"), here))
