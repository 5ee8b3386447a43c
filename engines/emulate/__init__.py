"""Loopback stand-in servers that speak each remote engine's exact API (``engines emulate``).

``StandIn(engine, corpus, rate=None, faults=None, seed=0)`` ranks a corpus in the
LeanSearch v2 schema with a deterministic lexical scorer (:mod:`.scorer`), answers the
engine's paths, methods, status codes and body shapes (:mod:`.apis`), enforces a
sliding-window rate limit and injects faults reproducibly (:mod:`.server`).
``rate=None`` means no limit.
"""

from __future__ import annotations

from engines.emulate.scorer import LexicalIndex, Row, load_rows, tokenize
from engines.emulate.server import FaultConfig, StandIn, Stats

__all__ = ["FaultConfig", "LexicalIndex", "Row", "StandIn", "Stats", "load_rows", "tokenize"]
