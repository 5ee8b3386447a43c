"""``engines crawl`` and ``engines status``: crawling and inspecting the cache (``engines sql``: sql.py).

Exit codes of ``engines crawl`` (README, "Crawling"): 0 everything due is answered,
3 work remains (limit, deadline, retries exhausted, an outage or a server-requested
pause the run did not wait out), 4 an engine was stopped by the circuit breaker,
5 another crawler already holds the SQLite cache, 1 any other error (e.g. a key that
would go over plain http).
"""

from __future__ import annotations

import re
import sys
from typing import Optional

import sqlalchemy as sa
import typer
from rich.table import Table

from cli.commands.common import get_db, info, name_cell, out_console, print_json, print_table, print_tsv
from engines.registry import engine_list
from store.errors import InputError
from store.text import escaped

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s|ms)?")
_DUR_UNIT = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, None: 1.0}


def parse_duration(text: str) -> float:
    """``2h``, ``90m``, ``1h30m``, ``45s``, ``3600`` → seconds."""
    s = text.strip().lower().replace(" ", "")
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION.match(s, pos)
        if not m or m.end() == pos:
            raise InputError(f"cannot parse duration {text!r}; write e.g. 2h, 90m, 1h30m or 45s")
        total += float(m.group(1)) * _DUR_UNIT[m.group(2)]
        pos = m.end()
    if not s or total <= 0:
        raise InputError(f"duration {text!r} must be positive, e.g. 2h, 90m or 45s")
    return total


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?")
_SIZE_UNIT = {None: 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024 ** 2, "mb": 1000 ** 2,
              "mib": 1024 ** 2, "g": 1024 ** 3, "gb": 1000 ** 3, "gib": 1024 ** 3}
MAX_BODY_LIMIT = 1024 ** 3  # --max-body at most 1 GiB: the body is held in memory and archived


def parse_size(text: str, what: str = "--max-body") -> int:
    """``16MiB``, ``500kB``, ``65536`` → bytes (1..1 GiB)."""
    m = _SIZE.fullmatch(text.strip().lower())
    if not m:
        raise InputError(f"{what} {text!r}: cannot parse a size; write e.g. 16MiB, 500kB or 65536")
    n = int(float(m.group(1)) * _SIZE_UNIT[m.group(2)])
    if not 1 <= n <= MAX_BODY_LIMIT:
        raise InputError(f"{what} {text!r}: must be between 1 byte and 1GiB")
    return n


def _pairs(values: list[str], what: str, example: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or []:
        if "=" not in v:
            raise InputError(f"{what} {v!r} must be ENGINE=VALUE, e.g. {example}")
        k, val = v.split("=", 1)
        out[k.strip().lower()] = val.strip()
    return out


def crawl_cmd(
    ctx: typer.Context,
    engines: list[str] = typer.Argument(..., help=f"Remote engines to crawl: {engine_list()}."),
    bench: str = typer.Option(..., "--bench", "-b", help="Benchmark whose query texts to send (e.g. mathlibqr)."),
    rate: list[str] = typer.Option(
        None, "--rate", help="Courtesy limit N/PERIOD for every engine (3/30s), or ENGINE=N/PERIOD; repeatable."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Send at most N query texts per engine in this run."),
    deadline: Optional[str] = typer.Option(None, "--deadline", help="Stop starting requests after this long (2h, 90m, 45s)."),
    refresh: bool = typer.Option(False, "--refresh", help="Open a new epoch and re-crawl everything (old answers stay)."),
    refresh_if_older: Optional[str] = typer.Option(
        None, "--refresh-if-older", help="Open a new epoch only when the newest began longer ago than this (30d; for cron)."),
    epoch_label: Optional[str] = typer.Option(
        None, "--epoch-label", help="Label of the epoch this run crawls, e.g. 2026-12 (default: the date of its first send)."),
    url: list[str] = typer.Option(None, "--url", help="Base URL override ENGINE=URL (e.g. a stand-in); repeatable."),
    param: list[str] = typer.Option(
        None, "--param", help="An engine parameter ENGINE.KEY=VALUE (engines list shows them); repeatable."),
    num_results: Optional[int] = typer.Option(None, "--num-results", min=1, help="Results requested per query (a new configuration)."),
    all_styles: bool = typer.Option(False, "--all-styles", help="Also send non-primary styles (MathlibMPR formal statements)."),
    sample: Optional[int] = typer.Option(
        None, "--sample", min=1,
        help="Crawl only a deterministic sample of N texts, stratified by style; a larger N later keeps these (subset sample:ENGINE:SEED:N).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of --sample's permutation."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Send again texts that failed permanently (4xx, engine error)."),
    max_attempts: int = typer.Option(5, "--max-attempts", min=1, help="Attempts per request (retries on 408/429/5xx/transport)."),
    backoff: float = typer.Option(2.0, "--backoff", min=0.0, help="First retry backoff in seconds (doubles, jittered, max 60 s)."),
    breaker: int = typer.Option(10, "--breaker", min=1, help="Stop an engine after this many consecutive failed attempts."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=0.1, help="Seconds per request (default: the engine's)."),
    lease_ttl: float = typer.Option(900.0, "--lease-ttl", min=1.0, help="Seconds a worker's claim on a query lasts (PostgreSQL workers)."),
    concurrency: Optional[int] = typer.Option(
        None, "--concurrency", min=1, max=64,
        help="Requests in flight per engine (default: grown from 1 while an exchange takes longer than the "
             "pacing interval, up to 8; the rate limit holds either way)."),
    margin: Optional[float] = typer.Option(
        None, "--margin", min=0.0, help="Pacing safety margin in seconds added to the window (default 1% of T + 5 ms, 100 ms..1 s)."),
    max_body: str = typer.Option(
        "16MiB", "--max-body",
        help="Most response bytes read (decompressed); a longer body is archived truncated and fails, not retried."),
    max_pause: str = typer.Option(
        "30m", "--max-pause", help="Longest host pause (Retry-After, outage backoff) this run waits out; a longer one stops that engine (exit 3)."),
) -> None:
    """Crawl remote engines, paced and resumable; safe to kill and to run again (cron-friendly exit codes)."""
    from crawler.fetch import RetryPolicy
    from crawler.pacing import parse_rate
    from crawler.crawl import CrawlOptions, Reporter, RichReporter, run_crawl, summary_lines
    from engines.params import parse_param_options
    from engines.registry import ENGINES

    names = [e.lower() for e in engines]
    for n in names:
        if n not in ENGINES:
            raise InputError(f"unknown engine {n!r}; remote engines: {', '.join(ENGINES)}")
    rates = {}
    for r in rate or []:
        if "=" in r:
            k, v = r.split("=", 1)
            rates[k.strip().lower()] = parse_rate(v)
        else:
            rates["*"] = parse_rate(r)
    urls = _pairs(url, "--url", "leansearch=http://127.0.0.1:8765")
    for k, v in urls.items():
        if not v:
            raise InputError(f"--url {k}= is empty; pass ENGINE=http(s)://HOST[:PORT], or drop it for the public service")
        if k in ENGINES:
            from engines.base import check_base_url

            check_base_url(k, v, f"--url {k}=")
    for k in list(rates) + list(urls):
        if k != "*" and k not in names:
            raise InputError(f"--rate/--url names engine {k!r}, which is not being crawled ({', '.join(names)})")
    params = parse_param_options(param, names)
    for n in names:  # every parameter checked before anything is opened; what an adapter changed, said
        from engines.registry import get_adapter

        common = {k: v for k, v in (("num_results", num_results), ("timeout", timeout)) if v is not None}
        for note in get_adapter(n, urls.get(n) or None, **{**common, **params.get(n, {})}).notes:
            info(note)
    opts = CrawlOptions(
        params=params, engines=names, bench=bench, rates=rates, urls=urls, num_results=num_results, limit=limit,
        deadline=parse_duration(deadline) if deadline else None, refresh=refresh, all_styles=all_styles,
        retry_failed=retry_failed, lease_ttl=lease_ttl, timeout=timeout, margin=margin, sample=sample, seed=seed,
        epoch_label=epoch_label, refresh_if_older=parse_duration(refresh_if_older) if refresh_if_older else None,
        concurrency=concurrency, max_body=parse_size(max_body),
        policy=RetryPolicy(max_attempts=max_attempts, backoff_initial=backoff, breaker_threshold=breaker,
                           retry_after_cap=parse_duration(max_pause)),
    )
    db = get_db(ctx)
    reporter = RichReporter() if sys.stderr.isatty() else Reporter()
    try:
        summary = run_crawl(db, opts, reporter)
    except KeyboardInterrupt:
        reporter.close()
        info("interrupted: every finished exchange is archived; run the same command again to resume")
        raise typer.Exit(130) from None
    from store.text import escaped

    for line in summary_lines(summary):
        info(escaped(line))  # a stop reason may quote a server's body
    raise typer.Exit(summary.exit_code)


STATUS_COLUMNS = ("config", "benchmark", "epoch", "answered", "failed", "pending", "last success", "rate", "ETA")
SAMPLE_COLUMNS = ("sample subset", "benchmark", "config", "epoch", "answered")


def status_cmd(
    ctx: typer.Context,
    bench: Optional[str] = typer.Option(None, "--bench", "-b", help="Only this benchmark."),
    all_styles: bool = typer.Option(False, "--all-styles", help="Count non-primary styles too."),
    tsv: bool = typer.Option(False, "--tsv", help="Tab-separated output with a header line (tab, newline, \\ escaped)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document: columns, rows, sampled crawls, notes."),
) -> None:
    """Per engine configuration × benchmark: answered, failed, pending, last success, ETA at the configured rate."""
    from crawler.status import drop_lines, host_lines, sample_rows, status_rows

    if tsv and as_json:
        raise InputError("--tsv and --json are two output formats; pass one")
    db = get_db(ctx)
    configs, rows = status_rows(db, bench, all_styles)
    cells = [[r.config, r.benchmark, r.epoch, r.answered, r.failed, r.pending, r.last_success, r.rate, r.eta]
             for r in rows]
    samples = sample_rows(db, bench)
    notes = host_lines(db, configs) + [escaped(line) for line in drop_lines(db, configs)]
    if not configs:
        info("no remote engine configurations yet; run `engines crawl ENGINE --bench B`")
    if as_json:
        print_json({"columns": list(STATUS_COLUMNS), "rows": cells,
                    "sampled": {"columns": list(SAMPLE_COLUMNS), "rows": [list(r) for r in samples or []]},
                    "notes": notes})
        return
    if tsv:
        print_tsv(list(STATUS_COLUMNS), cells)
        for row in samples or []:  # stdout stays one table; the rest is said on stderr
            info(escaped("sampled crawl: " + ", ".join(f"{k} {v}" for k, v in zip(SAMPLE_COLUMNS, row))))
        for line in notes:
            info(line)
        return
    table = Table(*STATUS_COLUMNS)
    for c in cells:
        table.add_row(*(name_cell(v) for v in c))
    print_table(table)
    if samples is not None:
        sample_table = Table(*SAMPLE_COLUMNS, title="sampled crawls", title_justify="left")
        for row in samples:
            sample_table.add_row(*(name_cell(x) for x in row))
        print_table(sample_table)
    for line in notes:
        out_console.print(line, markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("crawl")(crawl_cmd)
    app.command("status")(status_cmd)
