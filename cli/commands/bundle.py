"""``engines export`` and ``engines import``: the exchange archive as a WARC/1.1 bundle."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List

import typer

from cli.commands.common import get_db, info, progress_counter
from store.errors import InputError


def export_cmd(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", "-o", help="The bundle to write, e.g. archive.warc.gz."),
    engine: List[str] = typer.Option([], "--engine", "-e", help="Only this engine (name, label or config-hash prefix); repeatable."),
    epoch: List[str] = typer.Option([], "--epoch", help="Only this epoch (number or label); repeatable."),
) -> None:
    """Write the archived exchanges as WARC/1.1 (request/response records, digests; secrets were never stored)."""
    from archive.bundle import export_bundle

    if not (out.name.endswith(".warc.gz") or out.name.endswith(".warc")):
        raise InputError(f"--out {out}: name the bundle *.warc.gz (or *.warc for an uncompressed one)")
    db = get_db(ctx)
    t0 = time.perf_counter()
    with progress_counter("exported exchanges") as update:
        summary = export_bundle(db, out, engines=engine or None, epochs=epoch or None, progress=update)
    rate = summary.exchanges / max(time.perf_counter() - t0, 1e-9)
    info(f"wrote {summary.path}: {summary.exchanges:,} exchanges of {summary.configs} configuration(s), "
         f"{summary.records:,} records ({summary.transport_errors:,} transport errors), {summary.bytes:,} bytes "
         f"({rate:,.0f} exchanges/s)")


def import_cmd(
    ctx: typer.Context,
    bundle: Path = typer.Argument(..., help="A WARC bundle (.warc.gz or .warc) written by `engines export` or another WARC tool."),
) -> None:
    """Import a WARC bundle: every digest verified, all or nothing; hits parsed with the current parsers."""
    from archive.bundle import import_bundle

    db = get_db(ctx)
    with progress_counter("imported exchanges") as update:
        s = import_bundle(db, bundle, progress=update)
    info(f"imported {bundle}: {s.added:,} new exchanges ({s.duplicates:,} already present), "
         f"{s.answers:,} answers parsed, {s.parse_failures:,} parse failures"
         + (f", {s.foreign:,} exchanges from another tool" if s.foreign else "")
         + (f", {s.unpaired:,} records ignored (not an engine exchange)" if s.unpaired else "")
         # Both over the whole import: the answers are parsed while the records are read.
         + f"; {_per_second(s.exchanges_read, s.seconds_archive + s.seconds_parse)} exchanges/s verified and stored, "
           f"{_per_second(s.answers, s.seconds_archive + s.seconds_parse)} answers/s parsed")
    if s.unterminated:
        info("note: the bundle has no end record (written by an older engines or another tool): a cut exactly "
             "between two records could not be seen; every record read was complete and digest-checked")


def _per_second(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}" if seconds > 0 else "-"


def register(app: typer.Typer) -> None:
    app.command("export")(export_cmd)
    app.command("import")(import_cmd)
