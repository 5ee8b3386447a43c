"""A real two-epoch crawl, built once per session: the stand-in LeanSearch over the Mathlib
slice answers MathlibMPR in epoch 0 ("2026-11", with injected 5xx and connection resets),
then re-indexes (a quarter of the corpus gone) and answers again in epoch 1 ("2026-12").

Both epochs use the same base URL (same port), so they are one configuration. The base
URL carries a password, which httpx sends as ``Authorization: Basic``: the archive must
never hold it (``SECRET``)."""

from __future__ import annotations

import base64
import json
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks import SLICE_CORPUS, SLICE_CORPUS_NAME, SLICE_CORPUS_REVISION, shipped_path
from crawler.fetch import RetryPolicy
from crawler.crawl import CrawlOptions, run_crawl
from engines.base import Rate
from engines.emulate import FaultConfig, StandIn
from store.benchmarks import load_benchmark_file
from store.corpus import load_corpus
from store.db import open_database
from tests.support.crawl import MARGIN_S, Quiet

SECRET = "S3CRETPASS"
SECRET_FORMS = (SECRET.encode(), base64.b64encode(f"user:{SECRET}".encode()))
# Paced like a real crawl, but faster than the pacing tests' rate: this fixture prepares
# data (two epochs), it does not test pacing.
RATE = Rate(30, 0.5)
N_MPR = 69


@dataclass
class TwoEpochs:
    path: Path  # a prepared SQLite file: copy it before writing
    port: int

    def copy(self, dst: Path) -> str:
        shutil.copyfile(self.path, dst)
        return f"sqlite:///{dst}"

    @property
    def base_url(self) -> str:
        return f"http://user:{SECRET}@127.0.0.1:{self.port}"


def load_mpr_and_slice(url: str) -> None:
    db = open_database(url)
    try:
        load_benchmark_file(db, shipped_path("MathlibMPR.json"))
        load_corpus(db, str(SLICE_CORPUS), name=SLICE_CORPUS_NAME, revision=SLICE_CORPUS_REVISION)
    finally:
        db.dispose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def two_epochs(tmp_path_factory: pytest.TempPathFactory) -> TwoEpochs:
    path = tmp_path_factory.mktemp("two-epochs") / "src.db"
    url = f"sqlite:///{path}"
    load_mpr_and_slice(url)
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    port = _free_port()
    out = TwoEpochs(path, port)
    # A reset counts as a possible outage: the default 30 s host pause after each of the
    # first epoch's ~5 resets made this fixture take ~2 minutes; the pauses are scaled down
    # like the rate.
    policy = RetryPolicy(max_attempts=10, backoff_initial=0.02, backoff_max=0.1, outage_initial=0.1, outage_max=0.5)
    db = open_database(url)
    try:
        for label, corpus, faults, refresh in (
            ("2026-11", rows, FaultConfig(error_5xx=0.08, reset=0.05), False),
            ("2026-12", [r for i, r in enumerate(rows) if i % 4 != 1], FaultConfig(), True),
        ):
            with StandIn("leansearch", corpus, rate=RATE, faults=faults, seed=5, port=port).in_thread():
                opts = CrawlOptions(engines=["leansearch"], bench="mathlibmpr", rates={"*": RATE},
                                    urls={"leansearch": out.base_url}, policy=policy, margin=MARGIN_S,
                                    refresh=refresh, epoch_label=label)
                rep = Quiet()
                summary = run_crawl(db, opts, rep)
                assert summary.exit_code == 0, rep.lines
        with db.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.dispose()
    return out
