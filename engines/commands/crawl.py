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
from rich.markup import escape
from rich.table import Table

from engines.commands.common import get_db, info, out_console
from store.errors import InputError

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
    engines: list[str] = typer.Argument(..., help="Remote engines to crawl: leansearch, leanexplore, leanfinder, loogle."),
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
    from crawler.run import CrawlOptions, Reporter, RichReporter, run_crawl, summary_lines
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
    opts = CrawlOptions(
        engines=names, bench=bench, rates=rates, urls=urls, num_results=num_results, limit=limit,
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


def _last_rates(db) -> dict:
    """engine → the rate its most recent crawl was told to use (``--rate``), if any."""
    from crawler.pacing import parse_rate
    from store.models import Crawl

    out: dict = {}
    with db.session() as s:
        for args in s.execute(sa.select(Crawl.args).order_by(Crawl.id.desc()).limit(200)).scalars():
            rates = (args or {}).get("rates") or {}
            for eng in (args or {}).get("engines") or []:
                if eng not in out:
                    text = rates.get(eng) or rates.get("*")
                    out[eng] = parse_rate(text) if text else None
    return {k: v for k, v in out.items() if v is not None}


def status_cmd(
    ctx: typer.Context,
    bench: Optional[str] = typer.Option(None, "--bench", "-b", help="Only this benchmark."),
    all_styles: bool = typer.Option(False, "--all-styles", help="Count non-primary styles too."),
) -> None:
    """Per engine configuration × benchmark: answered, failed, pending, last success, ETA at the configured rate."""
    from crawler.pacing import default_margin
    from crawler.plan import WorkQueue, benchmark_texts, current_epoch
    from crawler.run import eta, fmt_duration
    from engines.registry import ENGINES
    from store.models import Answer, Benchmark, EngineConfig, Query

    db = get_db(ctx)
    with db.session() as s:
        configs = list(s.execute(sa.select(EngineConfig).where(EngineConfig.local.is_(False)).order_by(EngineConfig.id)).scalars())
        bq = sa.select(Benchmark).order_by(Benchmark.name)
        if bench:
            bq = bq.where(Benchmark.name == bench)
        benches = list(s.execute(bq).scalars())
    if bench and not benches:
        from store.benchmarks import find_benchmark

        find_benchmark(db, bench)  # raises the one-line "no benchmark named ..." error
    rates = _last_rates(db)
    table = Table("config", "benchmark", "epoch", "answered", "failed", "pending", "last success", "rate", "ETA")
    for b in benches:
        texts = benchmark_texts(db, b.id, all_styles)
        for cfg in configs:
            epoch = current_epoch(db, cfg.id)
            q = WorkQueue(db, config_id=cfg.id, epoch=epoch, texts=texts, benchmark_id=b.id,
                          all_styles=all_styles, worker="status")
            c = q.counts()
            with db.session() as s:
                last = s.scalar(
                    sa.select(sa.func.max(Answer.fetched_at)).where(
                        Answer.config_id == cfg.id, Answer.epoch == epoch,
                        Answer.query_sha256.in_(sa.select(Query.query_sha256).where(Query.benchmark_id == b.id)),
                    )
                )
            cls = ENGINES.get(cfg.engine)
            if cls is not None:
                r = rates.get(cfg.engine) or cls.defaults.rate
                interval = (r.period + default_margin(r)) / r.n
                batch = int(cls.defaults.batch_size)
                rate_s, eta_s = str(r), fmt_duration(eta(c.pending, interval, batch))
            else:
                rate_s, eta_s = "-", "-"
            table.add_row(escape(cfg.label), escape(b.name), str(epoch), f"{c.answered}/{c.total}", str(c.failed), str(c.pending),
                          f"{last:%Y-%m-%d %H:%M}" if last else "-", rate_s, eta_s)
    if not configs:
        info("no remote engine configurations yet; run `engines crawl ENGINE --bench B`")
    out_console.print(table)
    samples = _sample_table(db, bench)
    if samples is not None:
        out_console.print(samples)
    for line in host_lines(db, configs) + drop_lines(db, configs):
        out_console.print(line, markup=False, highlight=False, soft_wrap=True)


def _sample_table(db, bench: str | None) -> Table | None:
    """The sampled subsets (``engines crawl E --sample N``): how much of each is answered."""
    from crawler.plan import SAMPLE_PREFIX, current_epoch, parse_sample_name
    from store.models import Answer, EngineConfig, Subset, SubsetMember

    with db.session() as s:
        subs = [
            sub for sub in s.execute(sa.select(Subset).where(Subset.name.like(SAMPLE_PREFIX + "%")).order_by(Subset.name)).scalars()
            if parse_sample_name(sub.name) and (not bench or (sub.meta or {}).get("bench") == bench)
        ]
        if not subs:
            return None
        table = Table("sample subset", "benchmark", "config", "epoch", "answered", title="sampled crawls", title_justify="left")
        for sub in subs:
            engine, _, n = parse_sample_name(sub.name)
            members = sa.select(SubsetMember.member).where(SubsetMember.subset_id == sub.id)
            cfgs = list(s.execute(sa.select(EngineConfig).where(EngineConfig.engine == engine).order_by(EngineConfig.id)).scalars())
            for cfg in cfgs or [None]:
                if cfg is None:
                    table.add_row(escape(sub.name), escape(str((sub.meta or {}).get("bench", "-"))), "-", "-", f"0/{n}")
                    continue
                epoch = current_epoch(db, cfg.id)
                done = s.scalar(sa.select(sa.func.count(sa.distinct(Answer.query_sha256))).where(
                    Answer.config_id == cfg.id, Answer.epoch == epoch, Answer.query_sha256.in_(members))) or 0
                table.add_row(escape(sub.name), escape(str((sub.meta or {}).get("bench", "-"))), escape(cfg.label),
                              str(epoch), f"{done}/{n}")
    return table


def _hhmm(t: float, now: float | None = None) -> str:
    """HH:MM (UTC), with the date when it is not today (store.text.utc_clock)."""
    import time

    from store.text import utc_clock

    return utc_clock(t, time.time() if now is None else now)


def host_lines(db, configs, now: float | None = None) -> list[str]:  # noqa: ANN001
    """One line per engine whose host is in an outage or paused (times UTC)."""
    import time
    from urllib.parse import urlsplit

    from engines.registry import ENGINES
    from store.models import HostState

    now = time.time() if now is None else now
    names: dict[str, list[str]] = {}
    for cfg in configs:
        cls = ENGINES.get(cfg.engine)
        url = (cfg.params or {}).get("base_url") or (cls.DEFAULT_URL if cls is not None else "")
        host = urlsplit(url).netloc.rpartition("@")[2]
        if host and cfg.engine not in names.setdefault(host, []):
            names[host].append(cfg.engine)
    with db.session() as s:
        rows = s.execute(sa.select(HostState.host, HostState.paused_until, HostState.outage_since,
                                   HostState.outage_reason)).all()
    from store.text import escaped

    out = []
    for host, paused, since, reason in rows:
        who = ", ".join(names.get(host, [])) or host
        if since is not None:
            nxt = f", next try {_hhmm(paused, now)}" if paused is not None and paused > now else ", next try now"
            out.append(escaped(f"{who}: outage since {_hhmm(since, now)}{nxt} (UTC; {reason})"))
        elif paused is not None and paused > now:
            out.append(escaped(f"{who}: paused until {_hhmm(paused, now)} (UTC; the server's Retry-After)"))
    return out


def drop_lines(db, configs) -> list[str]:  # noqa: ANN001
    """Per configuration: items its parser dropped (tolerant parse) in current answers."""
    from store.models import Answer

    out = []
    with db.session() as s:
        for cfg in configs:
            n, answers = s.execute(
                sa.select(sa.func.coalesce(sa.func.sum(Answer.dropped_items), 0), sa.func.count())
                .where(Answer.config_id == cfg.id, ~Answer.superseded, Answer.dropped_items > 0)
            ).one()
            if n:
                out.append(f"{cfg.label}: {n} item(s) dropped by the parser in {answers} answer(s)")
    return out


def register(app: typer.Typer) -> None:
    app.command("crawl")(crawl_cmd)
    app.command("status")(status_cmd)
