"""Configuration identity: the parameters that change results, and the hash that keys the cache.

A remote adapter's identity is ``adapter.identity()`` (:class:`engines.remote.RemoteAdapter`);
a local engine's (BM25, dense) is a :class:`LocalConfig`. Both are hashed the same way by
:func:`config_hash`; an archive's configurations are keyed by that hash, so it must never
change for a given identity.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping


def config_hash(identity: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a configuration identity."""
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class LocalConfig:
    """Identity of a local engine row (BM25, dense): written like a remote configuration."""

    engine: str
    endpoint_version: str
    params: dict[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        return {"engine": self.engine, "endpoint_version": self.endpoint_version, **self.params}
