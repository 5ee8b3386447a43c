"""Recognising the requests of a WARC written by another tool (a capture proxy, a crawler).

Which engine: the one whose public host the request targets (:func:`known_hosts`); only
that engine's adapter reads the request, with its ``read_request``, the inverse of its
``build_request`` (engines.base). What it asked for: the texts that adapter gives back,
and the configuration the engine's default one with the parameters the request shows
(``num_results`` and the engine's own). A request that adapter does not recognise (another
path or method, no query) yields no texts: the import counts it as unpaired.

Where the inverse is not unique the adapter decides, and says so: a LeanStateSearch query
``⊢ <statement>`` gives back the statement (engines.queries.goal_text), the text
the crawler would have sent it for and the benchmark files its answers under; a proof
state with hypotheses is its own text.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit


def known_hosts() -> dict[str, str]:
    """Public host of each engine → its name."""
    from engines.registry import ENGINES

    return {urlsplit(url).netloc: name for name, cls in ENGINES.items()
            for url in (cls.stored_url(), cls.DEFAULT_URL, *cls.KNOWN_URLS) if url}


def foreign_identity(engine: str, method: str, url: str, body: bytes) -> tuple[Any, list[str]]:
    """(adapter, query texts) of a request another tool archived to ``engine``'s public host:
    (None, []) when it is not a request that engine's adapter builds. A request of its shape
    with a value it cannot take raises (ValueError, TypeError or the adapter's InputError)."""
    from engines.registry import adapter_for_config

    asked = adapter_for_config(engine, {}).read_request(method, url, body)
    if asked is None:
        return None, []
    return adapter_for_config(engine, asked.params), list(asked.texts)
