"""Engine parameters from the command line: ``--param ENGINE.KEY=VALUE`` (:func:`parse_param_options`)
and what each engine declares (:func:`declared_params`, shown by ``engines list``).

An adapter's parameters are ``batch_size``, ``num_results`` and ``timeout`` (every
adapter, defaults from its ``defaults``) plus its ``PARAMS`` (result-changing, with
defaults). A value is read as the default's type: an integer, a number, ``true``/``false``,
or text; ``none`` gives None where the default is None or may be omitted (Lean Finder's
``version``).
"""

from __future__ import annotations

from typing import Any

from store.errors import InputError

_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def declared_params(cls: type) -> dict[str, Any]:
    """Every parameter ``cls`` takes, with its default, in order."""
    d = cls.defaults
    return {"num_results": d.num_results, "batch_size": d.batch_size, "timeout": d.timeout, **cls.PARAMS}


def coerce(engine: str, key: str, text: str, default: Any) -> Any:
    """``text`` as the type of ``default`` (one line naming the parameter when it is not)."""
    value = text.strip()
    if value.lower() in ("none", "null") and not isinstance(default, (bool, int, float)):
        return None
    try:
        if isinstance(default, bool):
            if value.lower() not in _TRUE + _FALSE:
                raise ValueError
            return value.lower() in _TRUE
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        kind = "true or false" if isinstance(default, bool) else type(default).__name__
        raise InputError(f"--param {engine}.{key}={text!r}: expected {kind} (default {default!r})") from None
    return value


def parse_param_options(values: list[str] | None, engines: list[str]) -> dict[str, dict[str, Any]]:
    """``["leanpremise.goal_format=pp", ...]`` → ``{"leanpremise": {"goal_format": "pp"}}``,
    validated against each engine's declared parameters (one line naming the known keys)."""
    from engines.registry import ENGINES

    out: dict[str, dict[str, Any]] = {}
    for raw in values or []:
        target, eq, text = raw.partition("=")
        engine, dot, key = target.strip().lower().partition(".")
        if not eq or not dot or not engine or not key:
            raise InputError(f"--param {raw!r} must be ENGINE.KEY=VALUE, e.g. leanpremise.goal_format=notation")
        if engine not in engines:
            known = ", ".join(engines)
            raise InputError(f"--param {raw!r} names engine {engine!r}, which is not being crawled ({known})")
        params = declared_params(ENGINES[engine])
        if key not in params:
            raise InputError(f"--param {raw!r}: {engine} has no parameter {key!r}; known: {', '.join(params)}")
        out.setdefault(engine, {})[key] = coerce(engine, key, text, params[key])
    return out
