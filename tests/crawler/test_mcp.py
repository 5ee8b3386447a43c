"""The MCP engines (issue 33): theoremsearch, octo, leanexplore-mcp, crawled like the rest.

Real parts only: the stand-ins run on loopback — TheoremSearch's hand-rolled JSON-RPC server,
the official ``mcp`` SDK's server in its three wire variants for the others — and the
crawler speaks MCP over its own transport (every POST paced and archived). Each engine:
crawl on SQLite and PostgreSQL, hits stored equal what was served rank by rank, re-crawl
sends nothing, reparse sends and changes nothing, export → import → score equal,
publish → verify exit 0.
"""

from __future__ import annotations

import itertools
import re
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchmarks import SLICE_CORPUS
from cli.main import run as cli
from archive.bundle import export_bundle, import_bundle
from crawler.fetch import RetryPolicy
from crawler.crawl import CrawlOptions, run_crawl
from engines.base import Rate
from engines.emulate import FaultConfig, StandIn
from engines.registry import get_adapter
from scoring.results import score
from store.db import open_database
from store.models import Answer, EngineConfig, Exchange, Hit
from tests.support.crawl import Quiet, _load_mpr
from tests.support.epochs import load_mpr_and_slice

RATE = Rate(200, 1.0)
POLICY = RetryPolicy(max_attempts=8, backoff_initial=0.01, backoff_max=0.05, outage_initial=0.05, outage_max=0.2)
CASES = [("theoremsearch", None), ("leanexplore-mcp", "stateful-sse"), ("leanexplore-mcp", "stateless-json"),
         ("leanexplore-mcp", "2026-07-28"), ("octo", "2026-07-28"), ("octo", "stateful-sse")]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        return [json.loads(line) for line in itertools.islice(fh, 400)]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINES_CACHE_DIR", str(tmp_path / "cache"))


def crawl(url: str, engine: str, srv: StandIn, *, rate: Rate = RATE, **kw):
    db = open_database(url)
    rep = Quiet()
    try:
        opts = CrawlOptions(engines=[engine], bench="mathlibmpr", rates={"*": rate}, urls={engine: srv.url},
                            policy=kw.pop("policy", POLICY), margin=kw.pop("margin", 0.05), **kw)
        return run_crawl(db, opts, rep), rep
    finally:
        db.dispose()


def stored(url: str, engine: str) -> dict[str, list[str]]:
    db = open_database(url)
    try:
        with db.session() as s:
            q = (sa.select(Answer.query_text, Hit.rank, Hit.name).join(Hit, Hit.answer_id == Answer.id)
                 .join(EngineConfig, EngineConfig.id == Answer.config_id).where(EngineConfig.engine == engine)
                 .order_by(Answer.query_text, Hit.rank))
            out: dict[str, list[str]] = {}
            for text, rank, name in s.execute(q):
                out.setdefault(text, []).append(name)
            return out
    finally:
        db.dispose()


def exchanges(url: str) -> list[Exchange]:
    db = open_database(url)
    try:
        with db.session() as s:
            return list(s.execute(sa.select(Exchange).order_by(Exchange.id)).scalars())
    finally:
        db.dispose()


def served(srv: StandIn, engine: str, text: str) -> list[str]:
    """What the stand-in ranks for ``text`` (the adapter's num_results), first rank of a repeated name."""
    k = get_adapter(engine).num_results
    names = [row.name for row, _ in srv.index.search(text, k)]
    return list(dict.fromkeys(names))


@pytest.mark.parametrize("engine,variant", CASES)
def test_crawl_each_variant_hits_equal_served_recrawl_and_reparse_send_nothing(sqlite_url, rows, engine, variant):
    _load_mpr(sqlite_url)
    with StandIn(engine, rows, variant=variant) as srv:
        summary, rep = crawl(sqlite_url, engine, srv)
        assert summary.exit_code == 0, rep.lines
        got = stored(sqlite_url, engine)
        texts = {e.query_texts[0] for e in exchanges(sqlite_url) if e.query_texts}
        assert len(texts) == 69
        for text in texts:
            assert got.get(text, []) == served(srv, engine, text), text
        n = srv.stats.requests
        preambles = [e for e in exchanges(sqlite_url) if not e.query_texts]
        methods = [json.loads(e.request_body)["method"] for e in preambles]
        era = "2026-07-28" if variant == "2026-07-28" else "handshake"
        if era == "handshake":
            assert methods == ["server/discover", "initialize", "notifications/initialized", "tools/list"]
        else:
            assert methods == ["server/discover", "tools/list"]
        assert n == 69 + len(methods)  # every POST archived; one per answered query after the preamble
        assert [e.status_code for e in preambles][0] in ((400, 200) if engine != "theoremsearch" else (200,))
        for e in exchanges(sqlite_url):  # the session id is a credential: never archived
            sid = {k.lower(): v for k, v in (e.response_headers or {}).items()}.get("mcp-session-id")
            assert sid in (None, "[redacted]")
            assert "mcp-session-id" not in {k.lower() for k in e.request_headers} or \
                {k.lower(): v for k, v in e.request_headers.items()}["mcp-session-id"] == "[redacted]"
        again, rep = crawl(sqlite_url, engine, srv)
        assert again.exit_code == 0 and srv.stats.requests == n  # re-crawl sends nothing
    before = stored(sqlite_url, engine)
    assert cli(["--db", sqlite_url, "reparse", engine]) == 0  # no stand-in running: nothing can be sent
    assert stored(sqlite_url, engine) == before


@pytest.mark.parametrize("engine,variant", [("theoremsearch", None), ("leanexplore-mcp", "stateful-sse"),
                                            ("octo", "2026-07-28")])
def test_export_import_score_equal_publish_verify_on_any_db(any_db_url, rows, tmp_path, capsys, engine, variant):
    load_mpr_and_slice(any_db_url)
    with StandIn(engine, rows, variant=variant, faults=FaultConfig(error_5xx=0.1, malformed_json=0.1), seed=4) as srv:
        summary, rep = crawl(any_db_url, engine, srv)
    assert summary.exit_code == 0, rep.lines
    assert srv.stats.faults["error_5xx"] + srv.stats.faults["malformed_json"] > 0
    src = open_database(any_db_url)
    dst_url = f"sqlite:///{tmp_path / 'dst.db'}"
    load_mpr_and_slice(dst_url)
    dst = open_database(dst_url)
    try:
        bundle = tmp_path / "b.warc.gz"
        export_bundle(src, bundle)
        imported = import_bundle(dst, bundle)
        assert imported.added == len(exchanges(any_db_url))
        a, b = score(src, "mathlibmpr").to_json(), score(dst, "mathlibmpr").to_json()
        for doc in (a, b):
            doc.pop("generated_at", None)
            for s in doc["systems"]:
                s.pop("latency_p95_ms", None)
        assert a == b
    finally:
        src.dispose()
        dst.dispose()
    assert stored(dst_url, engine) == stored(any_db_url, engine)
    out = tmp_path / "pub.warc.gz"
    assert cli(["--db", any_db_url, "publish", "--bench", "mathlibmpr", "--out", str(out)]) == 0
    capsys.readouterr()
    assert cli(["verify", str(out)]) == 0, capsys.readouterr()


def test_a_bare_tools_call_outside_a_session_is_what_read_request_inverts():
    for engine in ("theoremsearch", "octo", "leanexplore-mcp"):
        a = get_adapter(engine, num_results=7)
        r = a.build_request(["add comm"])
        assert r.headers["accept"] == "application/json, text/event-stream"
        asked = a.read_request(r.method, str(r.url), r.content)
        assert asked is not None and asked.texts == ["add comm"]
        assert get_adapter(engine, **asked.params).identity() == a.identity()
    ts = get_adapter("theoremsearch")
    body = json.loads(ts.build_request(["x"]).content)
    assert body["params"]["arguments"] == {"query": "x", "n_results": 20, "formality": "formal"}
    assert ts.identity()["formality"] == "formal"
    assert get_adapter("octo").base_url.endswith("/mcp/")  # the trailing slash kept


def test_fingerprint_is_url_tool_arguments_era_never_id_meta_or_session():
    from engines.mcpwire import STATELESS, McpState

    a = get_adapter("leanexplore-mcp")
    one = a.build_call(["q"], McpState(era="handshake", version="2025-11-25", session_id="s1", next_id=5))
    two = a.build_call(["q"], McpState(era="handshake", version="2025-11-25", session_id="s2", next_id=99))
    new = a.build_call(["q"], McpState(era=STATELESS, version=STATELESS))
    fp = lambda r, era: a.fingerprint(r.method, str(r.url), r.content, era)  # noqa: E731
    assert one.content != two.content and fp(one, "handshake") == fp(two, "handshake")
    assert fp(new, STATELESS) != fp(one, "handshake")
    assert json.loads(new.content)["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == STATELESS
    assert new.headers["mcp-method"] == "tools/call" and new.headers["mcp-name"] == "search_summary"


# ------------------------------------------------------------------------------ faults


def test_answer_read_from_the_stream_is_the_response_not_a_notification():
    from engines.mcpwire import rpc_message

    sse = {"content-type": "text/event-stream"}
    body = (b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\r\n\r\n'
            b'event: message\r\ndata: {"jsonrpc":"2.0","id":7,"result":{"ok":1}}\r\n\r\n')
    assert rpc_message("x", sse, body) == {"jsonrpc": "2.0", "id": 7, "result": {"ok": 1}}
    assert rpc_message("x", sse, body, want_id=7)["result"] == {"ok": 1}


def test_jsonrpc_and_tool_errors_are_failures_rate_limits_and_limits_are_pauses():
    from engines.base import EngineHTTPError, EngineOutage, EngineParseError
    from engines.octo import limit_pause

    ts, js = get_adapter("theoremsearch"), {"content-type": "application/json"}
    err = lambda code, msg: json.dumps({"jsonrpc": "2.0", "id": 2, "error": {"code": code, "message": msg}}).encode()  # noqa: E731
    with pytest.raises(EngineHTTPError, match="-32602"):
        ts.parse(["q"], 200, js, err(-32602, "query must be a non-empty string"))
    with pytest.raises(EngineOutage, match="RateLimitError"):
        ts.parse(["q"], 200, js, err(-32603, "RateLimitError: Error code: 429"))
    with pytest.raises(EngineHTTPError, match="-32603"):
        ts.parse(["q"], 200, js, err(-32603, "KeyError: 'x'"))  # another internal error: a failure
    with pytest.raises(EngineParseError):
        ts.parse(["q"], 200, js, b'{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"# md"}]}}')
    octo = get_adapter("octo")
    limited = json.dumps({"jsonrpc": "2.0", "id": 3, "result": {"isError": True, "content": [
        {"type": "text", "text": "Daily limit reached; resets at 00:00 UTC"}]}}).encode()
    with pytest.raises(EngineOutage):
        octo.parse(["q"], 200, js, limited)
    noon = 1_767_268_800.0  # 2026-01-01 12:00 UTC
    assert octo.pause_seconds(200, js, limited, noon) == 12 * 3600
    assert limit_pause("Hourly limit reached", noon) == 3600
    other = limited.replace(b"Daily limit reached; resets at 00:00 UTC", b"bad scope")
    with pytest.raises(EngineHTTPError, match="bad scope"):
        octo.parse(["q"], 200, js, other)
    assert octo.pause_seconds(200, js, other, noon) is None
    assert get_adapter("theoremsearch").parse([], 202, {}, b"") == []  # a preamble answers nothing


def test_406_when_accept_lacks_sse_and_the_crawler_sends_both(rows):
    import httpx

    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    with StandIn("leanexplore-mcp", rows, variant="stateful-sse") as srv, httpx.Client() as client:
        bad = client.post(srv.url, content=init, headers={"Accept": "application/json", "Content-Type": "application/json"})
        assert bad.status_code == 406 and b"Not Acceptable" in bad.content
        a = get_adapter("leanexplore-mcp", base_url=srv.url)
        good = client.post(srv.url, content=init, headers=a.request_headers(json_body=True))
        assert good.status_code == 200 and good.headers["content-type"].startswith("text/event-stream")


def test_sse_split_across_reads_and_an_expired_session_reopened_once(sqlite_url, rows):
    _load_mpr(sqlite_url)
    seen: list[str] = []
    with StandIn("leanexplore-mcp", rows, variant="stateful-sse") as srv:
        srv.api.split_sse = True

        def expire_at_20(texts, req):
            if texts:
                seen.extend(texts)
            if texts and len(seen) == 20:  # the server ends the session this call carries
                srv.api.expired.add(req.headers["mcp-session-id"])
            return None
        srv.canned = expire_at_20
        summary, rep = crawl(sqlite_url, "leanexplore-mcp", srv)
        assert summary.exit_code == 0, rep.lines
        got = stored(sqlite_url, "leanexplore-mcp")
        assert len(got) > 60 and all(v == served(srv, "leanexplore-mcp", t) for t, v in got.items())
    methods = [json.loads(e.request_body).get("method") for e in exchanges(sqlite_url)]
    assert methods.count("initialize") == 2 and methods.count("tools/list") == 1  # re-opened once, schema kept
    statuses = [e.status_code for e in exchanges(sqlite_url)]
    assert 1 <= statuses.count(404) <= 4 and 400 not in statuses[4:]  # the calls in flight on the old session


def test_theoremsearch_rate_limit_error_pauses_and_every_text_is_answered(sqlite_url, rows):
    _load_mpr(sqlite_url)
    with StandIn("theoremsearch", rows, rate=Rate(20, 1.0)) as srv:
        summary, rep = crawl(sqlite_url, "theoremsearch", srv, rate=Rate(60, 1.0))
        assert srv.stats.violations > 0  # the server's -32603 RateLimitError, HTTP 200
    assert summary.exit_code == 0, rep.lines
    assert any("outage" in line and "RateLimitError" in line for line in rep.lines)
    assert len(stored(sqlite_url, "theoremsearch")) >= 60 and summary.results[0].counts.failed == 0


def test_octo_limit_reached_is_a_pause_not_an_answer(sqlite_url, rows):
    _load_mpr(sqlite_url)
    with StandIn("octo", rows) as srv:
        srv.api.limit_after = 5
        summary, rep = crawl(sqlite_url, "octo", srv, policy=RetryPolicy(retry_after_cap=1.0, backoff_initial=0.01))
    res = summary.results[0]
    assert summary.exit_code == 3 and res.counts.failed == 0, rep.lines
    assert len(stored(sqlite_url, "octo")) == 5
    assert any("paused" in line.lower() for line in rep.lines), rep.lines


@pytest.mark.parametrize("engine,variant", CASES)
async def test_the_sdk_client_is_served_by_our_emulator(rows, engine, variant):
    from mcp import Client

    tool, args = {"theoremsearch": ("theorem_search", {"n_results": 5, "formality": "formal"}),
                  "leanexplore-mcp": ("search_summary", {"limit": 5}),
                  "octo": ("search_lean", {"limit": 5, "scope": "mathlib"})}[engine]
    async with StandIn(engine, rows, variant=variant) as srv:
        async with Client(srv.url) as client:
            result = await client.call_tool(tool, {"query": "add comm", **args})
        assert not result.is_error
        sc = result.structured_content
        hits = sc.get("theorems") or sc.get("results") or sc.get("hits")
        expected = [row.name for row, _ in srv.index.search("add comm", 5)]
        assert [h["name"] for h in hits] == expected and expected


def test_leanexplore_mcp_100_queries_under_a_budget_counting_every_post():
    """perf/mcp_posts.py at a scaled-up rate (30 POST / 3 s, every POST counted by the
    stand-in): no 429, at most 1.05 POSTs per answered query, the window never exceeded."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "perf" / "mcp_posts.py"), "--period", "3"],
                          capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    posts, answered = map(int, re.search(r"POSTs (\d+), answered (\d+)", proc.stdout).groups())
    assert answered == 100 and posts / answered <= 1.05
    assert "HTTP 429: 0 " in proc.stdout
    assert int(re.search(r"most POSTs in any 3 s: (\d+)", proc.stdout).group(1)) <= 30
