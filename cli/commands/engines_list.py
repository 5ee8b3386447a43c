"""``engines list``: every registered engine (built in, or plugged in through the
``engines.adapters`` entry-point group) with its default URL, transport, courtesy rate,
batch size, parameters and where it came from; ``--json`` for machines."""

from __future__ import annotations

import json

import typer


def engine_rows() -> list[dict]:
    from engines.params import declared_params
    from engines.registry import ENGINES, PLUGIN_ERRORS, origin

    rows = []
    for name, cls in ENGINES.items():
        rows.append({
            "name": name, "display_name": cls.display_name, "default_url": cls.DEFAULT_URL or None,
            "known_urls": list(cls.KNOWN_URLS), "transport": cls.transport, "rate": str(cls.defaults.rate),
            "batch_size": cls.defaults.batch_size, "max_batch": cls.MAX_BATCH,
            "parameters": declared_params(cls), "key_env": list(cls.SECRET_ENVS), "stand_in": bool(cls.stand_in),
            "origin": origin(name), "summary": cls.summary,
            **({"run_hint": cls.run_hint} if cls.run_hint else {}),
        })
    return rows + [{"plugin_error": e} for e in PLUGIN_ERRORS]


def list_cmd(as_json: bool = typer.Option(False, "--json", help="One JSON document (a list of engines).")) -> None:
    """List every engine: default URL, transport, courtesy rate, batch size, parameters, origin."""
    rows = engine_rows()
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=1))
        return
    lines = [("engine", "default URL", "transport", "rate", "batch", "origin", "parameters (defaults)")]
    for r in rows:
        if "plugin_error" in r:
            lines.append(("?", r["plugin_error"], "", "", "", "", ""))
            continue
        params = " ".join(f"{k}={v}" for k, v in r["parameters"].items())
        lines.append((r["name"], r["default_url"] or "(self-hosted: --url)", r["transport"], r["rate"],
                       str(r["batch_size"]), r["origin"], params))
    widths = [max(len(line[i]) for line in lines) for i in range(6)]
    for line in lines:  # one engine per line, never wrapped: grep-able
        typer.echo("  ".join(c.ljust(w) for c, w in zip(line[:6], widths)) + "  " + line[6])


def register(app: typer.Typer) -> None:
    app.command("list")(list_cmd)
