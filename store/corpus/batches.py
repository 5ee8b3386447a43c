"""The corpus loader's fast path: a corpus file → batches of ``declarations`` rows, ready to insert.

The same rows as :func:`store.corpus.rows.parse_row` (the reference, beside this module)
without its intermediate dict: one C getter per distinct key order, json's C encoder built
once, the C scanner without json.loads' Python layers, and on PostgreSQL COPY text
formatted here. Any row off the fast shape, and every error, goes through the reference.
tests/store/test_corpus_exact.py checks that both store the same thing.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from operator import is_not, itemgetter
from pathlib import Path
from typing import Any, Iterator

from store.corpus.rows import KNOWN_KEYS, open_text, parse_row
from store.errors import InputError

BATCH_ROWS = 5000
DECL_COLUMNS = (
    "corpus_id", "row", "full_name", "name", "module_name", "kind", "type", "signature", "value",
    "informal_name", "informal_description", "docstring", "extra",
)
_JSON_COLUMNS = frozenset({"name", "extra"})
_TEXT_KEYS = ("kind", "type", "signature", "value", "informal_name", "informal_description", "docstring")
_KNOWN = frozenset(KNOWN_KEYS)
# One encoder for every row: json.dumps with a keyword argument builds a new encoder per call,
# which was a fifth of a 250k-row load.
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')
# json's own string encoder (C) and its C object encoder with json.dumps' settings, built
# once: JSONEncoder.encode builds that encoder anew on every call. Without circular checks
# (markers None), which parsed JSON never needs. Same output as _ENCODE.
_ENCODE_STR = json.encoder.encode_basestring
_C_ENCODER = (
    json.encoder.c_make_encoder(None, None, _ENCODE_STR, None, ": ", ", ", False, False, True)
    if json.encoder.c_make_encoder is not None and _ENCODE_STR is json.encoder.c_encode_basestring
    else None
)
_KNOWN_ORDER = ("name", "module_name", *_TEXT_KEYS)
_FULL_NAME = itemgetter(2)
_SCAN_ONCE = json.decoder.JSONDecoder().scan_once  # what json.loads runs, without its Python layers
_not_none = partial(is_not, None)


def _encode(obj: Any) -> str:
    return "".join(_C_ENCODER(obj, 0)) if _C_ENCODER is not None else _ENCODE(obj)


class _Shape:
    """What a row's key order implies, worked out once per distinct key order: when all
    known keys are there, one C getter for them (in ``_KNOWN_ORDER``) and then the unknown
    keys; the unknown keys (``extra``) in order, and the ``extra`` JSON with holes for the
    encoded values."""

    __slots__ = ("get", "unknown", "extra_fmt")

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.unknown = tuple(k for k in keys if k not in _KNOWN) or None
        self.get = itemgetter(*_KNOWN_ORDER, *(self.unknown or ())) if _KNOWN.issubset(keys) else None
        self.extra_fmt = (
            "{" + ", ".join(_ENCODE_STR(k).replace("%", "%%") + ": %s" for k in self.unknown) + "}"
            if self.unknown else None
        )


_SHAPES: dict[tuple[str, ...], _Shape] = {}
_MAX_SHAPES = 1024


def _shape(keys: tuple[str, ...]) -> _Shape:
    shape = _SHAPES.get(keys)
    if shape is None:
        shape = _Shape(keys)
        if len(_SHAPES) < _MAX_SHAPES:
            _SHAPES[keys] = shape
    return shape


def _encode_value(v: Any) -> str:
    return _ENCODE_STR(v) if type(v) is str else int.__repr__(v) if type(v) is int else _encode(v)


def _decl_values(
    obj: Any, corpus_id: int, row: int, display: str, lineno: int, plain: bool = False
) -> tuple[tuple, Any]:
    """One JSON object → the ``DECL_COLUMNS`` tuple (JSON columns already encoded) and
    the row's unknown keys in order (None when there are none).

    The same row as :func:`parse_row` without the intermediate dict, for rows with every
    known key, a list name of non-empty strings and a list, string or null module; any
    other row goes through :func:`_decl_values_general` (and its errors through parse_row).
    ``plain``: the source line has no backslash, so no string in it needs a JSON escape.
    """
    if type(obj) is dict and _C_ENCODER is not None:
        keys = tuple(obj)
        shape = _SHAPES.get(keys) or _shape(keys)
        get = shape.get
        if get is not None:
            vals = get(obj)
            name, module, texts = vals[0], vals[1], vals[2:9]
            full_name = _dotted(name)
            if full_name is not None and (module is None or type(module) is str or type(module) is list):
                try:
                    "".join(filter(_not_none, texts))  # TypeError unless each is None or a string
                except TypeError:
                    texts = [v if v is None or type(v) is str else _encode(v) for v in texts]
                if type(module) is list:
                    try:
                        module = ".".join(module)
                    except TypeError:
                        module = ".".join(str(p) for p in module)
                unknown = shape.unknown
                if unknown is None:
                    extra = None
                elif len(unknown) == 2:  # as in the extracted Mathlib (source_path, source_line)
                    a, b = vals[9:]
                    extra = shape.extra_fmt % (
                        _ENCODE_STR(a) if type(a) is str else int.__repr__(a) if type(a) is int else _encode(a),
                        _ENCODE_STR(b) if type(b) is str else int.__repr__(b) if type(b) is int else _encode(b),
                    )
                else:
                    extra = shape.extra_fmt % tuple(map(_encode_value, vals[9:]))
                # Without escapes a name encodes as its parts in quotes (exactly json.dumps' output).
                name_json = '["' + '", "'.join(name) + '"]' if plain else "".join(_C_ENCODER(name, 0))
                return (corpus_id, row, full_name, name_json, module or None, *texts, extra), unknown
    return _decl_values_general(obj, corpus_id, row, display, lineno)


def _dotted(name: Any) -> str | None:
    """A list of non-empty string parts joined with dots, else None."""
    if type(name) is list and name and "" not in name:
        try:
            return ".".join(name)  # TypeError unless every component is a string
        except TypeError:
            return None
    return None


def _decl_values_general(obj: Any, corpus_id: int, row: int, display: str, lineno: int) -> tuple[tuple, Any]:
    """:func:`_decl_values` for any input, falling back to :func:`parse_row` (and its
    errors) for anything unusual."""
    name = obj.get("name") if type(obj) is dict else None
    module = obj.get("module_name") if name is not None else None
    full_name = _dotted(name)
    if full_name is None or (module is not None and type(module) is not list and type(module) is not str):
        rec = parse_row(obj, f"{display}:{lineno}", row)
        rec["corpus_id"] = corpus_id
        return tuple(
            (_ENCODE(rec[c]) if rec[c] is not None else None) if c in _JSON_COLUMNS else rec[c] for c in DECL_COLUMNS
        ), (tuple(rec["extra"]) if rec["extra"] else None)
    if type(module) is list:
        module = ".".join(module) if all(type(p) is str for p in module) else ".".join(str(p) for p in module)
    get = obj.get
    texts = [get(k) for k in _TEXT_KEYS]
    for i, v in enumerate(texts):
        if v is not None and type(v) is not str:
            texts[i] = _ENCODE(v)
    extra = None
    unknown = tuple(k for k in obj if k not in _KNOWN)
    if unknown:
        extra = _ENCODE({k: obj[k] for k in unknown})
    # A name without quotes, backslashes or control characters encodes as its parts in
    # quotes (exactly json.dumps' output); the rest goes through the encoder.
    name_json = _ENCODE(name) if _NEEDS_ESCAPE.search(full_name) else '["' + '", "'.join(name) + '"]'
    return (corpus_id, row, full_name, name_json, module or None, *texts, extra), unknown or None


# PostgreSQL COPY text format: a field's backslash, newline, carriage return and tab are
# escaped; NULL is \N. psycopg's write_row refuses a NUL in a text field, and so do we.
_COPY_SPECIAL = re.compile("[\\\\\n\r\t\x00]")


class _NulInText(Exception):
    """A text field holds NUL; raised as psycopg's DataError once the batch is read."""


def _copy_escape(s: str) -> str:
    if "\x00" in s:
        raise _NulInText
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _copy_line(values: tuple, plain: bool) -> str:
    """A ``DECL_COLUMNS`` tuple as one line of COPY text."""
    if plain:  # no backslash in the source line: no string here has a special character
        fields = ["\\N" if v is None else v for v in values[2:]]
    else:
        fields = ["\\N" if v is None else _copy_escape(v) if _COPY_SPECIAL.search(v) else v for v in values[2:]]
    return f"{values[0]}\t{values[1]}\t" + "\t".join(fields) + "\n"


@dataclass
class Tally:
    """What the corpora row's meta counts, gathered while reading."""

    kinds: Counter = field(default_factory=Counter)
    names: Counter = field(default_factory=Counter)
    extra_keys: Counter = field(default_factory=Counter)


def iter_batches(
    path: Path, display: str, corpus_id: int, copy: bool, tally: Tally, batch_rows: int = BATCH_ROWS
) -> Iterator[tuple[Any, int]]:
    """The file as batches of at most ``batch_rows`` rows: lists of ``DECL_COLUMNS``
    tuples, or (``copy``) COPY text; with the row count. Counts kinds, names and extra
    keys into ``tally``. Errors name the file and the 1-based line, as :func:`iter_rows`."""
    row = lineno = 0
    loads, scan = json.loads, _SCAN_ONCE
    kinds, names = tally.kinds, tally.names
    unknown_counts: dict[tuple[str, ...], int] = {}  # per distinct tuple of unknown keys, in first-seen order
    batch: list[tuple] = []
    lines: list[str] = []

    nul_in_text = False

    def flush() -> tuple[Any, int]:
        nonlocal batch, lines
        if nul_in_text:  # where write_row raised it: writing the batch, after reading it all
            import psycopg

            raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        # Tuple positions in DECL_COLUMNS: 2 full_name, 5 kind.
        kinds.update(v[5] or "" for v in batch)
        names.update(map(_FULL_NAME, batch))
        out = ("".join(lines) if copy else batch), len(batch)
        batch, lines = [], []
        return out

    try:
        with open_text(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                try:
                    # json.loads without its Python layers: the C scanner, then the same
                    # check that nothing but the line end follows; anything else (leading
                    # or trailing blanks, errors) goes through json.loads itself.
                    obj, end = scan(line, 0)
                    if end != len(line) and (end + 1 != len(line) or line[end] != "\n"):
                        raise ValueError
                except (StopIteration, ValueError):
                    try:
                        obj = loads(line)
                    except json.JSONDecodeError as exc:
                        if not line.strip():
                            continue
                        raise InputError(f"{display}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
                plain = "\\" not in line
                values, unknown = _decl_values(obj, corpus_id, row, display, lineno, plain)
                row += 1
                if unknown:
                    unknown_counts[unknown] = unknown_counts.get(unknown, 0) + 1
                batch.append(values)
                if copy:
                    try:
                        lines.append(_copy_line(values, plain))
                    except _NulInText:
                        nul_in_text = True
                if len(batch) >= batch_rows:
                    yield flush()
    except RecursionError:  # the C scanner (or encoder) of a value nested thousands deep
        raise InputError(f"{display}:{lineno}: JSON nested too deep to read (thousands of levels); "
                         "is this a corpus JSONL file?") from None
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"{display}: cannot read corpus file ({exc})") from None
    for unknown, count in unknown_counts.items():  # keys in the order they were first seen
        for key in unknown:
            tally.extra_keys[key] += count
    if batch:
        yield flush()
