"""What kind of file this is, from its first bytes (gzip or not): a wrong kind of file given
to a command is named as what it is, with the command that reads it (issue 34, item 13),
instead of a parse error at line 1, or a WARC reader's dump of a database's bytes.

Only what is recognised with certainty is named; anything else is left to the command's
own reader and its own error lines.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

HEAD_BYTES = 64 * 1024

# kind -> (what it is, the command that reads it)
KINDS: dict[str, tuple[str, str]] = {
    "warc": ("a WARC bundle", "use `engines import FILE` (exchanges from engines export) or "
                              "`engines verify FILE` (a leaderboard from engines publish)"),
    "sqlite": ("a SQLite database", "pass it as --db FILE"),
    "trec-run": ("a TREC run", "use `engines run import FILE --bench B --name N`"),
    "jsonl-run": ("a JSONL run", "use `engines run import FILE --bench B --name N`"),
    "trec-qrels": ("a TREC qrels file (judgements, not a run)", "load the benchmark it belongs to with "
                                                                 "`engines bench load` (a BEIR folder)"),
    "corpus": ("a corpus (LeanSearch v2 JSONL)", "use `engines corpus load FILE --name N`"),
    "benchmark": ("a MathlibQR/MathlibMPR benchmark", "use `engines bench load FILE`"),
    "zip": ("a zip archive", "unpack it first"),
}


def _head(path: Path) -> bytes:
    with open(path, "rb") as fh:
        raw = fh.read(HEAD_BYTES)
    if raw[:2] == b"\x1f\x8b":  # a gzip of anything: look inside
        try:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, HEAD_BYTES)
        except zlib.error:
            return b""
    return raw


def _first_line(head: bytes) -> bytes:
    for line in head.removeprefix(b"\xef\xbb\xbf").splitlines():
        if line.strip():
            return line.strip()
    return b""


def _json_kind(line: bytes) -> str | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if ("ranked" in obj or "scores" in obj) and ("qid" in obj or "query" in obj):
        return "jsonl-run"
    if "name" in obj and "kind" in obj and ("module_name" in obj or "signature" in obj):
        return "corpus"
    return None


def sniff(path: str | Path) -> str | None:
    """The kind of file at ``path`` (a key of :data:`KINDS`), or None when unsure."""
    path = Path(path)
    try:
        if not path.is_file():
            return None
        head = _head(path)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if head.startswith(b"WARC/"):
        return "warc"
    if head.startswith(b"SQLite format 3\x00"):
        return "sqlite"
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    line = _first_line(head)
    if line.startswith(b"{"):
        return _json_kind(line)
    if line.startswith(b"["):
        text = head[:4096]
        qr = b'"full_name"' in text and b'"q1' in text
        return "benchmark" if qr or b'"formal_main_result"' in text else None
    fields = line.split()
    if len(fields) == 6 and fields[1] in (b"Q0", b"q0", b"0") and _number(fields[3]) and _number(fields[4]):
        return "trec-run"
    if len(fields) == 4 and fields[1] in (b"0", b"Q0") and fields[3].lstrip(b"-").isdigit():
        return "trec-qrels"
    return None


def _number(value: bytes) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def refuse_other_kinds(path: str | Path, accepted: tuple[str, ...], wanted: str) -> None:
    """Raise one :class:`store.errors.InputError` line when the file is recognised as a kind
    not in ``accepted``: what it is, and the command that reads it."""
    from store.errors import InputError

    kind = sniff(path)
    if kind is None or kind in accepted:
        return
    what, how = KINDS[kind]
    raise InputError(f"{path}: this is {what}, not {wanted}: {how.replace('FILE', str(path))}")
