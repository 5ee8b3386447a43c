"""A crawl run's setup: per engine the adapter (after the TLS secret check), the
configuration (``store.writes.ensure_config``), the epoch and the work queue; then one
pacer per host and one fetcher per engine."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from crawler.fetch import Fetcher, RetryPolicy
from crawler.options import EXIT_WORK_REMAINS, EngineResult
from crawler.pacing import Pacer
from crawler.plan import Counts, WorkQueue, benchmark_texts
from engines.base import Rate, config_hash
from store.epochs import current_epoch, is_older_than, open_epoch
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


def resolve_engines(db, names: list[str], bench: str, *, worker: str, all_styles: bool = False,
                    urls: dict[str, str] | None = None, num_results: int | None = None, timeout: float | None = None,
                    stand_ins: dict[str, dict[str, Any]] | None = None, rates: dict[str, Rate] | None = None,
                    refresh: bool = False, refresh_if_older: float | None = None, epoch_label: str | None = None,
                    sample: int | None = None, seed: int = 0, lease_ttl: float = 900.0,
                    params: dict[str, dict[str, Any]] | None = None) -> list[CrawlEngine]:
    """Each named engine of the crawl (once): its adapter and configuration (:func:`engine_config`),
    its epoch (:func:`choose_epoch`), its rate (``rates``: engine or ``"*"`` → rate; else the
    adapter's courtesy rate) and its queue of due texts (the ``sample`` first of the seeded order only)."""
    from store.benchmarks import find_benchmark

    found = find_benchmark(db, bench)
    texts = benchmark_texts(db, found.id, all_styles)
    if not texts:
        raise UserError(f"benchmark {bench!r} has no query texts to crawl")
    check_hosts_resolve(names, urls or {})  # before any configuration or epoch is written
    rates = rates or {}
    out: list[CrawlEngine] = []
    for name in dict.fromkeys(n.lower() for n in names):
        adapter, config_id, label = engine_config(db, name, url=(urls or {}).get(name), num_results=num_results,
                                                  timeout=timeout, stand_in=(stand_ins or {}).get(name),
                                                  params=(params or {}).get(name))
        epoch = choose_epoch(db, name, config_id, refresh=refresh, refresh_if_older=refresh_if_older,
                             epoch_label=epoch_label)
        rate = rates.get(name) or rates.get("*") or adapter.defaults.rate
        if sample is not None:
            from crawler.plan import SampleQueue, sampled_texts, store_sample

            chosen = sampled_texts(db, found.id, all_styles, sample, seed)
            sid = store_sample(db, engine=name, bench=found.name, seed=seed, texts=chosen)
            queue = SampleQueue(db, subset_id=sid, config_id=config_id, epoch=epoch, texts=chosen,
                                benchmark_id=found.id, all_styles=all_styles, worker=worker, lease_ttl=lease_ttl)
        else:
            queue = WorkQueue(db, config_id=config_id, epoch=epoch, texts=texts, benchmark_id=found.id,
                              all_styles=all_styles, worker=worker, lease_ttl=lease_ttl)
        result = EngineResult(engine=name, label=label, config_id=config_id, epoch=epoch, host=adapter.host,
                              rate=rate, counts=Counts(len(queue.texts), 0, 0))
        out.append(CrawlEngine(name, adapter, config_id, label, epoch, rate, queue, result))
    return out


def check_hosts_resolve(names: list[str], urls: dict[str, str]) -> None:
    """Before anything is written or sent: every engine's host resolves. With no network (or
    a mistyped ``--url``) a crawl says so in one line and exits 3 (nothing was sent, all stays
    due) instead of retrying a name the resolver does not know like a 503."""
    from engines.offline import unresolved
    from engines.registry import get_adapter

    for name in dict.fromkeys(n.lower() for n in names):
        adapter = get_adapter(name, base_url=urls.get(name))
        check_secrets_over_tls(adapter)  # a credential over plain http is refused first, network or not
        why = unresolved(adapter.base_url)
        if why is not None:
            env = adapter.url_env()
            raise UserError(
                f"{name}: host {adapter.host} does not resolve ({why}): no network, or a wrong --url / {env}; "
                "nothing was sent and every text stays due, run the same command again when online",
                exit_code=EXIT_WORK_REMAINS)


def engine_config(db, name: str, *, url: str | None = None, num_results: int | None = None,
                  timeout: float | None = None, stand_in: dict[str, Any] | None = None,
                  params: dict[str, Any] | None = None) -> tuple[Any, int, str]:
    """The engine's adapter (after the TLS secret check), its stored configuration's id and label.
    A ``stand_in`` identity replaces the base URL in the configuration (``engines demo``);
    ``params`` are adapter parameters (``--param``), the result-changing ones named in the label."""
    from engines.registry import get_adapter
    from store.writes import ensure_config

    given = dict(params or {})
    kwargs: dict[str, Any] = {}
    if num_results is not None:
        kwargs["num_results"] = num_results
    if timeout is not None:
        kwargs["timeout"] = timeout
    adapter = get_adapter(name, base_url=url, **{**kwargs, **given})
    check_secrets_over_tls(adapter)
    ident = adapter.identity()
    label = name if adapter.num_results == adapter.defaults.num_results else f"{name}@{adapter.num_results}"
    changed = {k: v for k, v in given.items() if k in adapter.PARAMS}
    if changed:
        label += " " + " ".join(f"{k}={v}" for k, v in changed.items())
    if stand_in is not None:
        ident.pop("base_url", None)
        ident["stand_in"] = stand_in
        label += " (stand-in)"
    elif "base_url" in ident:
        label += f" ({ident['base_url']})"
    with db.session() as s, s.begin():
        cfg = ensure_config(
            s, engine=adapter.engine, endpoint_version=adapter.endpoint_version, params=ident,
            config_hash=config_hash(ident), label=label[:200], result_cap=adapter.defaults.result_cap,
        )
        config_id = cfg.id
    return adapter, config_id, label


def choose_epoch(db, name: str, config_id: int, *, refresh: bool = False, refresh_if_older: float | None = None,
                 epoch_label: str | None = None) -> int:
    """The epoch this run crawls: the current one, or the next with ``refresh`` (or when the
    current began more than ``refresh_if_older`` seconds ago); labelled ``epoch_label``."""
    epoch = current_epoch(db, config_id)
    if refresh or (refresh_if_older is not None and is_older_than(db, config_id, epoch, refresh_if_older)):
        epoch += 1
    kept = open_epoch(db, config_id, epoch, epoch_label)
    if kept is not None and refresh_if_older is None:  # a cron run keeps resuming its epoch
        raise UserError(f"{name}: epoch {epoch} is already labelled {kept!r}; drop --epoch-label, "
                        "or pass --refresh to open a new epoch with the new label")
    return epoch


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


def build_fetchers(db, engines: list[CrawlEngine], *, policy: RetryPolicy, margin: float | None, max_body: int,
                   client, ledger, clock, worker: str, stop_at: float | None, crawl_id: int, writer,
                   on_event) -> list[tuple[CrawlEngine, Fetcher]]:
    """One pacer per host (engines sharing a host share its budget: the stricter rate wins;
    ``margin``: its safety margin) and one fetcher per engine, paced by its host's pacer
    (``policy``: retries; ``max_body``: response bytes read at most)."""
    pacers: dict[str, Pacer] = {}
    fetchers: list[tuple[CrawlEngine, Fetcher]] = []
    for eng in engines:
        pacer = pacers.get(eng.adapter.host)
        if pacer is None or eng.rate.n / eng.rate.period < pacer.rate.n / pacer.rate.period:
            pacer = Pacer(eng.adapter.host, eng.rate, ledger, margin=margin, clock=clock,
                          worker=worker, deadline=stop_at, max_wait=policy.retry_after_cap)
            pacers[eng.adapter.host] = pacer
        fetchers.append((eng, Fetcher(db, eng.adapter, client, pacer, config_id=eng.config_id,
                                      epoch=eng.epoch, crawl_id=crawl_id, policy=policy,
                                      on_event=on_event, before_send=eng.queue.keep_due,
                                      writer=writer, max_body=max_body)))
    for eng, fetcher in fetchers:
        fetcher.pacer = pacers[eng.adapter.host]
    return fetchers
