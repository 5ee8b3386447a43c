"""``engines score``: the leaderboard table, JSON and TREC export, from the database only."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from cli.commands.common import get_db, info, out_console
from scoring import view
from store.errors import InputError
from store.text import escaped

BY_CHOICES = ("style", "kind", "difficulty")


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def _ci(m: dict | None) -> str:
    if not m or not m.get("ci") or m["ci"][0] is None:
        return "—"
    lo, hi = m["ci"]
    return f"[{lo:.3f}, {hi:.3f}]"


def _main_table(doc: dict) -> Table:
    title = f"{doc['benchmark']['name']} on {doc['corpus']['name']}@{doc['corpus']['revision']}"
    if doc.get("subset"):
        title += f" · subset {doc['subset']}"
    table = Table(title=Text(escaped(title)), title_justify="left")
    if doc["profile"] == "main":
        metric_cols = list(doc["table_metrics"])
        cols = ["system", "n", "dropped", *metric_cols, "R@10 95% CI", "badges", "p95 latency"]
    else:
        metric_cols = list(doc["table_metrics"])
        cols = ["system", "n", "dropped", *metric_cols, f"{metric_cols[0]} 95% CI", "badges", "p95 latency"]
    # Cross-corpus rows: show how much of the benchmark's gold each system's corpus holds.
    show_cov = bool(doc.get("scope", {}).get("shared_with")) or any("different corpus" in s["badges"] for s in doc["systems"])
    if show_cov:
        cols.insert(3, "coverage")
    cols.insert(1, "epoch")
    for c in cols:
        table.add_column(c, justify="left" if c in ("system", "badges") else "right", no_wrap=c != "badges")
    for s in view.ranked(doc["systems"], view.headline(doc)):
        ci_metric = "R@10" if doc["profile"] == "main" else metric_cols[0]
        lat = s.get("latency_p95_ms")
        badges = list(s["badges"])
        if s.get("unanswered"):
            badges[badges.index("incomplete")] = f"incomplete ({s['unanswered']} unanswered)"
        if s.get("licence"):
            badges.append(s["licence"])
        if s.get("source") and "imported" in badges:
            badges[badges.index("imported")] = f"imported ({escape(escaped(str(s['source'])))})"
        cov = [_fmt(s.get("coverage"))] if show_cov else []
        table.add_row(
            escape(escaped(view.label(s))), escape(escaped(_epoch_cell(s))), str(s["n"]), str(s["dropped"]), *cov,
            *[_fmt((s["metrics"].get(m) or {}).get("value")) for m in metric_cols],
            _ci(s["metrics"].get(ci_metric)), ", ".join(badges),
            "—" if lat is None else f"{lat:,.0f} ms",
        )
    return table


def _epoch_cell(s: dict) -> str:
    label = s.get("epoch_label")
    return str(s.get("epoch")) + (f" ({label})" if label else "")


def _breakdown_table(doc: dict, dim: str) -> Table | None:
    values = sorted({v for s in doc["systems"] for v in (s["breakdowns"].get(dim) or {})})
    if not values:
        return None
    keys = ("nDCG@10", "R@10") if doc["profile"] == "main" else ("nDCG", "AP")
    table = Table(title=f"by {dim}: {keys[0]} / {keys[1]} (n)", title_justify="left")
    table.add_column("system")
    for v in values:
        table.add_column(Text(escaped(v)), justify="right")
    for s in doc["systems"]:
        cells = []
        for v in values:
            c = (s["breakdowns"].get(dim) or {}).get(v)
            cells.append("—" if c is None else f"{_fmt(c.get(keys[0]))} / {_fmt(c.get(keys[1]))} ({c['n']})")
        table.add_row(escape(escaped(s["id"])), *cells)
    return table


def _published_table(doc: dict, src: dict) -> Table:
    """Reference rows: never ranked with the measured rows; blank where the source is silent."""
    cols = [m for m in doc["table_metrics"] if any(m in r["metrics"] for r in src["rows"])]
    extra = sorted({m for r in src["rows"] for m in r["metrics"]} - set(cols))
    title = (f"published (reference, not ranked): {src['source']}, {src['table']} [{src['ref']}] · "
             f"{src['slice']} · corpus: {src['corpus']} · transcribed {src['transcribed']}")
    table = Table(title=Text(escaped(title)), title_justify="left")
    table.add_column("system")
    for m in cols + extra:
        table.add_column(m, justify="right")
    for r in src["rows"]:
        badge = "".join(f" [bold]{escape(escaped(b))}[/bold]" for b in r.get("badges") or [])
        table.add_row(escape(escaped(r["system"])) + " [dim](published)[/dim]" + badge,
                      *["" if r["metrics"].get(m) is None else f"{r['metrics'][m]:.3f}" for m in cols + extra])
    return table


def _comparison_table(doc: dict) -> Table:
    table = Table(title="paired bootstrap: A − B (on the queries both rows are scored on)", title_justify="left")
    for c in ("A", "B", "metric", "n", "diff", "95% CI", "p"):
        table.add_column(c, justify="left" if c in ("A", "B", "metric") else "right")
    for c in doc["comparisons"]:
        lo, hi = c["ci"]
        table.add_row(escape(escaped(c["a"])), escape(escaped(c["b"])), c["metric"], str(c.get("n", "")), f"{c['diff']:+.3f}",
                      f"[{lo:+.3f}, {hi:+.3f}]", f"{c['p']:.3f}")
    return table


def _scope_notes(scope: dict, doc: dict) -> None:
    """The scoring conventions a reader must know to compare these figures."""
    if scope.get("uncovered") == "zero":
        info(f"--uncovered zero: {len(scope['uncovered_qids'])} queries whose gold is not in "
             f"{escaped(doc['corpus']['name'])} stay in n, scored 0 (the methodology drops them: --uncovered drop)")
    if scope.get("answered_by"):
        info(f"--answered-by {escaped(scope['answered_by']['system'])}: only the {scope['answered_by']['texts']} query "
             "texts it answered are scored")


def _order_notes(doc: dict) -> None:
    """Why a row sits after the ranked ones: its sort metric is undefined."""
    for s in doc["systems"]:
        if s.get("order_note"):
            info(escaped(f"note: {view.label(s)} is {s['order_note']}"))


def register(app: typer.Typer) -> None:
    @app.command("score")
    def score_cmd(
        ctx: typer.Context,
        bench: str = typer.Option(..., "--bench", "-b", help="Benchmark name, e.g. mathlibqr or mathlibmpr."),
        corpus: Optional[str] = typer.Option(None, "--corpus", "-c", help="Corpus NAME[@REVISION] (default: the only one loaded)."),
        subset: Optional[str] = typer.Option(None, "--subset", help="Score only a loaded subset, e.g. shared171."),
        shared_with: List[str] = typer.Option(
            [], "--shared-with", help="Restrict to gold names also present in this corpus (NAME[@REV]) or name-list file; repeatable."
        ),
        snapshot: List[str] = typer.Option(
            [], "--snapshot", help="SYSTEM=CORPUS_OR_FILE: the snapshot an engine searches (coverage, 'different corpus' badge)."
        ),
        system: List[str] = typer.Option([], "--system", "-s", help="Score only these systems (id, label or config-hash prefix); repeatable."),
        style: List[str] = typer.Option([], "--style", help="Query styles to score (default: the benchmark's primary styles; 'all' for every style)."),
        by: List[str] = typer.Option([], "--by", help="Also print a breakdown by style, kind or difficulty; repeatable."),
        compare: Optional[Tuple[str, str]] = typer.Option(None, "--compare", help="Paired bootstrap between two systems: --compare A B."),
        profile: str = typer.Option("main", "--profile", help="main | mamut | mamut-sklearn (MAMUT numbers are not comparable to main)."),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Write the full result (curves, CIs, per-query positions) as JSON."),
        trec_dir: Optional[Path] = typer.Option(None, "--trec", help="Write qrels.txt and one run file per system into this directory."),
        slice_: Optional[str] = typer.Option(
            None, "--slice", help="engine-subset:ENGINE: score every row on that engine's sampled queries (engines crawl --sample)."
        ),
        published: bool = typer.Option(
            False, "--published", help="Also print the published reference rows that apply (BENCHMARKS.md §9), never ranked."
        ),
        epoch: Optional[str] = typer.Option(
            None, "--epoch", help="Epoch to score per configuration: newest (default), all, or an epoch number or label."),
        uncovered: str = typer.Option(
            "drop", "--uncovered", help="Queries whose gold is not in the corpus: drop (leave n; the methodology's) "
            "or zero (stay in n, scored 0)."),
        answered_by: Optional[str] = typer.Option(
            None, "--answered-by", help="Score only the queries this system answered (compare on a partial run's queries)."),
    ) -> None:
        """Score every system on a benchmark: leaderboard table, CIs, optional JSON / TREC export."""
        from scoring.results import score, write_json

        for b in by:
            if b not in BY_CHOICES:
                raise InputError(f"--by {b!r}: choose one of {', '.join(BY_CHOICES)}")
        snapshots = {}
        for item in snapshot:
            sid, sep, src = item.partition("=")
            if not sep or not sid or not src:
                raise InputError(f"--snapshot {item!r}: expected SYSTEM=CORPUS_OR_FILE")
            snapshots[sid] = src
        db = get_db(ctx)
        result = score(
            db, bench, corpus=corpus, subset=subset, systems=system or None, by=by or None,
            compare=tuple(compare) if compare and compare[0] else None, profile=profile,
            shared_with=shared_with or None, snapshots=snapshots or None, styles=style or None, slice=slice_, epochs=epoch,
            uncovered=uncovered, answered_by=answered_by,
        )
        doc = result.to_json()
        if not doc["systems"]:  # as engines plot: nothing to rank is a failure, not an empty table
            raise InputError(f"{bench}: no system has answers for these queries yet "
                             f"(crawl or run a local engine first, e.g. `engines run bm25 --bench {bench}`)")
        if published:
            from scoring.reference_rows import attach

            attach(doc)
        to_stdout = json_path is not None and str(json_path) == "-"
        # Piped output (files, CI logs) gets a wide console so no column is squeezed to "…";
        # with --json - the JSON owns stdout and the tables go to stderr.
        console = (Console(stderr=True, width=240, highlight=False) if to_stdout
                   else out_console if out_console.is_terminal else Console(width=240, highlight=False))
        if view.banner(doc):
            console.print(f"[bold red]{escape(escaped(view.banner(doc)))}[/bold red]")
        scope = doc["scope"]
        info(escaped(
            f"{doc['benchmark']['name']}: {doc['benchmark']['n_queries']} queries in scope, "
            f"{len(scope['dropped_qids'])} dropped (gold not in {doc['corpus']['name']}), "
            f"{scope['unresolved_units']} gold units unresolved; profile {doc['profile']}"
        ))
        _scope_notes(scope, doc)
        if doc["systems"]:
            console.print(_main_table(doc))
            _order_notes(doc)
            if doc.get("overlapping_units"):
                info(f"note: {doc['overlapping_units']} scored queries have premise groups sharing a name; there P@k, "
                     "nDCG and AP credit each returned row to one group (maximum matching), R@k and Covered count every group")
            for dim in by:
                t = _breakdown_table(doc, dim)
                if t is not None:
                    console.print(t)
                else:
                    info(f"--by {dim}: this benchmark's queries carry no {dim}")
            if doc["comparisons"]:
                console.print(_comparison_table(doc))
        if published:
            if not doc["published"]:
                info("--published: no published numbers were computed on this query set (they apply to mathlibqr "
                     "--subset shared171, full mathlibqr and mathlibmpr, main profile)")
            for src in doc["published"]:
                console.print(_published_table(doc, src))
        if to_stdout:
            import json

            typer.echo(json.dumps(doc, ensure_ascii=False, allow_nan=False))
        elif json_path is not None:
            if published:
                _write_doc(doc, json_path)
            else:
                write_json(result, json_path)
            info(f"wrote {json_path}")
        if trec_dir is not None:
            from scoring.export import export_trec

            paths = export_trec(db, result, trec_dir)
            info(f"wrote {len(paths)} TREC files to {trec_dir}")


def _write_doc(doc: dict, path: Path) -> None:
    """The score JSON with the published block, written atomically like write_json."""
    import json

    if path.parent and not path.parent.exists():
        raise InputError(f"directory {path.parent} for --json {path} does not exist; create it first")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, ensure_ascii=False, allow_nan=False), encoding="utf-8")
    tmp.replace(path)
