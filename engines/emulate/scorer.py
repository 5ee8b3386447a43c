"""The stand-ins' corpus and their deterministic lexical scorer.

Tokens: split a text on anything that is not a letter or digit (so ``.`` and ``_``
separate), split camelCase and letter/digit boundaries, lower-case, drop tokens of one
character. A row has *name tokens* (its dotted name) and *text tokens* (signature and
docstring). A query's score for a row counts each **distinct** query token once:
2 if it is a name token of the row, else 1 if it is a text token, else 0. Rows with
score 0 never appear; ties keep corpus row order. So a tiny corpus gives ranked lists
that can be worked out by hand.

That is the default :class:`Weights` (name 2, signature 1, docstring 1, module 0): in
general a token adds the largest weight among the row's fields that contain it.
``ENGINE_WEIGHTS`` gives each demo stand-in its own weights, so the three rank
differently and the demo's leaderboard compares something (``engines demo``).
"""

from __future__ import annotations

import heapq
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from engines.registry import ENGINES, demo_engines
from store.corpus import iter_rows, parse_row
from store.errors import InputError

_WORD = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[^\W\d_])(?=\d)|(?<=\d)(?=[^\W\d_])")


def tokenize(text: str | None) -> list[str]:
    """``"Nat.add_comm (n m : ℕ)"`` → ``["nat", "add", "comm"]`` (one-character tokens dropped)."""
    if not text:
        return []
    out = []
    for word in _WORD.findall(text):
        for part in _CAMEL.split(word):
            if len(part) > 1:
                out.append(part.lower())
    return out


@dataclass(frozen=True)
class Row:
    """One corpus declaration, normalised from the LeanSearch v2 corpus schema."""

    index: int  # 0-based position in the corpus (the tie-breaker)
    name: str  # dotted
    name_parts: tuple[str, ...]
    module: str  # dotted, "" when unknown
    module_parts: tuple[str, ...]
    data: dict[str, Any]  # the row's columns as store.corpus.parse_row reads them, plus unknown keys

    def get(self, key: str) -> Any:
        return self.data.get(key)


def load_rows(corpus: Iterable[dict[str, Any]] | str | Path) -> list[Row]:
    """Rows from a list of dicts or a ``.jsonl`` / ``.jsonl.gz`` file (LeanSearch v2 schema),
    parsed by the corpus loader's own :func:`store.corpus.iter_rows` / :func:`~store.corpus.parse_row`
    (so the stand-ins accept exactly what ``engines corpus load`` accepts, with the same errors)."""
    if isinstance(corpus, (str, Path)):
        path = Path(corpus)
        if not path.is_file():
            raise InputError(f"stand-in corpus {path} does not exist; pass a .jsonl or .jsonl.gz file")
        parsed: Iterable[dict[str, Any]] = iter_rows(path, f"stand-in corpus {path}")
    else:
        parsed = (parse_row(rec, f"stand-in corpus row {i + 1}", i) for i, rec in enumerate(corpus))
    rows = []
    for p in parsed:
        # The row as the stand-ins' APIs read it: the loader's columns plus any unknown keys.
        data = {**(p["extra"] or {}), **{k: v for k, v in p.items() if k not in ("row", "full_name", "extra")}}
        module = p["module_name"] or ""
        module_parts = tuple(m for m in module.split(".") if m)
        rows.append(Row(p["row"], p["full_name"], tuple(p["name"]), ".".join(module_parts), module_parts, data))
    return rows


@dataclass(frozen=True)
class Weights:
    """Points a matching query token earns per field (the largest applies); 0 ignores the field."""

    name: int = 2
    signature: int = 1
    docstring: int = 1
    module: int = 0

    def fields(self) -> list[tuple[str, int]]:
        pairs = [("name", self.name), ("signature", self.signature), ("docstring", self.docstring),
                 ("module", self.module)]
        return sorted([(f, w) for f, w in pairs if w > 0], key=lambda fw: -fw[1])

    def tag(self) -> str:
        return f"name{self.name}-sig{self.signature}-doc{self.docstring}-mod{self.module}"


DEFAULT_WEIGHTS = Weights()
# The demo's stand-ins, each leaning on other fields (the slice has no informal texts):
# declared on each demo engine's adapter (``demo_weights``, engines.registry).
ENGINE_WEIGHTS = {name: Weights(**ENGINES[name].demo_weights) for name in demo_engines()}


class LexicalIndex:
    """Inverted index per field; :meth:`search` is the ranking."""

    def __init__(self, rows: list[Row], weights: Weights = DEFAULT_WEIGHTS) -> None:
        self.rows = rows
        self.weights = weights
        self._fields = weights.fields()
        self._post: dict[str, dict[str, list[int]]] = {f: defaultdict(list) for f, _ in self._fields}
        for row in rows:
            for f, _ in self._fields:
                if f == "name":
                    text = row.name
                elif f == "module":
                    text = row.module
                else:
                    value = row.get(f)
                    text = value if isinstance(value, str) else None
                for tok in set(tokenize(text)):
                    self._post[f][tok].append(row.index)

    def scores(self, query: str) -> dict[int, int]:
        scores: dict[int, int] = defaultdict(int)
        for tok in set(tokenize(query)):
            seen: set[int] = set()
            for f, w in self._fields:  # heaviest field first: each row counts its best field once
                for r in self._post[f].get(tok, ()):
                    if r not in seen:
                        seen.add(r)
                        scores[r] += w
        return scores

    def search(self, query: str, k: int | None = None) -> list[tuple[Row, int]]:
        """The best ``k`` rows (all matches when None) as (row, score), best first."""
        items = self.scores(query).items()
        key = lambda kv: (-kv[1], kv[0])  # noqa: E731
        ranked = sorted(items, key=key) if k is None else heapq.nsmallest(k, items, key=key)
        return [(self.rows[r], s) for r, s in ranked]
