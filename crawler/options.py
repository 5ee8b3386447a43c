"""What a crawl run is asked to do and what it reports back: ``CrawlOptions``, one
``EngineResult`` per engine, the ``CrawlSummary`` and its exit codes (documented in the
README "Crawling" section and in :mod:`crawler.crawl`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crawler.fetch import MAX_BODY, RetryPolicy
from crawler.plan import Counts
from engines.base import Rate

EXIT_OK = 0
EXIT_WORK_REMAINS = 3
EXIT_ENGINE_BROKEN = 4
EXIT_ALREADY_CRAWLING = 5

@dataclass
class CrawlOptions:
    engines: list[str]
    bench: str
    rates: dict[str, Rate] = field(default_factory=dict)  # engine → rate; "*" for all
    urls: dict[str, str] = field(default_factory=dict)
    num_results: int | None = None
    limit: int | None = None  # query texts per engine in this run
    deadline: float | None = None  # seconds from start
    refresh: bool = False
    all_styles: bool = False
    retry_failed: bool = False
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    lease_ttl: float = 900.0
    timeout: float | None = None
    margin: float | None = None  # pacing safety margin (None: crawler.pacing.default_margin)
    sample: int | None = None  # crawl the first N of the seeded, style-stratified order only
    seed: int = 0
    # requests in flight per engine (None: grown from 1 by the observed exchange time vs the
    # pacing interval, up to AUTO_CONCURRENCY_MAX); the pacer bounds the rate either way
    concurrency: int | None = None
    # engine → identity that replaces the base URL in the configuration (``engines demo``'s
    # stand-ins: the same configuration whatever port they get, labelled "ENGINE (stand-in)")
    stand_ins: dict[str, dict[str, Any]] = field(default_factory=dict)
    epoch_label: str | None = None  # label of the epoch this run crawls (default: date of its first send)
    refresh_if_older: float | None = None  # seconds: open a new epoch only when the newest began earlier
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # engine → adapter parameters (--param)
    max_body: int = MAX_BODY  # response bytes read at most (decompressed); the rest: archived truncated, failed


@dataclass
class EngineResult:
    engine: str
    label: str
    config_id: int
    epoch: int
    host: str
    rate: Rate
    counts: Counts
    sent_texts: int = 0
    attempts: int = 0
    exchanges: int = 0
    answered_now: int = 0
    failed_now: int = 0
    recovered: int = 0
    stopped: str | None = None  # "limit" | "deadline" | "outage" | "paused" | "broken: ..."
    exhausted: int = 0
    outages: int = 0  # outage answers seen (maintenance pages, restarting backends)
    stop_line: str | None = None  # the one line saying why an outage / a pause stopped it


@dataclass
class CrawlSummary:
    results: list[EngineResult]
    elapsed: float
    crawl_id: int | None

    @property
    def exit_code(self) -> int:
        if any(r.stopped and r.stopped.startswith("broken") for r in self.results):
            return EXIT_ENGINE_BROKEN
        if any(r.counts.pending > 0 for r in self.results):
            return EXIT_WORK_REMAINS
        return EXIT_OK

