"""Corpus files on this machine, found by sha256: for ``engines publish --with-corpus`` and
for ``engines verify`` when the bundle does not carry its corpus."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from benchmarks import SHIPPED_DIR
from engines.local.common import cache_root
from store.corpus import resolve_source, sha256_file


def shipped_corpora() -> list[Path]:
    """Corpus files shipped with the package (found by sha256)."""
    return sorted(p for p in (SHIPPED_DIR / "data").glob("*/*") if p.name.endswith((".jsonl", ".jsonl.gz")))


def cached_corpora() -> list[Path]:
    """Corpus files in the local cache: ENGINES_CACHE_DIR/corpora/ (any name; matched by sha256)."""
    d = cache_root() / "corpora"
    return sorted(p for p in d.glob("*") if p.name.endswith((".jsonl", ".jsonl.gz"))) if d.is_dir() else []


def find_corpus_file(sha256: str, source: str | None, extra: Iterable[Path] = ()) -> Path | None:
    """A local file whose sha256 is ``sha256``: ``extra`` first, then the source path, the local
    Hugging Face cache (offline), the engines cache, and the corpora shipped with the package."""
    candidates: list[Path] = [Path(p) for p in extra]
    if source and not source.startswith("hf://"):
        candidates.append(Path(source).expanduser())
    if source and source.startswith("hf://"):
        old = os.environ.get("HF_HUB_OFFLINE")
        os.environ["HF_HUB_OFFLINE"] = "1"
        try:
            candidates.append(resolve_source(source).path)
        except Exception:  # noqa: BLE001 - not in the local cache (or no huggingface_hub): look elsewhere
            pass
        finally:
            if old is None:
                os.environ.pop("HF_HUB_OFFLINE", None)
            else:
                os.environ["HF_HUB_OFFLINE"] = old
    candidates += cached_corpora() + shipped_corpora()
    sizes_seen: set[Path] = set()
    for p in candidates:
        try:
            if p in sizes_seen or not p.is_file():
                continue
        except OSError:
            continue
        sizes_seen.add(p)
        if sha256_file(p) == sha256:
            return p
    return None
