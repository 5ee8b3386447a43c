"""``engines verify``, reading: every record of a leaderboard bundle, bounded and digest-checked.

The bundle is hostile input, bounded in total, not per record (the README: Reproduce a leaderboard):

- everything the bundle decompresses to, every record together: at most
  ``archive.bundle.records.MAX_TOTAL_RATIO`` (100) times the file's size, never less than
  ``MIN_TOTAL_BYTES`` (256 MiB) -- the reader of :func:`archive.bundle.records.checked_records`,
  which also makes every truncation damage (a cut inside a gzip member, or at a record
  boundary before the end record a bundle announces);
- the records verify keeps in memory (claim, benchmark, subsets, runs, name-list files,
  warcinfo): each JSON record at most ``MAX_JSON`` (64 MiB) and ``MAX_VALUES`` (4M) values,
  nested at most ``MAX_DEPTH`` (100) levels; all of them together at most ``MAX_KEPT``
  (128 MiB);
- exactly one claim, benchmark and subsets record; at most ``MAX_SYSTEMS`` (100) run
  records;
- the corpus is streamed to a temporary file (never held in memory), counted against the
  temporary-space bound (:mod:`pipelines.verify_temp`).

Any damage is a :class:`CannotVerify` (one line, exit 2) before anything is loaded.
:mod:`pipelines.verify` re-derives the claim from what :func:`read_contents` returns.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.publish import FORMAT, H_META, H_OPTIONS, H_ROLE, H_RUN
from store.errors import UserError

# Upper bounds on what verify keeps from a bundle (decompressed bytes).
MAX_JSON = 64 << 20  # one claim, benchmark, subsets or run record
MAX_VALUES = 4_000_000  # JSON values (and keys) in one record
MAX_KEPT = 128 << 20  # every record kept in memory, together
MAX_FILE = 64 << 20
MAX_INFO = 16 << 20
MAX_DEPTH = 100
MAX_HEADER = 1 << 20
MAX_SYSTEMS = 100  # systems scored (run records, and remote configurations × epochs)
MAX_PAIRS = 100_000  # systems × queries scored
_ONCE = ("claim", "benchmark", "subsets")
_KEPT = ("info", "claim", "benchmark", "subsets", "file", "run")


class CannotVerify(UserError):
    """Damaged bundle or absent corpus: one line, exit 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message if message.startswith("cannot verify") else f"cannot verify: {message}")


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
    kept: int = 0  # bytes held in memory
    unterminated: bool = False  # no end record announced: written before end records


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def json_shape(data: bytes) -> tuple[int, int]:
    """(nesting depth, up to MAX_DEPTH + 1; values and keys, an upper estimate) of a JSON
    text, in C-speed passes: strings stripped, then brackets alone, innermost pairs removed
    one level a pass."""
    stripped = _STRING.sub(b'""', data)
    values = 1 + sum(stripped.count(c) for c in (b",", b":", b"[", b"{"))
    brackets = stripped.translate(None, _NOT_BRACKET)
    depth = 0
    while brackets and depth <= MAX_DEPTH:
        brackets = brackets.replace(b"[]", b"").replace(b"{}", b"")
        depth += 1
    return depth, values


def load_json(data: bytes, where: str) -> Any:
    depth, values = json_shape(data)
    if depth > MAX_DEPTH:
        raise CannotVerify(f"{where} nests JSON deeper than {MAX_DEPTH} levels; the bundle is damaged or hostile")
    if values > MAX_VALUES:
        raise CannotVerify(f"{where} holds more than {MAX_VALUES:,} JSON values (the bound for one record); "
                           "refusing to read it")
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


def read_contents(path: Path, tmp: Path, budget=None) -> Contents:
    """Every record of the bundle, bounded (see the module) and digest-checked; the corpus
    written under ``tmp`` (``budget``: :class:`pipelines.verify_temp.TempBudget`, charged)."""
    from archive.bundle.records import Walk, checked_records
    from archive.bundle.warc import BadBundle

    label = str(path)
    out = Contents()
    walk = Walk()
    try:
        with open(path, "rb") as fh:
            for record in checked_records(fh, label, path.stat().st_size, walk, tail="nothing was verified"):
                _read_record(record, walk.records, label, tmp, out, budget)
    except BadBundle as exc:
        raise CannotVerify(exc.message) from None
    out.unterminated = walk.unterminated
    if walk.records == 0:
        raise CannotVerify(f"{label}: no WARC records in the file (empty, or not a WARC)")
    if out.claim is None or not isinstance(out.options, dict) or out.benchmark is None:
        raise CannotVerify(f"{label}: not a leaderboard bundle ({FORMAT}: no claim, options or benchmark record); "
                           "`engines publish` writes one (`engines import` still reads its exchanges)")
    return out


def _limit(role: str | None) -> int | None:
    """The bound of one record of ``role`` (None: only the bundle's total bound)."""
    if role == "info":
        return MAX_INFO
    if role in ("claim", "benchmark", "subsets", "run", "run-file"):
        return MAX_JSON
    if role is None or role == "corpus":
        return None
    return MAX_FILE


def _read_record(record, index: int, label: str, tmp: Path, out: Contents, budget) -> None:
    """One record: bounded, read (or only drained), digest-checked, then kept in ``out`` by role."""
    h = record.rec_headers
    rtype = h.get_header("WARC-Type") or "?"
    here = f"{label}: record {index} ({rtype} {h.get_header('WARC-Target-URI') or ''})"
    role = h.get_header(H_ROLE) if rtype == "resource" else ("info" if rtype == "warcinfo" else None)
    try:
        length = int(h.get_header("Content-Length") or "0")
    except ValueError:
        raise CannotVerify(f"{here} has no valid Content-Length; the bundle is damaged") from None
    if role in _ONCE and getattr(out, role) is not None:
        raise CannotVerify(f"{here} is a second {role} record; a leaderboard bundle has exactly one "
                           f"(which {role} would be verified?): refused")
    if role == "run" and len(out.runs) >= MAX_SYSTEMS:
        raise CannotVerify(f"{here}: more than {MAX_SYSTEMS} run records (the bound on systems verified); refused")
    # Exchanges are read (and stored) by engines import; here only drained, so that
    # truncation and digests are checked before anything is loaded.
    limit = _limit(role)
    kept = role in _KEPT
    if limit is not None and length > limit or kept and out.kept + length > MAX_KEPT:
        raise CannotVerify(f"{here} is {length:,} bytes, over the bound for a {role} record ({limit or 0:,} bytes; "
                           f"{MAX_KEPT:,} for every record verify keeps, together); refusing to read it")
    digest = hashlib.sha256()
    meta = _header_json(h.get_header(H_META), here) or {}
    if not isinstance(meta, dict):
        raise CannotVerify(f"{here}: its {H_META} header is not a JSON object; the bundle is damaged")
    corpus_file = tmp / f"corpus-{index}.jsonl{'.gz' if str(meta.get('file', '')).endswith('.gz') else ''}"
    total, chunks = _drain(record, here, role, limit, corpus_file if role == "corpus" else None, digest, budget)
    _check_digests(record, here, role, total, length)
    if not kept:
        if role == "corpus":
            meta["_file_sha256"] = digest.hexdigest()
            out.corpora.append((meta, corpus_file))
        return
    data = b"".join(chunks)
    out.kept += len(data)
    _keep(role, data, meta, h, here, out)


def _keep(role: str, data: bytes, meta: dict[str, Any], h, here: str, out: Contents) -> None:
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
        depth, values = json_shape(data)
        if depth > MAX_DEPTH or values > MAX_VALUES:
            raise CannotVerify(f"{here} nests deeper than {MAX_DEPTH} levels or holds more than {MAX_VALUES:,} "
                               "JSON values (the bounds for one record); refusing to read it")
        out.runs.append((_header_json(h.get_header(H_RUN), here) or {}, data))


def _drain(record, here: str, role: str | None, limit: int | None, corpus_file: Path | None,
           digest, budget) -> tuple[int, list[bytes]]:
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
            except Exception as exc:  # noqa: BLE001 - the reader's bounds and damage included
                from archive.bundle.records import reading_error

                raise CannotVerify(reading_error(exc, here, "nothing was verified").message) from None
            if not block:
                break
            total += len(block)
            if limit is not None and total > limit:
                raise CannotVerify(f"{here} holds more than {limit:,} bytes; refusing to read it")
            if sink is not None:
                if budget is not None:
                    budget.charge(len(block), here)
                sink.write(block)
                digest.update(block)
            elif role in _KEPT:
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
