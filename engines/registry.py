"""The registry of remote engines: :data:`ENGINES`, the one place an engine is registered.

An engine is declared once, on its adapter class (:class:`engines.remote.RemoteAdapter`'s
declaration attributes); one :func:`register` line below makes it known. Everything else
that names engines derives from here: construction by name (:func:`get_adapter`,
:func:`adapter_for_config`), display names, the stand-ins (:func:`stand_in_api`), the
demo's engines, ports and weights (:func:`demo_engines`), the CLI's help
(:func:`engine_list`) and the tests' parametrisation. See docs/adding-an-engine.md.
"""

from __future__ import annotations

import importlib
from typing import Any

from engines.leanexplore import LeanExploreAdapter
from engines.leanexplore_mcp import LeanExploreMcpAdapter
from engines.leandex import LeanDexAdapter
from engines.leanfinder import LeanFinderAdapter
from engines.leanpremise import LeanPremiseAdapter
from engines.leansearch import LeanSearchAdapter
from engines.leansearch_ps import LeanSearchPSAdapter
from engines.leanstatesearch import LeanStateSearchAdapter
from engines.loogle import LoogleAdapter
from engines.octo import OctoAdapter
from engines.remote import RemoteAdapter
from engines.theoremsearch import TheoremSearchAdapter
from store.errors import InputError

ENGINES: dict[str, type[RemoteAdapter]] = {}
# How the crawler reaches an engine (what `engines list` shows): "http" a JSON request and
# body, "sse" an HTTP request answered as a Server-Sent-Events stream (engines.sse), "mcp" a
# tools/call over MCP's streamable HTTP (engines.mcpwire; crawler.mcp_session).
TRANSPORTS = ("http", "sse", "mcp")


def register(cls: type[RemoteAdapter]) -> type[RemoteAdapter]:
    """Make the engine ``cls`` declares known by its ``engine`` name (usable as a decorator).

    Checks the declaration: a lower-case name, a display name, a default URL, a transport
    the crawler speaks, ``stand_in`` as ``"module:Class"`` (or empty), demo port and
    weights together. Registering another class under a taken name is refused.
    """
    name = cls.engine
    problems = []
    if not name or name != name.lower() or not name.replace("-", "_").isidentifier() or name[-1] == "-":
        problems.append(f"engine name {name!r} must be lower-case letters, digits, _ and -")
    if not cls.display_name:
        problems.append("no display_name")
    if not (cls.DEFAULT_URL or cls.run_hint) or not getattr(cls, "defaults", None):
        problems.append("no DEFAULT_URL (or run_hint for a self-hosted engine) or defaults")
    if cls.transport not in TRANSPORTS:
        problems.append(f"transport {cls.transport!r} is not one of {', '.join(TRANSPORTS)}")
    if cls.stand_in and cls.stand_in.count(":") != 1:
        problems.append(f"stand_in {cls.stand_in!r} must be 'module:Class'")
    if (cls.demo_port is None) != (cls.demo_weights is None):
        problems.append("demo_port and demo_weights go together")
    if ENGINES.get(name, cls) is not cls:
        problems.append(f"{name!r} is already registered by {ENGINES[name].__name__}")
    if problems:
        raise ValueError(f"cannot register {cls.__name__}: {'; '.join(problems)}")
    ENGINES[name] = cls
    return cls


register(LeanSearchAdapter)
register(LeanExploreAdapter)
register(LeanFinderAdapter)
register(LoogleAdapter)
register(LeanStateSearchAdapter)
register(LeanPremiseAdapter)
register(LeanSearchPSAdapter)
register(LeanDexAdapter)
register(TheoremSearchAdapter)
register(OctoAdapter)
register(LeanExploreMcpAdapter)

ENTRY_POINT_GROUP = "engines.adapters"
ORIGINS: dict[str, str] = {}  # engine → the distribution that registered it (absent: built in)
PLUGIN_ERRORS: list[str] = []  # one line per entry point that could not be registered


def load_plugins() -> None:
    """Register the adapters other packages declare in the ``engines.adapters`` entry-point
    group (``name = "package.module:AdapterClass"``; the name must be the class's ``engine``).

    A plug-in that fails to import or to register is left out with one line in
    :data:`PLUGIN_ERRORS` (``engines list`` shows them): a broken package never stops
    the built-in engines."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or ep.module.split(".")[0]
        try:
            cls = ep.load()
            if getattr(cls, "engine", None) != ep.name:
                raise ValueError(f"entry point name {ep.name!r} is not the class's engine {getattr(cls, 'engine', None)!r}")
            if ENGINES.get(ep.name) is cls:
                continue
            register(cls)
        except Exception as exc:  # noqa: BLE001 - one line, the rest still load
            PLUGIN_ERRORS.append(f"{ENTRY_POINT_GROUP} {ep.name} = {ep.value} ({dist}): {type(exc).__name__}: {exc}"[:300])
            continue
        ORIGINS[ep.name] = dist


def origin(engine: str) -> str:
    """``"built-in"``, or the distribution whose entry point registered ``engine``."""
    return ORIGINS.get(engine, "built-in")



def engine_list(last: str = ", ") -> str:
    """The registered names for a help text: ``"a, b, c"``, or ``"a, b or c"`` with ``last=" or "``."""
    names = list(ENGINES)
    return last.join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def display_name(engine: str) -> str:
    """How people write ``engine`` ("Lean Finder"); an unregistered name as it is."""
    cls = ENGINES.get(engine)
    return cls.display_name if cls is not None else engine


def demo_engines() -> tuple[str, ...]:
    """The engines ``engines demo`` crawls (those declaring a ``demo_port``), in registry order."""
    return tuple(name for name, cls in ENGINES.items() if cls.demo_port is not None)


def stand_in_api(engine: str) -> type:
    """The stand-in API class ``engine`` declares (``stand_in = "module:Class"``), imported on demand."""
    cls = ENGINES.get(str(engine).lower())
    if cls is None or not cls.stand_in:
        known = ", ".join(n for n, c in ENGINES.items() if c.stand_in)
        raise InputError(f"unknown engine {engine!r} for a stand-in; known: {known}")
    module, _, attr = cls.stand_in.partition(":")
    return getattr(importlib.import_module(module), attr)


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
    # A self-hosted engine's stand-in configuration (the demo's) records no base URL and the
    # engine has no public one: parsing needs none, so a loopback placeholder.
    base_url = params.get("base_url") or cls.stored_url() or "http://127.0.0.1"
    adapter = cls(base_url, **{k: v for k, v in params.items() if k not in IDENTITY_ONLY})
    if stored_endpoint is not None and stored_endpoint != adapter.endpoint_version:
        raise InputError(f"{engine}: stored endpoint {stored_endpoint!r}, the adapter speaks "
                         f"{adapter.endpoint_version!r}")
    return adapter


# Last, once every name above exists: a plug-in's module may import engines.emulate (its
# stand-in), which imports this module back.
load_plugins()
