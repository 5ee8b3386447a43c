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


# Keys of a stored configuration identity that describe the configuration without being
# adapter options: the engine and endpoint (columns of their own), the base URL (passed
# apart, and never taken from the environment when rebuilding), and ``stand_in`` (the
# demo's description of a loopback stand-in's ranking and corpus, in place of its port).
IDENTITY_ONLY = ("engine", "endpoint_version", "base_url", "stand_in")


def adapter_for_config(engine: str, params: dict[str, Any] | None, endpoint_version: str | None = None):
    """The current adapter of a stored configuration (engine + identity parameters).

    The one rebuild used by ``engines reparse`` and ``engines import``: the base URL is the
    stored one or the engine's public URL, never ``ENGINES_<NAME>_URL`` (the identity says
    which service answered; the environment says only where the next crawl goes); the
    identity-only keys (:data:`IDENTITY_ONLY`) are not constructor arguments. Raises
    :class:`InputError` (one line) when the adapter cannot be rebuilt: an unknown engine,
    an unknown parameter, or an endpoint the current adapter no longer speaks.
    """
    cls = ENGINES.get(str(engine).lower())
    if cls is None:
        raise InputError(f"no adapter for engine {engine!r}; known engines: {', '.join(ENGINES)}")
    params = dict(params or {})
    stored_endpoint = params.get("endpoint_version", endpoint_version)
    base_url = params.get("base_url") or cls.DEFAULT_URL
    adapter = cls(base_url, **{k: v for k, v in params.items() if k not in IDENTITY_ONLY})
    if stored_endpoint is not None and stored_endpoint != adapter.endpoint_version:
        raise InputError(f"{engine}: stored endpoint {stored_endpoint!r}, the adapter speaks "
                         f"{adapter.endpoint_version!r}")
    return adapter
