"""The ``lsv2-compat`` document renderer: a corpus row → the text a local engine indexes.

Byte-exact with LeanSearch v2's document format (BENCHMARKS.md §6): a header chosen by
``kind``, an informal block that starts with the Python list representation of the kind
(``['theorem']: ``), and a formal block that keeps the raw ``value`` for definitions and
instances and otherwise ends with `` := by sorry``. The odd formatting is deliberate: it
is what the LSv2 embedder was trained to see.

This module holds nothing but the renderer, because its source bytes are the renderer's
identity: :func:`renderer_hash` is the sha256 of this file, recorded with every BM25
index and every vector file, so editing the renderer invalidates caches instead of
mixing two encodings.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

RENDERER_NAME = "lsv2-compat"
DESCRIPTION_LIMIT = 10_000  # characters of informal_description kept before "...(truncated)"

_HEADERS = {
    "theorem": "Represent the following mathematical theorem in lean repository for semantic search",
    "definition": "Represent the following mathematical definition in lean repository for semantic search",
    "instance": "Represent the following typeclass instance in lean repository for semantic search",
}
_OTHER_HEADER = "Represent the following lean content for semantic search"
_VALUE_KINDS = ("definition", "instance")


def _field(row: Mapping[str, Any], key: str) -> str:
    # Loaders may give None for absent fields (the extracted corpora do): treat as "".
    value = row.get(key)
    return value if isinstance(value, str) else ""


def _name_parts(row: Mapping[str, Any]) -> list[str]:
    name = row.get("name")
    if isinstance(name, str):
        # A string name would be joined character by character (BENCHMARKS.md §6.5 pitfall).
        return [p for p in name.split(".")] if name else []
    if isinstance(name, (list, tuple)):
        return [str(p) for p in name]
    return []


def render_lsv2(row: Mapping[str, Any]) -> str:
    """Render one corpus row (keys as in the LSv2 schema; missing/None keys are empty)."""
    kind = _field(row, "kind")

    informal_parts = []
    informal_name = _field(row, "informal_name")
    if informal_name:
        informal_parts.append(informal_name)
    description = _field(row, "informal_description")
    if description:
        if len(description) > DESCRIPTION_LIMIT:
            description = description[:DESCRIPTION_LIMIT] + "...(truncated)"
        informal_parts.append(description)
    informal_text = ": ".join(informal_parts)
    if kind:
        # str() of a one-element list: "['theorem']" (the list-repr quirk is intended).
        informal_text = f"{[kind]}: {informal_text}"

    lean_parts = []
    parts = _name_parts(row)
    if parts:
        lean_parts.append(".".join(parts))
    type_text = _field(row, "type")
    if type_text:
        lean_parts.append(type_text)
    value = _field(row, "value")
    if value and kind in _VALUE_KINDS:
        lean_parts.append(value)
        lean_text = " ".join(lean_parts)
    else:
        lean_text = " ".join(lean_parts) + " := by sorry"

    header = _HEADERS.get(kind, _OTHER_HEADER)
    return f"{header}: \n Informal content: \n {informal_text} \n Formal content: \n {lean_text}"


@lru_cache(maxsize=1)
def renderer_hash() -> str:
    """sha256 of this module's source: the renderer's identity in every cache key."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
