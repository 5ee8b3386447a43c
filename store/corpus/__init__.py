"""Corpora: LeanSearch v2 corpus JSONL (plain or gzip, local or ``hf://``) into ``declarations``.

A corpus is identified by (name, revision, sha256 of the file). The public names are
importable from here; the modules, each one role:

- :mod:`store.corpus.load`: the loader (:func:`load_corpus`, one transaction) and the
  lookup of a stored corpus (:func:`find_corpus`, :func:`pick_corpus`);
- :mod:`store.corpus.source`: where the file comes from (a local path or a pinned
  ``hf://`` file) and its digest;
- :mod:`store.corpus.rows`: the row reader of reference, what a row is and which rows are
  refused (:func:`parse_row`, :func:`iter_rows`);
- :mod:`store.corpus.batches`: the loader's fast path, lines → insertable batches of the
  same rows (tests/store/test_corpus_exact.py checks both store the same thing);
- :mod:`store.corpus.readahead`: the thread that parses batches a few ahead of the inserts.
"""

from store.corpus.batches import BATCH_ROWS
from store.corpus.load import LOCAL_REVISION, LoadResult, find_corpus, load_corpus, pick_corpus
from store.corpus.rows import KNOWN_KEYS, iter_rows, parse_row
from store.corpus.source import HF_PATTERN, CorpusSource, resolve_source, sha256_file

__all__ = [
    "BATCH_ROWS", "HF_PATTERN", "KNOWN_KEYS", "LOCAL_REVISION", "CorpusSource", "LoadResult", "find_corpus",
    "iter_rows", "load_corpus", "parse_row", "pick_corpus", "resolve_source", "sha256_file",
]
