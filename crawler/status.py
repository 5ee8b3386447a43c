"""What ``engines status`` shows, as data: per configuration x benchmark counts and ETA,
the sampled subsets, hosts in an outage or paused, and items the parsers dropped."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa


@dataclass
class StatusRow:
    config: str
    benchmark: str
    epoch: int
    answered: str
    failed: int
    pending: int
    last_success: str
    rate: str
    eta: str


def last_rates(db) -> dict:
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


def status_rows(db, bench: str | None, all_styles: bool) -> tuple[list, list[StatusRow]]:  # noqa: ANN001
    """(remote configurations, one row per configuration x benchmark)."""
    from crawler.pacing import default_margin
    from crawler.plan import WorkQueue, benchmark_texts
    from store.epochs import current_epoch
    from crawler.progress import eta, fmt_duration
    from engines.registry import ENGINES
    from store.models import Answer, Benchmark, EngineConfig, Query

    with db.session() as s:
        configs = list(s.execute(sa.select(EngineConfig).where(EngineConfig.local.is_(False)).order_by(EngineConfig.id)).scalars())
        bq = sa.select(Benchmark).order_by(Benchmark.name)
        if bench:
            bq = bq.where(Benchmark.name == bench)
        benches = list(s.execute(bq).scalars())
    if bench and not benches:
        from store.benchmarks import find_benchmark

        find_benchmark(db, bench)  # raises the one-line "no benchmark named ..." error
    rates = last_rates(db)
    rows = []
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
            rows.append(StatusRow(cfg.label, b.name, epoch, f"{c.answered}/{c.total}", c.failed, c.pending,
                                  f"{last:%Y-%m-%d %H:%M}" if last else "-", rate_s, eta_s))
    return configs, rows


def sample_rows(db, bench: str | None) -> list[tuple[str, str, str, str, str]] | None:  # noqa: ANN001
    """The sampled subsets (``engines crawl E --sample N``): how much of each is answered."""
    from crawler.plan import SAMPLE_PREFIX, parse_sample_name
    from store.epochs import current_epoch
    from store.models import Answer, EngineConfig, Subset, SubsetMember

    with db.session() as s:
        subs = [
            sub for sub in s.execute(sa.select(Subset).where(Subset.name.like(SAMPLE_PREFIX + "%")).order_by(Subset.name)).scalars()
            if parse_sample_name(sub.name) and (not bench or (sub.meta or {}).get("bench") == bench)
        ]
        if not subs:
            return None
        rows = []
        for sub in subs:
            engine, _, n = parse_sample_name(sub.name)
            members = sa.select(SubsetMember.member).where(SubsetMember.subset_id == sub.id)
            cfgs = list(s.execute(sa.select(EngineConfig).where(EngineConfig.engine == engine).order_by(EngineConfig.id)).scalars())
            for cfg in cfgs or [None]:
                if cfg is None:
                    rows.append((sub.name, str((sub.meta or {}).get("bench", "-")), "-", "-", f"0/{n}"))
                    continue
                epoch = current_epoch(db, cfg.id)
                done = s.scalar(sa.select(sa.func.count(sa.distinct(Answer.query_sha256))).where(
                    Answer.config_id == cfg.id, Answer.epoch == epoch, Answer.query_sha256.in_(members))) or 0
                rows.append((sub.name, str((sub.meta or {}).get("bench", "-")), cfg.label, str(epoch), f"{done}/{n}"))
    return rows


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
        url = (cfg.params or {}).get("base_url") or (cls.stored_url() if cls is not None else "")
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
