"""A crawl run's setup: per engine the adapter (after the TLS secret check), the
configuration (``store.writes.ensure_config``), the epoch and the work queue; then one
pacer per host and one fetcher per engine."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from crawler.fetch import Fetcher
from crawler.options import CrawlOptions, EngineResult
from crawler.pacing import Pacer
from crawler.plan import Counts, WorkQueue, benchmark_texts, current_epoch
from engines.base import Rate, config_hash
from store.epochs import is_older_than, open_epoch
from store.errors import UserError


@dataclass
class CrawlEngine:
    """One engine of a crawl run: its adapter, configuration, epoch, rate, queue and result."""

    name: str
    adapter: Any
    config_id: int
    label: str
    epoch: int
    rate: Rate
    queue: WorkQueue
    result: EngineResult
    finished: bool = False


def resolve_engines(db, opts: CrawlOptions, worker: str) -> list[CrawlEngine]:
    from engines.registry import get_adapter
    from store.benchmarks import find_benchmark
    from store.writes import ensure_config

    bench = find_benchmark(db, opts.bench)
    texts = benchmark_texts(db, bench.id, opts.all_styles)
    if not texts:
        raise UserError(f"benchmark {opts.bench!r} has no query texts to crawl")
    out: list[CrawlEngine] = []
    seen: set[str] = set()
    for name in opts.engines:
        name = name.lower()
        if name in seen:
            continue
        seen.add(name)
        params: dict[str, Any] = {}
        if opts.num_results is not None:
            params["num_results"] = opts.num_results
        if opts.timeout is not None:
            params["timeout"] = opts.timeout
        params.update(opts.params.get(name, {}))
        adapter = get_adapter(name, base_url=opts.urls.get(name), **params)
        check_secrets_over_tls(adapter)
        ident = adapter.identity()
        label = name if adapter.num_results == adapter.defaults.num_results else f"{name}@{adapter.num_results}"
        changed = {k: v for k, v in opts.params.get(name, {}).items() if k in adapter.PARAMS}
        if changed:
            label += " " + " ".join(f"{k}={v}" for k, v in changed.items())
        if name in opts.stand_ins:
            ident.pop("base_url", None)
            ident["stand_in"] = opts.stand_ins[name]
            label += " (stand-in)"
        elif "base_url" in ident:
            label += f" ({ident['base_url']})"
        with db.session() as s, s.begin():
            cfg = ensure_config(
                s, engine=adapter.engine, endpoint_version=adapter.endpoint_version, params=ident,
                config_hash=config_hash(ident), label=label[:200], result_cap=adapter.defaults.result_cap,
            )
            config_id = cfg.id
        epoch = current_epoch(db, config_id)
        if opts.refresh or (opts.refresh_if_older is not None
                            and is_older_than(db, config_id, epoch, opts.refresh_if_older)):
            epoch += 1
        kept = open_epoch(db, config_id, epoch, opts.epoch_label)
        if kept is not None and opts.refresh_if_older is None:  # a cron run keeps resuming its epoch
            raise UserError(f"{name}: epoch {epoch} is already labelled {kept!r}; drop --epoch-label, "
                            "or pass --refresh to open a new epoch with the new label")
        rate = opts.rates.get(name) or opts.rates.get("*") or adapter.defaults.rate
        if opts.sample is not None:
            from crawler.plan import SampleQueue, sampled_texts, store_sample

            sample = sampled_texts(db, bench.id, opts.all_styles, opts.sample, opts.seed)
            sid = store_sample(db, engine=name, bench=bench.name, seed=opts.seed, texts=sample)
            queue = SampleQueue(db, subset_id=sid, config_id=config_id, epoch=epoch, texts=sample,
                                benchmark_id=bench.id, all_styles=opts.all_styles, worker=worker,
                                lease_ttl=opts.lease_ttl)
        else:
            queue = WorkQueue(db, config_id=config_id, epoch=epoch, texts=texts, benchmark_id=bench.id,
                              all_styles=opts.all_styles, worker=worker, lease_ttl=opts.lease_ttl)
        result = EngineResult(engine=name, label=label, config_id=config_id, epoch=epoch, host=adapter.host,
                              rate=rate, counts=Counts(len(queue.texts), 0, 0))
        out.append(CrawlEngine(name, adapter, config_id, label, epoch, rate, queue, result))
    return out


def _is_loopback(host: str) -> bool:
    import ipaddress

    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_secrets_over_tls(adapter) -> None:
    """Refuse (one line) to crawl when a credential would cross the network in clear text.

    Probes the request the adapter would send: a secret is the value of a variable the
    adapter declares in ``SECRET_ENVS`` appearing anywhere in the request, a
    secret-looking header or query parameter (:func:`engines.base.redact_headers`'s
    pattern), or user:password in the URL. Plain ``http://`` is allowed for loopback.
    """
    from urllib.parse import parse_qsl

    from engines.redact import SECRET_NAME
    from store.errors import InputError

    request = adapter.build_request(["secret check"])
    url = request.url
    if url.scheme != "http" or _is_loopback(url.host):
        return
    found: list[str] = []
    for env in getattr(adapter, "SECRET_ENVS", ()) or ():
        value = os.environ.get(env)
        if value and (value in str(url) or any(value in v for v in request.headers.values())
                      or value.encode() in (request.content or b"")):
            found.append(env)
    found += [f"header {k}" for k in request.headers if SECRET_NAME.search(k)]
    found += [f"query parameter {k}" for k, _ in parse_qsl(url.query.decode() if isinstance(url.query, bytes)
                                                           else str(url.query)) if SECRET_NAME.search(k)]
    if url.userinfo:
        found.append("user:password in the URL")
    if found:
        raise InputError(
            f"{adapter.engine}: refusing to send a credential ({found[0]}) over plain http:// to "
            f"{url.host}; use an https:// URL, or unset the key for this host"
        )


def build_fetchers(db, engines: list[CrawlEngine], opts: CrawlOptions, *, client, ledger, clock, worker: str,
                   stop_at: float | None, crawl_id: int, writer, on_event) -> list[tuple[CrawlEngine, Fetcher]]:
    """One pacer per host (engines sharing a host share its budget: the stricter rate wins)
    and one fetcher per engine, paced by its host's pacer."""
    pacers: dict[str, Pacer] = {}
    fetchers: list[tuple[CrawlEngine, Fetcher]] = []
    for eng in engines:
        pacer = pacers.get(eng.adapter.host)
        if pacer is None or eng.rate.n / eng.rate.period < pacer.rate.n / pacer.rate.period:
            pacer = Pacer(eng.adapter.host, eng.rate, ledger, margin=opts.margin, clock=clock,
                          worker=worker, deadline=stop_at, max_wait=opts.policy.retry_after_cap)
            pacers[eng.adapter.host] = pacer
        fetchers.append((eng, Fetcher(db, eng.adapter, client, pacer, config_id=eng.config_id,
                                      epoch=eng.epoch, crawl_id=crawl_id, policy=opts.policy,
                                      on_event=on_event, before_send=eng.queue.keep_due,
                                      writer=writer, max_body=opts.max_body)))
    for eng, fetcher in fetchers:
        fetcher.pacer = pacers[eng.adapter.host]
    return fetchers
