"""Checks on what a bundle's records say: our own header values, a configuration's
identity (its hash recomputed), an exchange's target host against its configuration's,
and the response headers restored as they were received."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import urlsplit

from archive.bundle.records import Record
from archive.bundle.warc import H_ATTEMPT, H_ELAPSED, H_EPOCH, H_FINISHED, H_TEXTS, ORIG, BadBundle, parse_warc_date


def restore_headers(pairs: list[tuple[str, str]], ours: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    if ours:
        for k, v in pairs:
            if k.lower() == "content-length":
                continue  # ours: the length of the decoded body; the original is X-Archive-Orig-
            if k.startswith(ORIG) or k.lower().startswith(ORIG.lower()):
                k = k[len(ORIG):]
            out[k] = v
    else:
        for k, v in pairs:
            if k.lower() in ("transfer-encoding", "content-encoding"):
                continue  # the body was decoded by the reader
            out[k.lower()] = v
    return out


def int_in(value: Any, low: int, name: str) -> int:
    """An integer column value in low..2**31-1 (a bigger one would fail the INSERT on PostgreSQL)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{name} {value!r} is not an integer")
    n = int(value)
    if not low <= n < 2**31:
        raise ValueError(f"{name} {n} is out of range {low}..{2**31 - 1}")
    return n


def our_fields(req: Record, label: str) -> tuple[int, int, list[str], float | None, dt.datetime | None]:
    """Epoch, attempt, query texts, elapsed ms and finish time from our headers; BadBundle names
    the record and the header when one of them is not what ``export`` writes."""
    import math

    name = ""
    try:
        name = H_EPOCH
        epoch = int_in(req.headers.get(H_EPOCH, "0"), 0, "epoch")
        name = H_ATTEMPT
        attempt = int_in(req.headers.get(H_ATTEMPT, "1"), 1, "attempt")
        name = H_TEXTS
        texts = json.loads(req.headers.get(H_TEXTS, "[]"))
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValueError("not a JSON list of strings")
        name = H_ELAPSED
        elapsed = float(req.headers[H_ELAPSED]) if H_ELAPSED in req.headers else None
        if elapsed is not None and not math.isfinite(elapsed):
            raise ValueError("not a finite number")
        name = H_FINISHED
        finished = parse_warc_date(req.headers[H_FINISHED]) if H_FINISHED in req.headers else None
    except (ValueError, TypeError) as exc:
        raise BadBundle(f"{label}: {req.name()} has a bad {name} value {str(req.headers.get(name))[:60]!r} "
                        f"({str(exc)[:80]}); nothing was imported") from None
    return epoch, attempt, texts, elapsed, finished


def check_identity(c: Any, h: str, label: str) -> None:
    """A configuration a bundle describes must be what its hash says: the hash recomputed from
    its parameters, the engine and endpoint version those of the parameters, a known engine."""
    from engines.base import config_hash
    from engines.registry import ENGINES

    params = c.get("params") if isinstance(c, dict) else None
    if not isinstance(params, dict):
        raise BadBundle(f"{label}: the warcinfo record describes configuration {h[:12]} without parameters; "
                        "nothing was imported")
    if config_hash(params) != h:
        raise BadBundle(f"{label}: configuration {h[:12]} in the warcinfo record does not match its parameters "
                        f"(they hash to {config_hash(params)[:12]}); the bundle was changed; nothing was imported")
    engine = c.get("engine")
    if engine not in ENGINES or params.get("engine") != engine or params.get("endpoint_version") != c.get(
            "endpoint_version"):
        raise BadBundle(f"{label}: configuration {h[:12]} in the warcinfo record names engine {engine!r} "
                        f"(endpoint {c.get('endpoint_version')!r}) but its parameters say {params.get('engine')!r} "
                        f"({params.get('endpoint_version')!r}), or the engine is unknown; nothing was imported")


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _origin(url: str) -> tuple[str, str, int | None] | None:
    try:
        p = urlsplit(url)
        port = p.port or {"http": 80, "https": 443}.get(p.scheme)
    except ValueError:
        return None
    return (p.scheme, (p.hostname or "").lower(), port)


def expected_host(engine: str, params: dict[str, Any]) -> str:
    from engines.registry import ENGINES

    if "stand_in" in params:
        return "a loopback address: a stand-in"
    cls = ENGINES.get(engine)
    base = params.get("base_url") or (cls.stored_url() if cls is not None else "") or "?"
    return urlsplit(base).netloc or base


def url_belongs(engine: str, params: dict[str, Any], url: str) -> bool:
    """Whether an exchange's target URL is one its configuration sends to: the configuration's
    base URL (or the engine's public one); a stand-in configuration, any loopback port."""
    from engines.registry import ENGINES

    got = _origin(url)
    if got is None or got[0] not in ("http", "https"):
        return False
    if "stand_in" in params:
        return _is_loopback(got[1])
    cls = ENGINES.get(engine)
    base = params.get("base_url") or (cls.stored_url() if cls is not None else None)
    return bool(base) and got == _origin(base)
