"""The public surface of the adapter layer, gathered from the modules that hold each role.

Import from here (or from the module that holds a name; both are public):

- :mod:`engines.protocol`: the contract (:class:`Adapter`, :class:`ParsedHit`,
  :class:`HitList`, :func:`finish_hits`, :class:`AskedFor`, :class:`EngineDefaults`, the
  errors :class:`EngineParseError` / :class:`ForeignItem` / :class:`EngineHTTPError` /
  :class:`EngineOutage`, :data:`OUTAGE_STATUSES`);
- :mod:`engines.rates`: :class:`Rate`, :func:`parse_rate`;
- :mod:`engines.identity`: :func:`config_hash`, :class:`LocalConfig`;
- :mod:`engines.redact`: what may be archived or logged (:func:`redact_headers`,
  :func:`redact_url`, :data:`SECRET_NAME`, :data:`REDACTED`);
- :mod:`engines.jsonbody`: :func:`decode_json_body`, :func:`decode_json_object`,
  :func:`request_json`, :func:`snippet`;
- :mod:`engines.urls`: :func:`check_base_url`;
- :mod:`engines.remote`: :class:`RemoteAdapter` (declaration, plumbing, parse template),
  :data:`USER_AGENT`;
- :mod:`engines.queries`: query renderers (:func:`goal_query`, :func:`goal_text`).
"""

from __future__ import annotations

from engines.identity import LocalConfig, config_hash
from engines.jsonbody import decode_json_body, decode_json_object, request_json, snippet
from engines.protocol import (
    OUTAGE_STATUSES,
    Adapter,
    AskedFor,
    EngineDefaults,
    EngineHTTPError,
    EngineOutage,
    EngineParseError,
    ForeignItem,
    HitList,
    ParsedHit,
    finish_hits,
)
from engines.queries import GOAL, goal_query, goal_text
from engines.rates import Rate, parse_rate
from engines.redact import REDACTED, SECRET_NAME, redact_headers, redact_url
from engines.remote import USER_AGENT, RemoteAdapter
from engines.urls import check_base_url

__all__ = [
    "GOAL", "OUTAGE_STATUSES", "REDACTED", "SECRET_NAME", "USER_AGENT", "Adapter", "AskedFor", "EngineDefaults",
    "EngineHTTPError", "EngineOutage", "EngineParseError", "ForeignItem", "HitList", "LocalConfig", "ParsedHit",
    "Rate", "RemoteAdapter", "check_base_url", "config_hash", "decode_json_body", "decode_json_object",
    "finish_hits", "goal_query", "goal_text", "parse_rate", "redact_headers", "redact_url", "request_json",
    "snippet",
]
