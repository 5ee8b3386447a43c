"""A published bundle (module fixture) and the helpers that read its claims, shared by the publish tests."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import sqlalchemy as sa
from benchmarks import SLICE_CORPUS, shipped_path
from cli.main import run as cli
from store.db import open_database


SUBSET = "demo-first-3"


def build_source(url: str, tmp: Path) -> Path:
    """The source database; returns the corpus file (not shipped with the package)."""
    from crawler.fetch import RetryPolicy
    from crawler.crawl import CrawlOptions, run_crawl
    from engines.base import Rate
    from pipelines.demo import demo_cut
    from engines.emulate import FaultConfig, StandIn
    from engines.local.runner import run_bm25
    from store.benchmarks import load_benchmark_file
    from store.corpus import load_corpus
    from store.models import Benchmark, GoldName, GoldUnit, Query
    from tests.support.crawl import Quiet

    db = open_database(url)
    try:
        load_benchmark_file(db, shipped_path("MathlibQR.json"))
        subset, cut, _ = demo_cut(db, 3)
        assert subset == SUBSET
        with db.session() as s:
            gold = set(s.execute(sa.select(GoldName.name).join(GoldUnit).join(Query).join(Benchmark)
                                 .where(Benchmark.name == cut)).scalars())
        rows = []
        with open(SLICE_CORPUS, encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                obj = json.loads(line)
                if i < 300 or ".".join(obj["name"]) in gold:
                    rows.append(obj)
        corpus = tmp / "tiny.jsonl"
        corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        load_corpus(db, str(corpus), name="tiny", revision="t1")
        rate = Rate(200, 1.0)
        policy = RetryPolicy(max_attempts=12, backoff_initial=0.01, backoff_max=0.05)
        with StandIn("leansearch", rows, rate=rate, faults=FaultConfig(reset=0.3), seed=3).in_thread() as srv:
            opts = CrawlOptions(engines=["leansearch"], bench=cut, rates={"*": rate}, urls={"leansearch": srv.url},
                                policy=policy, margin=0.05,
                                stand_ins={"leansearch": {"kind": "test_publish", "seed": 3}})
            rep = Quiet()
            assert run_crawl(db, opts, rep).exit_code == 0, rep.lines
        run_bm25(db, bench=cut, corpus="tiny@t1")
    finally:
        db.dispose()
    return corpus


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("publish")
    mp = pytest.MonkeyPatch()
    mp.setenv("ENGINES_CACHE_DIR", str(d / "cache"))
    try:
        url = f"sqlite:///{d / 'src.db'}"
        corpus = build_source(url, d)
        bare, full = d / "bare.warc.gz", d / "full.warc.gz"
        for out, extra in ((bare, []), (full, ["--with-corpus"])):
            code = cli(["--db", url, "publish", "--bench", "mathlibqr", "--subset", SUBSET, "--compare",
                        "leansearch (stand-in)", "bm25", "--out", str(out), *extra])
            assert code == 0
        yield {"url": url, "corpus": corpus, "bare": bare, "full": full, "dir": d}
    finally:
        mp.undo()


def verify(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli(["verify", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def rewrite(src: Path, dst: Path, edit: Callable[[str, dict[str, str], Any, bytes], bytes | None]) -> None:
    """Copy a bundle record by record through ``edit(type, warc headers, http headers, body)``;
    warcio recomputes every length and digest, so the result is a valid WARC."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.warcwriter import WARCWriter

    drop = {"content-length", "warc-block-digest", "warc-payload-digest", "warc-type"}
    with open(src, "rb") as fh, open(dst, "wb") as out:
        writer = WARCWriter(out, gzip=True, warc_version="WARC/1.1")
        for rec in ArchiveIterator(fh):
            rtype = rec.rec_headers.get_header("WARC-Type")
            headers = {k: v for k, v in rec.rec_headers.headers if k.lower() not in drop}
            http = rec.http_headers if rtype in ("request", "response") else None
            body = rec.content_stream().read() if http is not None else rec.raw_stream.read()
            new = edit(rtype, headers, http, body)
            if new is None:
                continue
            if http is not None and rtype == "response":
                http.replace_header("Content-Length", str(len(new)))
            writer.write_record(writer.create_warc_record(
                headers.get("WARC-Target-URI", ""), rtype, payload=io.BytesIO(new), length=len(new),
                warc_content_type=headers.pop("Content-Type", ""), warc_headers_dict=headers, http_headers=http))


def claim_of(bundle: Path) -> dict:
    out: dict = {}

    def edit(rtype, headers, http, body):
        if headers.get("WARC-Engines-Role") == "claim":
            out.update(json.loads(body))
        return body

    rewrite(bundle, bundle.with_name("scratch.warc.gz"), edit)
    return out
