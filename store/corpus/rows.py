"""The corpus row reader of reference: one LeanSearch v2 JSON object → one ``declarations`` row.

:func:`parse_row` says what a row is and which rows are refused (and with what message);
:func:`iter_rows` streams a file (plain or gzip) through it. The loader's fast path
(:mod:`store.corpus.batches`) must store exactly what this module reads, and falls back to
it for anything unusual; tests/store/test_corpus_exact.py compares the two.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any, Iterator

from store.errors import InputError

KNOWN_KEYS = (
    "name",
    "module_name",
    "kind",
    "type",
    "signature",
    "value",
    "informal_name",
    "informal_description",
    "docstring",
)


def open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if gz:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def parse_row(obj: Any, where: str, row: int) -> dict[str, Any]:
    """One corpus JSON object → a ``declarations`` row (without ``corpus_id``)."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}; is this a corpus JSONL file?")
    name = obj.get("name")
    if isinstance(name, str):
        # A string name must be split before joining, or every character gets a dot (BENCHMARKS.md §6.5).
        parts = [p for p in name.strip().split(".")]
    elif isinstance(name, list) and all(type(p) is str for p in name):
        parts = name
    else:
        parts = []
    if not parts or "" in parts:
        raise InputError(
            f"{where}: row has no usable 'name' (got {json.dumps(name, ensure_ascii=False)[:80]}); "
            "expected a list of name components like [\"Nat\", \"add_comm\"]"
        )
    module = obj.get("module_name")
    if isinstance(module, list):
        module = ".".join(str(p) for p in module)
    extra = {k: v for k, v in obj.items() if k not in KNOWN_KEYS}
    return {
        "row": row,
        "full_name": ".".join(parts),
        "name": parts,
        "module_name": _as_text(module) or None,
        "kind": _as_text(obj.get("kind")),
        "type": _as_text(obj.get("type")),
        "signature": _as_text(obj.get("signature")),
        "value": _as_text(obj.get("value")),
        "informal_name": _as_text(obj.get("informal_name")),
        "informal_description": _as_text(obj.get("informal_description")),
        "docstring": _as_text(obj.get("docstring")),
        "extra": extra or None,
    }


def iter_rows(path: Path, display: str | None = None) -> Iterator[dict[str, Any]]:
    """Stream parsed rows; errors name the file and the 1-based line."""
    display = display or str(path)
    row = lineno = 0
    try:
        with open_text(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{display}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
                yield parse_row(obj, f"{display}:{lineno}", row)
                row += 1
    except RecursionError:  # the C scanner (or encoder) of a value nested thousands deep
        raise InputError(f"{display}:{lineno}: JSON nested too deep to read (thousands of levels); "
                         "is this a corpus JSONL file?") from None
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"{display}: cannot read corpus file ({exc})") from None
