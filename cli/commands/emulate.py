"""``engines emulate ENGINE``: serve a loopback stand-in that speaks ENGINE's exact API.

Prints the base URL to give the adapter (``ENGINES_<ENGINE>_URL``) on stdout, serves
until interrupted (Ctrl-C or SIGTERM), then prints the server-side statistics
(requests, requests over the limit, faults) on stderr.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Optional

import typer

from cli.commands.common import info
from engines.registry import engine_list
from store.errors import InputError


def _maintenance(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        a, b = (int(x) for x in text.split(":", 1))
    except ValueError:
        raise InputError(f"--maintenance {text!r}: expected START:STOP request numbers, e.g. 10:20") from None
    if not 0 <= a < b:
        raise InputError(f"--maintenance {text!r}: need 0 <= START < STOP")
    return a, b


def emulate(
    engine: str = typer.Argument(..., help=f"{engine_list(' or ')}."),
    port: int = typer.Option(0, "--port", help="TCP port (0: a free one, printed on stdout)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    corpus: Optional[Path] = typer.Option(
        None, "--corpus", help="Corpus .jsonl/.jsonl.gz in the LeanSearch v2 schema (default: the bundled Mathlib slice)."
    ),
    rate: str = typer.Option(
        "default", "--rate", help="Server-side limit like 3/30s; 'default' = the engine's courtesy rate; 'none' = no limit."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the fault draws."),
    latency: float = typer.Option(0.0, "--latency", help="Seconds added before each answer."),
    p_5xx: float = typer.Option(0.0, "--p-5xx", help="Probability of a 500/502/503 answer."),
    p_reset: float = typer.Option(0.0, "--p-reset", help="Probability of a connection reset."),
    p_timeout: float = typer.Option(0.0, "--p-timeout", help="Probability of never answering."),
    p_malformed: float = typer.Option(0.0, "--p-malformed", help="Probability of broken JSON with status 200."),
    p_truncated: float = typer.Option(0.0, "--p-truncated", help="Probability of a body cut in half."),
    p_html: float = typer.Option(0.0, "--p-html", help="Probability of an HTML page with status 200."),
    p_drift: float = typer.Option(0.0, "--p-drift", help="Probability of a renamed name field."),
    p_duplicates: float = typer.Option(0.0, "--p-duplicates", help="Probability of a repeated hit."),
    maintenance: Optional[str] = typer.Option(None, "--maintenance", help="START:STOP: requests in this range get 405."),
) -> None:
    """Serve a loopback stand-in for ENGINE (tests, demos); the same adapters talk to it."""
    from benchmarks import SLICE_CORPUS
    from engines.base import parse_rate
    from engines.emulate import FaultConfig, StandIn
    from engines.registry import ENGINES

    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; known engines: {', '.join(ENGINES)}")
    if rate == "default":
        limit = ENGINES[engine].defaults.rate
    elif rate.lower() == "none":
        limit = None
    else:
        limit = parse_rate(rate)
    faults = FaultConfig(
        latency=latency, error_5xx=p_5xx, reset=p_reset, timeout=p_timeout, malformed_json=p_malformed,
        truncated=p_truncated, html_200=p_html, schema_drift=p_drift, duplicates=p_duplicates,
        maintenance=_maintenance(maintenance),
    )
    srv = StandIn(engine, corpus or SLICE_CORPUS, rate=limit, faults=faults, seed=seed, host=host, port=port)

    import asyncio

    async def main() -> None:
        try:
            await srv.start()
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port") from None
        print(srv.url, flush=True)
        info(f"{engine} stand-in at {srv.url} ({len(srv.rows)} declarations, rate {limit or 'unlimited'}); Ctrl-C stops")
        # SIGTERM stops the loop the way Ctrl-C does, from inside it (a KeyboardInterrupt raised
        # by a plain signal handler could land anywhere in the loop, even in srv.stop()).
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        try:
            await stop.wait()
        finally:
            await srv.stop()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    st = srv.stats
    faults_seen = ", ".join(f"{k} {v}" for k, v in sorted(st.faults.items())) or "none"
    info(f"requests {st.requests}, served {st.served}, requests over the limit: {st.violations}, faults: {faults_seen}")
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command("emulate")(emulate)
