"""Lean-aware tokenisation for BM25: identifiers split like LeanExplore's "spaced" index.

A word such as ``Nat.add_comm`` or ``GaloisConnection.l_iSup`` yields

- the whole identifier, lowercased (``nat.add_comm``), so an exact name query matches
  its declaration through one rare token (a trailing prime is kept: ``foo'`` ≠ ``foo``);
- each dotted segment that splits further (``add_comm``, ``galoisconnection``);
- the atoms: segments split on ``_`` and ``'`` and at camelCase and digit boundaries
  (``nat``, ``add``, ``comm``, ``galois``, ``connection``, ``l``, ``i``, ``sup``).

Unicode math symbols (categories Sm and So, plus a few Lean operators in punctuation
categories, e.g. ``•``) are kept as one-character tokens, so a query like "a poset with
`⊔` and `⊓`" can match types that mention ``⊔``. ASCII punctuation is dropped. A short
English stopword list (bm25s's) is removed from atoms only; whole identifiers are kept.

``TOKENIZER_VERSION`` is part of every BM25 cache key: bump it when the output changes.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

TOKENIZER_VERSION = "lean-v1"

# bm25s.stopwords.STOPWORDS_EN, copied so the tokenizer does not import bm25s.
STOPWORDS_EN = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)

_WORD = re.compile(r"[\w.']+")
_ATOM = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+|[^\W\d_a-zA-Z]+")
_EXTRA_SYMBOLS = frozenset("•·∘")


@lru_cache(maxsize=4096)
def _is_symbol(ch: str) -> bool:
    if ch in _EXTRA_SYMBOLS:
        return True
    if ch.isascii():
        return False  # ASCII operators and punctuation carry little signal in prose or types
    return unicodedata.category(ch) in ("Sm", "So")


def _word_tokens(word: str, out: list[str], stopwords: frozenset[str]) -> None:
    word = word.strip(".")
    if word.startswith("'"):
        word = word.strip("'")  # a quoted word ('theorem'); a trailing prime stays (foo' ≠ foo)
    if not word:
        return
    lower = word.lower()
    segments = [s for s in word.split(".") if s]
    atoms_all: list[str] = []
    for seg in segments:
        atoms = [a.lower() for piece in re.split(r"[_']+", seg) if piece for a in _ATOM.findall(piece)]
        if len(segments) > 1 and len(atoms) > 1:
            out.append(seg.lower())
        atoms_all.extend(atoms)
    if len(atoms_all) > 1 or (atoms_all and atoms_all[0] != lower):
        out.append(lower)
    out.extend(a for a in atoms_all if a not in stopwords)


def tokenize(text: str, *, stopwords: frozenset[str] = STOPWORDS_EN) -> list[str]:
    """Tokens of one text (document or query), in order, with repeats."""
    out: list[str] = []
    pos = 0
    for m in _WORD.finditer(text):
        for ch in text[pos:m.start()]:
            if not ch.isspace() and _is_symbol(ch):
                out.append(ch)
        _word_tokens(m.group(), out, stopwords)
        pos = m.end()
    for ch in text[pos:]:
        if not ch.isspace() and _is_symbol(ch):
            out.append(ch)
    return out
