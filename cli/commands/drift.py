"""``engines drift``: what changed between two epochs of a hosted engine."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.commands.common import get_db, info, out_console
from store.text import escaped


def _f(x, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _d(x) -> str:
    """A signed difference: exactly 0 prints "0"; a tiny one keeps its sign and size."""
    if x is None:
        return "—"
    if x == 0:
        return "0"
    return f"{x:+.3f}" if abs(x) >= 0.0005 else f"{x:+.1e}"


def _epoch(e: dict) -> str:
    return f"epoch {e['epoch']} ({e['label']})"


def print_drift(doc: dict, console: Console) -> None:
    o = doc["overall"]
    overall = Table(title=f"{doc['label']}: {_epoch(doc['from'])} → {_epoch(doc['to'])}, "
                          f"{doc['n_common']} queries answered in both", title_justify="left")
    overall.add_column("measure")
    overall.add_column("value", justify="right")
    overall.add_column("95% CI", justify="right")
    overall.add_column("p", justify="right")
    ci = o["rbo"]["ci"]
    overall.add_row(f"mean RBO (p = {doc['p']:g})", _f(o["rbo"]["value"]),
                    f"[{_f(ci[0])}, {_f(ci[1])}]" if ci else "—", "")
    overall.add_row("mean Jaccard@10", _f(o["jaccard@10"]), "", "")
    overall.add_row("top 1 changed", _f(o["top1_changed"]), "", "")
    overall.add_row("top 10 changed", _f(o["top10_changed"]), "", "")
    for m, d in o["paired"].items():
        lo, hi = d["ci"]
        overall.add_row(f"Δ {m} ({_f(d['from'])} → {_f(d['to'])})", _d(d["diff"]),
                        f"[{_d(lo)}, {_d(hi)}]" if lo is not None else "—", "1" if d["p"] == 1 else _f(d["p"]))
    console.print(overall)
    rows = {r["qid"]: r for r in doc["per_query"]}
    if doc["most_changed"]:
        t = Table(title="changed most (lowest RBO, then largest gold move)", title_justify="left")
        for c in ("query", "RBO", "J@10", "gold", f"top {len(rows[doc['most_changed'][0]]['top_before']) or 5} before",
                  "after"):
            t.add_column(c, justify="right" if c in ("RBO", "J@10", "gold") else "left")
        for qid in doc["most_changed"]:
            r = rows[qid]
            gold = f"{r['gold_before'] or '—'} → {r['gold_after'] or '—'}"
            # Hit names are remote text: control characters shown escaped (store.text).
            t.add_row(escape(escaped(qid)), _f(r["rbo"]), _f(r["jaccard@10"]), escaped(gold),
                      escape("\n".join(map(escaped, r["top_before"])) or "(empty)"),
                      escape("\n".join(map(escaped, r["top_after"])) or "(empty)"))
        console.print(t)
    elif doc["n_common"]:
        console.print("no query's list changed between the two epochs (compared over first occurrences)")


def drift_cmd(
    ctx: typer.Context,
    engine: str = typer.Argument(..., help="Label, engine name, display name (e.g. \"Lean Finder\") or config-hash prefix."),
    bench: str = typer.Option(..., "--bench", "-b", help="Benchmark whose queries to compare on."),
    from_epoch: Optional[str] = typer.Option(None, "--from", help="Older epoch (number or label; default: the one before --to)."),
    to_epoch: Optional[str] = typer.Option(None, "--to", help="Newer epoch (number or label; default: the newest)."),
    corpus: Optional[str] = typer.Option(None, "--corpus", "-c", help="Corpus NAME[@REVISION] for gold positions."),
    top: int = typer.Option(10, "--top", min=0, help="How many most-changed queries to list."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the whole comparison (every query) as JSON."),
) -> None:
    """Compare two epochs of one engine: RBO, Jaccard@10, top-1 changes, paired metric differences."""
    from scoring.drift import drift, write_json

    doc = drift(get_db(ctx), engine, bench, from_epoch=from_epoch, to_epoch=to_epoch, corpus=corpus, most_changed=top)
    console = out_console if out_console.is_terminal else Console(width=200, highlight=False)
    info(f"{doc['benchmark']['name']}: {doc['n_queries']} queries in scope, {doc['n_common']} answered in both epochs, "
         f"{doc['only_from']} only in epoch {doc['from']['epoch']}, {doc['only_to']} only in epoch {doc['to']['epoch']}")
    print_drift(doc, console)
    if json_path is not None:
        write_json(doc, json_path)
        info(f"wrote {json_path}")


def register(app: typer.Typer) -> None:
    app.command("drift")(drift_cmd)
