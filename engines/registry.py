"""The registry of remote engines: name → adapter class, and construction by name."""

from __future__ import annotations

from typing import Any

from engines.leanexplore import LeanExploreAdapter
from engines.leanfinder import LeanFinderAdapter
from engines.leansearch import LeanSearchAdapter
from engines.leanstatesearch import LeanStateSearchAdapter
from engines.loogle import LoogleAdapter
from store.errors import InputError

ENGINES: dict[str, type] = {
    "leansearch": LeanSearchAdapter,
    "leanexplore": LeanExploreAdapter,
    "leanfinder": LeanFinderAdapter,
    "loogle": LoogleAdapter,
    "leanstatesearch": LeanStateSearchAdapter,
}


def get_adapter(name: str, base_url: str | None = None, **params: Any):
    """An adapter for engine ``name`` (base URL: argument, else ``ENGINES_<NAME>_URL``, else public)."""
    cls = ENGINES.get(str(name).lower())
    if cls is None:
        raise InputError(f"unknown engine {name!r}; known engines: {', '.join(ENGINES)}")
    return cls(base_url, **params)
