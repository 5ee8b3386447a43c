"""Real recorded bodies (tests/data/real-responses, issue 11): parsers, stand-ins, the crawler.

Every body was recorded from the real service by a public client (PROVENANCE.md says
where, and how a fragment is wrapped into a wire body; the wrapping below follows it
exactly). Each body is checked three ways: by the adapter's parser directly, served
over loopback by a stand-in replaying it (``StandIn(canned=...)``), and through the
real crawler (``run_crawl``) into hits in the database, on SQLite and PostgreSQL.
Also here: per-item drops (tolerant items), outage classification, LeanStateSearch
requests, the score JSON's dropped-items count, and the parser-version guard.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from crawler.fetch import RetryPolicy
from crawler.crawl import CrawlOptions, run_crawl
from engines import (jsonbody, leandex, leanexplore, leanfinder, leanpremise, leansearch, leansearch_ps, leanstatesearch,
                     loogle, mcpwire, octo, protocol, sse, theoremsearch)
from engines.base import EngineHTTPError, EngineOutage, EngineParseError, HitList, Rate, config_hash
from engines.emulate import StandIn
from engines.remote import RemoteAdapter
from engines.registry import ENGINES, get_adapter
from store.benchmarks import load_benchmark_file
from store.db import open_database
from store.models import Answer, EngineConfig, Hit, ParseOutcome, WorkLease
from tests.support.crawl import Quiet
from tests.support.scoring import cache, cache_url, prepared_cache  # noqa: F401  (fixtures)

REAL = Path(__file__).resolve().parents[1] / "data" / "real-responses"
JSON_CT = {"content-type": "application/json"}
FAST = Rate(20, 0.5)
TINY_CORPUS = [{"name": ["Nat", "add_comm"], "module_name": ["Mathlib", "Algebra", "Group", "Defs"],
                "signature": "(n m : ℕ) : n + m = m + n"}]



@pytest.fixture(autouse=True)
def _self_hosted_url(monkeypatch):
    """leansearch-ps has no public server: its adapter needs a URL (here a loopback one)."""
    monkeypatch.setenv("ENGINES_LEANSEARCH_PS_URL", "http://127.0.0.1:8080")


def raw(rel: str) -> bytes:
    return (REAL / rel).read_bytes()


def expected(rel: str) -> dict[str, Any]:
    return json.loads((REAL / rel.replace(".json", ".expected.json")).read_text(encoding="utf-8"))


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


@dataclass
class Body:
    """One wire body: which engine, the query text we send for it, status, bytes, expectation."""

    id: str
    engine: str
    text: str
    status: int
    body: bytes
    names: list[str] | None  # expected names in order (None: an error body)
    error: str | None = None  # expected error message (it must appear in the raised error)
    params: dict[str, Any] | None = None  # adapter parameters the recorded request used


def _receipts(rel: str) -> list[Body]:
    # PROVENANCE.md: one wire body per receipt R: {"query", "results", "count", "packages_applied"}.
    out = []
    exp = expected(rel)
    for i, r in enumerate(json.loads(raw(rel))):
        wire = {"query": r["query"], "results": r["results"], "count": len(r["results"]),
                "packages_applied": r["packages_applied"]}
        out.append(Body(f"{rel}[{i}]", "leanexplore", r["query"], 200, dumps(wire), exp["parts"][i]["names"],
                        params={"packages": r["library"]}))
    return out


def real_bodies() -> list[Body]:
    ls_legacy = "leansearch/legacy-api-search-rank-nullity.json"
    ls_legacy2 = "leansearch/legacy-api-search-rank-nullity-v2.json"
    ls_inner = "leansearch/lsc-v2-inner-fin2-islt-succ.json"
    ls_result = "leansearch/lsp-mcp-v2-result-finset-card-compl.json"
    lg_prime = "loogle/nat-prime-trimmed.json"
    lg_parse = "loogle/parse-error.json"
    lg_unknown = "loogle/unknown-identifier-suggestions.json"
    lss_item = "leanstatesearch/lsp-mcp-nat-mul-zero-item.json"
    lss_error = "leanstatesearch/unsupported-revision-error.json"
    return [
        # The legacy bodies' queries were not recorded; rank-nullity is what they answer.
        Body(ls_legacy, "leansearch", "rank nullity theorem", 200, raw(ls_legacy), expected(ls_legacy)["names"]),
        Body(ls_legacy2, "leansearch", "rank-nullity theorem for linear maps", 200, raw(ls_legacy2),
             expected(ls_legacy2)["names"]),
        Body(ls_inner, "leansearch",
             "If a natural number n is less than m, then the successor of n is less than the successor of m.",
             200, dumps([json.loads(raw(ls_inner))]), expected(ls_inner)["names"]),
        Body(ls_result, "leansearch", "finite set, subset, complement, cardinality, half, partition",
             200, dumps([[{"result": json.loads(raw(ls_result))}]]), expected(ls_result)["names"]),
        Body(lg_prime, "loogle", "Nat.Prime", 200, raw(lg_prime), expected(lg_prime)["names"]),
        # The malformed query is not recorded (the message points at column 3).
        Body(lg_parse, "loogle", "(((", 200, raw(lg_parse), None, expected(lg_parse)["error"]),
        Body(lg_unknown, "loogle", "exists_infinite_primes", 200, raw(lg_unknown), None, expected(lg_unknown)["error"]),
        # The goal was not recorded; the stand-in answers whatever goal arrives.
        Body(lss_item, "leanstatesearch", "n * 0 = 0", 200, dumps([json.loads(raw(lss_item))]),
             expected(lss_item)["names"]),
        Body(lss_error, "leanstatesearch", "⊢ 1 ≤ 0", 400, raw(lss_error), None,
             expected(lss_error)["error"] + ": " + expected(lss_error)["detail"], params={"rev": "v4.15.0"}),
        *_receipts("leanexplore/v2-projected-receipts-dvd-query.json"),
        *_receipts("leanexplore/v2-projected-receipts-packing-cutoff.json"),
    ]


BODIES = real_bodies()


def test_every_real_file_is_used_and_unchanged():
    """The copies are byte-identical to the sha256 list in PROVENANCE.md, and each one is tested."""
    prov = (REAL / "PROVENANCE.md").read_text(encoding="utf-8")
    listed = {}
    for line in prov.splitlines():
        parts = line.split()
        if len(parts) == 2 and len(parts[0]) == 64 and parts[1].endswith(".json"):
            listed[parts[1]] = parts[0]
    on_disk = {str(p.relative_to(REAL)) for p in REAL.rglob("*.json") if not p.name.endswith(".expected.json")}
    assert set(listed) == on_disk and len(on_disk) == 11
    for rel, sha in listed.items():
        assert hashlib.sha256(raw(rel)).hexdigest() == sha, rel
    used = {b.id.split("[")[0] for b in BODIES}
    assert used == on_disk


# ------------------------------------------------------------------------- parsers


@pytest.mark.parametrize("b", BODIES, ids=[b.id for b in BODIES])
def test_parser_reads_each_real_body(b: Body):
    adapter = get_adapter(b.engine, **(b.params or {}))
    if b.names is not None:
        (hits,) = adapter.parse([b.text], b.status, JSON_CT, b.body)
        assert isinstance(hits, HitList)
        assert [h.name for h in hits] == b.names
        assert [h.rank for h in hits] == list(range(1, len(b.names) + 1))
        assert hits.dropped == 0 and hits.drop_reason is None
    else:
        with pytest.raises(EngineHTTPError) as info:  # a permanent per-text failure, never an empty answer
            adapter.parse([b.text], b.status, JSON_CT, b.body)
        assert b.error in str(info.value)
        assert not isinstance(info.value, EngineOutage)
    # None of these bodies is an outage: a 400 or an in-band query error is about the query.
    assert adapter.outage_reason(b.status, JSON_CT, b.body) is None


def test_real_body_quirks():
    ls = get_adapter("leansearch")
    # No distance recorded: absent, not 0, and still a hit.
    (hits,) = ls.parse(["q"], 200, JSON_CT, BODIES[3].body)
    assert "distance" not in hits[0].raw and hits[0].raw["result"]["name"] == ["Finset", "card_compl"]
    # Surrogate pairs decode; the auxiliary declaration stays a hit at its rank.
    (legacy,) = ls.parse(["q"], 200, JSON_CT, BODIES[0].body)
    assert legacy[7].name == "LinearIsometry.extend.proof_4" and legacy[7].rank == 8
    assert any("𝕜" in h.raw["formal_type"] for h in legacy)
    # A legacy flat list cannot be split over a batch of several queries.
    with pytest.raises(EngineParseError, match="legacy"):
        get_adapter("leansearch", batch_size=2).parse(["a", "b"], 200, JSON_CT, BODIES[0].body)
    # Loogle: count 2163 > 3 hits is fine; suggestions are never hits.
    (lg,) = get_adapter("loogle").parse(["Nat.Prime"], 200, JSON_CT, BODIES[4].body)
    assert len(lg) == 3 and json.loads(BODIES[4].body)["count"] == 2163
    with pytest.raises(EngineHTTPError) as info:
        get_adapter("loogle").parse(["x"], 200, JSON_CT, BODIES[6].body)
    assert "Nat.exists_infinite_primes" not in str(info.value)
    # LeanExplore receipts lack dependencies / informalization / processing_time_ms: parsed.
    le = next(b for b in BODIES if b.engine == "leanexplore")
    (hits,) = get_adapter("leanexplore").parse(["q"], 200, JSON_CT, le.body)
    assert "dependencies" not in hits[0].raw and "dependencies_list" not in hits[0].raw
    phys = next(b for b in BODIES if b.engine == "leanexplore" and "Lorentz.«term_*ᵥ_»" in (b.names or []))
    assert get_adapter("leanexplore").parse(["q"], 200, JSON_CT, phys.body)[0][1].name == "Lorentz.«term_*ᵥ_»"


# ---------------------------------------------------------------------- drops


def _legacy_with(bad: dict[int, Any]) -> bytes:
    items = json.loads(raw("leansearch/legacy-api-search-rank-nullity.json"))
    for i, v in bad.items():
        items[i] = v
    return dumps(items)


LS_INNER = json.loads(raw("leansearch/lsc-v2-inner-fin2-islt-succ.json"))[0]
LS_RESULT = json.loads(raw("leansearch/lsp-mcp-v2-result-finset-card-compl.json"))
LE_RESULTS = json.loads(raw("leanexplore/v2-projected-receipts-dvd-query.json"))[0]["results"]
LG = json.loads(raw("loogle/nat-prime-trimmed.json"))
LSS = json.loads(raw("leanstatesearch/lsp-mcp-nat-mul-zero-item.json"))
LF_ITEM = {"formal_name": "Finset.card_compl", "informal_name": "", "kind": "theorem", "type": "…", "path": "Mathlib/Data"}
DOCS = "https://leanprover-community.github.io/mathlib4_docs/find/?pattern="


def _rec(**name) -> dict:
    return {"result": {**LS_RESULT, **name}}


# (id, engine, params, body, expected (rank, name) survivors, dropped count, first reason contains)
DROPS = [
    ("ls-empty-name-list-and-non-string", "leansearch", {},
     dumps([[LS_INNER, _rec(name=[]), {"result": LS_RESULT}, _rec(name=["Nat", 3])]]),
     [(1, "Fin2.IsLT.succ"), (3, "Finset.card_compl")], 2, "query 0 hit 2"),
    ("ls-null-item-and-no-result", "leansearch", {},
     dumps([[None, LS_INNER, {"distance": 0.2}]]), [(2, "Fin2.IsLT.succ")], 2, "hit 1 is NoneType"),
    ("ls-name-missing", "leansearch", {},
     dumps([[{"result": {k: v for k, v in LS_RESULT.items() if k != "name"}}, LS_INNER]]),
     [(2, "Fin2.IsLT.succ")], 1, "no `name`"),
    ("ls-legacy-null-and-no-formal-name", "leansearch", {},
     _legacy_with({2: None, 4: {"id": 5, "formal_type": "…"}}),
     [(r, n) for r, n in enumerate(expected("leansearch/legacy-api-search-rank-nullity.json")["names"], 1)
      if r not in (3, 5)], 2, "legacy hit 3"),
    ("le-null-and-nameless", "leanexplore", {},
     dumps({"query": "q", "results": [LE_RESULTS[0], None, LE_RESULTS[2], {"id": 1, "module": "M"}, LE_RESULTS[4]],
            "count": 5}),
     [(1, "Dvd.dvd.mul_right"), (3, "mul_dvd_mul_right"), (5, "DomMulAct")], 2, "result 2"),
    ("le-v1-statement-groups", "leanexplore", {},
     dumps({"query": "q", "packages_applied": ["Mathlib"], "count": 2, "total_candidates_considered": 9,
            "results": [{"id": 3, "primary_declaration": {"lean_name": "Nat.add_comm"}, "source_file": "M.lean"},
                        {"id": 4, "primary_declaration": {}}]}),
     [(1, "Nat.add_comm")], 1, "result 2"),
    ("lf-no-lean-name-and-null", "leanfinder", {},
     dumps({"results": [LF_ITEM, {**LF_ITEM, "formal_name": ""}, None, {**LF_ITEM, "formal_name": "Nat.succ_le"}]}),
     [(1, "Finset.card_compl"), (4, "Nat.succ_le")], 2, "result 2: no Lean name"),
    ("lf-old-schema-foreign-link", "leanfinder", {"version": None},
     dumps({"results": [{"url": "https://github.com/x/y#L3", "formal_statement": "…", "informal_statement": "…"},
                        {"url": DOCS + "Nat.succ_le#doc", "formal_statement": "…", "informal_statement": "…"}]}),
     [(2, "Nat.succ_le")], 1, "result 1: no Lean name"),
    ("loogle-nameless-hit", "loogle", {},
     dumps({**LG, "hits": [LG["hits"][0], {**LG["hits"][1], "name": None}, LG["hits"][2]]}),
     [(1, "Nat.Prime"), (3, "Nat.prime_two")], 1, "hit 2"),
    ("lss-null-item", "leanstatesearch", {},
     dumps([None, LSS, {"formal_type": "…"}, {**LSS, "name": "Nat.zero_mul"}]),
     [(2, "Nat.mul_zero"), (4, "Nat.zero_mul")], 2, "result 1"),
]


@pytest.mark.parametrize("cid,engine,params,body,survivors,dropped,reason", DROPS, ids=[d[0] for d in DROPS])
def test_bad_item_is_dropped_and_survivors_keep_their_ranks(cid, engine, params, body, survivors, dropped, reason):
    (hits,) = get_adapter(engine, **params).parse(["q"], 200, JSON_CT, body)
    assert [(h.rank, h.name) for h in hits] == survivors
    assert hits.dropped == dropped
    assert reason in hits.drop_reason


ALL_BAD = [
    ("leansearch", dumps([[_rec(name=[]), None]])),
    ("leanexplore", dumps({"results": [{"lean_name": "A"}, {"lean_name": "B"}]})),
    ("leanfinder", dumps({"results": [{"formalName": "A"}]})),
    ("loogle", dumps({**LG, "hits": [{"decl_name": "A"}, {"decl_name": "B"}]})),
    ("leanstatesearch", dumps([{"full_name": "A"}])),
]


@pytest.mark.parametrize("engine,body", ALL_BAD, ids=[e for e, _ in ALL_BAD])
def test_every_item_unusable_is_a_parse_error_not_an_empty_answer(engine, body):
    with pytest.raises(EngineParseError, match="unusable"):
        get_adapter(engine).parse(["q"], 200, JSON_CT, body)


def test_foreign_links_only_is_an_empty_answer_not_a_parse_error():
    body = dumps({"results": [{"url": "https://github.com/x/y#L3", "formal_statement": "…", "informal_statement": "…"}]})
    (hits,) = get_adapter("leanfinder", version=None).parse(["q"], 200, JSON_CT, body)
    assert list(hits) == [] and hits.dropped == 1


INVALID_ENVELOPES = [
    ("leansearch", b'{"hits": []}'), ("leansearch", b"[null]"), ("leanexplore", b'{"results": null}'),
    ("leanexplore", b"[]"), ("leanfinder", b'{"results": {}}'), ("loogle", b"{}"), ("loogle", b'{"hits": null}'),
    ("leanstatesearch", b'{"results": []}'), ("leanstatesearch", b'"x"'),
]


@pytest.mark.parametrize("engine,body", INVALID_ENVELOPES)
def test_invalid_envelope_is_still_a_parse_error(engine, body):
    with pytest.raises(EngineParseError):
        get_adapter(engine).parse(["q"], 200, JSON_CT, body)


# --------------------------------------------------------------------- outages

HTML_MAINT = b"<!DOCTYPE html><html><body><h1>We'll be back soon</h1></body></html>"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_outage_statuses_and_not_outages(engine):
    a = get_adapter(engine)
    for status in (405, 502, 503, 504):
        for body in (HTML_MAINT, b'{"detail": "Method Not Allowed"}', b'{"error": "maintenance"}'):
            assert f"HTTP {status}" in a.outage_reason(status, {}, body)
    for status in (400, 404, 422, 403, 200):
        assert a.outage_reason(status, JSON_CT, b'{"error": "Invalid parameter value"}') is None


def test_loogle_backend_crash_is_an_outage_and_query_errors_are_not():
    a = get_adapter("loogle")
    for message in ("Loogle crashed. Restarting...", "The backend died with code -9; Restarting"):
        body = dumps({"error": message})
        assert "restarting" in a.outage_reason(200, JSON_CT, body)
        with pytest.raises(EngineOutage, match="loogle"):
            a.parse(["q"], 200, JSON_CT, body)
    assert a.outage_reason(200, JSON_CT, raw("loogle/parse-error.json")) is None
    assert a.outage_reason(200, JSON_CT, b"not json") is None
    # The load-shedding 503 (Retry-After: 5) is an outage by status.
    assert a.outage_reason(503, {"retry-after": "5"}, b'{"error": "Loogle is currently under load"}')


# ------------------------------------------------------------ LeanStateSearch


def test_leanstatesearch_request_goal_rev_and_identity():
    a = get_adapter("leanstatesearch", num_results=7)
    r = a.build_request(["n * 0 = 0"])
    assert r.method == "GET" and r.url.path == "/api/search" and r.url.host == "premise-search.com"
    assert dict(r.url.params) == {"query": "⊢ n * 0 = 0", "results": "7", "rev": "v4.22.0"}
    # A text that already is a proof state is sent unchanged.
    state = "n : ℕ\n⊢ n * 0 = 0"
    assert get_adapter("leanstatesearch").build_request([state]).url.params["query"] == state
    assert a.identity() == {"engine": "leanstatesearch", "endpoint_version": "get-api-search-v1",
                            "num_results": 7, "rev": "v4.22.0"}
    other = get_adapter("leanstatesearch", num_results=7, rev="v4.17.0-rc1")
    assert config_hash(other.identity()) != config_hash(a.identity())  # rev changes results
    assert str(a.defaults.rate) == "6/30s"


def test_courtesy_defaults_are_the_most_conservative_known_clients():
    assert {n: str(c.defaults.rate) for n, c in ENGINES.items()} == {
        "leansearch": "3/30s", "leanexplore": "24/60s", "leanfinder": "10/30s", "loogle": "3/30s",
        "leanstatesearch": "6/30s", "leanpremise": "6/30s", "leansearch-ps": "1/1s", "leandex": "3/30s",
        "theoremsearch": "1/2s", "octo": "1/3s", "leanexplore-mcp": "30/60s"}


def test_leanstatesearch_stand_in_answers_and_refuses_like_route_ts():
    with StandIn("leanstatesearch", TINY_CORPUS, rate=None) as srv, httpx.Client() as client:
        a = get_adapter("leanstatesearch", base_url=srv.url, num_results=5)
        resp = client.send(a.build_request(["n + m = m + n add comm"]))
        assert resp.status_code == 200
        (hits,) = a.parse(["x"], resp.status_code, resp.headers, resp.content)
        assert [h.name for h in hits] == ["Nat.add_comm"] and hits[0].raw["rev"] == "v4.22.0"
        bad_rev = get_adapter("leanstatesearch", base_url=srv.url, rev="v4.15.0")
        resp = client.send(bad_rev.build_request(["⊢ 1 ≤ 0"]))
        assert resp.status_code == 400 and list(resp.json()) == ["error", "schema"]
        with pytest.raises(EngineHTTPError, match="Invalid parameter value: Lean State Search does not support"):
            bad_rev.parse(["⊢ 1 ≤ 0"], resp.status_code, resp.headers, resp.content)
        resp = client.get(srv.url + "/api/search", params={"query": "1 ≤ 0", "results": 1, "rev": "v4.22.0"})
        assert resp.status_code == 400 and "valid Lean proof state" in resp.json()["schema"]["description"]
        resp = client.get(srv.url + "/api/search", params={"query": "⊢ 1 ≤ 0"})
        assert resp.status_code == 400 and resp.json()["error"] == "Missing required parameters"
        assert client.post(srv.url + "/api/search").status_code == 405


# -------------------------------------------------- each body through a stand-in


def _canned(bodies: list[Body]):
    """Replay by (text as sent, packages): LeanExplore's two receipts share one query text."""
    table = {}
    for b in bodies:
        wire = leanstatesearch.goal_query(b.text) if b.engine == "leanstatesearch" else b.text
        table[(wire, (b.params or {}).get("packages"))] = (b.status, JSON_CT, b.body)

    def lookup(texts, req):
        if len(texts) != 1:
            return None
        return table.get((texts[0], (req.query.get("packages") or [None])[0]))
    return lookup


@pytest.mark.parametrize("b", BODIES, ids=[b.id for b in BODIES])
def test_each_real_body_over_loopback_from_a_stand_in(b: Body):
    with StandIn(b.engine, TINY_CORPUS, rate=None, canned=_canned([b])) as srv, httpx.Client() as client:
        a = get_adapter(b.engine, base_url=srv.url, **(b.params or {}))
        resp = client.send(a.build_request([b.text]))
        assert resp.status_code == b.status and resp.content == b.body  # replayed byte for byte
        if b.names is not None:
            assert [h.name for h in a.parse([b.text], resp.status_code, resp.headers, resp.content)[0]] == b.names
        else:
            with pytest.raises(EngineHTTPError, match=b.error.replace("(", r"\(").replace(")", r"\)")):
                a.parse([b.text], resp.status_code, resp.headers, resp.content)
        assert srv.stats.requests == 1


def test_canned_mapping_form_and_fallback_to_the_corpus():
    body = dumps([[{"result": LS_RESULT}]])
    with StandIn("leansearch", TINY_CORPUS, rate=None, canned={"recorded": (200, JSON_CT, body)}) as srv, \
            httpx.Client() as client:
        a = get_adapter("leansearch", base_url=srv.url)
        resp = client.send(a.build_request(["recorded"]))
        assert resp.content == body
        resp = client.send(a.build_request(["add comm"]))  # not recorded: ranked from the corpus
        assert [h.name for h in a.parse(["x"], 200, resp.headers, resp.content)[0]] == ["Nat.add_comm"]
        assert srv.stats.served == 2


# ----------------------------------------------- each body through the crawler


# One text with a null item in the middle, to see the dropped rank stay empty in the database.
DROP_TEXT = "rank nullity, one item null"
DROP_BODY = _legacy_with({2: None})


def _bench_file(tmp_path: Path, engine: str, texts: list[str]) -> Path:
    items = [{"id": f"{engine}-{i}", "full_name": "Nat.add_comm", "q1c_natural": t} for i, t in enumerate(texts)]
    path = tmp_path / f"real-{engine}.json"
    path.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    return path


CRAWLED = ["leansearch", "loogle", "leanexplore", "leanstatesearch"]


@pytest.mark.parametrize("engine", CRAWLED)
def test_each_real_body_through_the_crawler_into_hits(engine, any_db_url, tmp_path):
    # The crawler sends no `packages`: LeanExplore's Mathlib receipts (part 0) are crawled;
    # the Physlib parts go over loopback with the parameter in the test above.
    bodies = [b for b in BODIES if b.engine == engine and (b.params or {}).get("packages") in (None, "Mathlib")]
    bodies = [Body(b.id, b.engine, b.text, b.status, b.body, b.names, b.error) for b in bodies]
    if engine == "leansearch":
        bodies.append(Body("drop", engine, DROP_TEXT, 200, DROP_BODY, None))
    db = open_database(any_db_url)
    try:
        load_benchmark_file(db, _bench_file(tmp_path, engine, [b.text for b in bodies]),
                            name=f"real-{engine}", allow_modified=True)
        with StandIn(engine, TINY_CORPUS, rate=FAST, canned=_canned(bodies)).in_thread() as srv:
            opts = CrawlOptions(engines=[engine], bench=f"real-{engine}", rates={"*": FAST},
                                urls={engine: srv.url}, margin=0.05,
                                policy=RetryPolicy(backoff_initial=0.02, backoff_max=0.1))
            summary = run_crawl(db, opts, Quiet())
        ok = [b for b in bodies if b.names is not None or b.id == "drop"]
        errors = [b for b in bodies if b.names is None and b.id != "drop"]
        res = summary.results[0]
        assert (res.answered_now, res.failed_now) == (len(ok), len(errors))
        assert srv.stats.requests == len(bodies)  # each text sent once: nothing retried
        with db.session() as s:
            cfg = s.scalar(sa.select(EngineConfig.id).where(EngineConfig.engine == engine))
            rows = s.execute(
                sa.select(Answer.query_text, Hit.rank, Hit.name).join(Hit, Hit.answer_id == Answer.id)
                .where(Answer.config_id == cfg, ~Answer.superseded).order_by(Answer.query_text, Hit.rank)
            ).all()
            got: dict[str, list[tuple[int, str]]] = {}
            for text, rank, name in rows:
                got.setdefault(text, []).append((rank, name))
            for b in ok:
                if b.id == "drop":
                    names = expected("leansearch/legacy-api-search-rank-nullity.json")["names"]
                    assert got[b.text] == [(r, n) for r, n in enumerate(names, 1) if r != 3]
                else:
                    assert got[b.text] == list(enumerate(b.names, 1)), b.id
            answered = set(s.execute(sa.select(Answer.query_text).where(Answer.config_id == cfg)).scalars())
            assert not answered & {b.text for b in errors}  # an error body never becomes an answer
            failed = s.scalar(sa.select(sa.func.count()).select_from(WorkLease)
                              .where(WorkLease.config_id == cfg, WorkLease.status == "failed"))
            assert failed == len(errors)
            # Errors found by the parser (Loogle's 200 + error) are recorded on the parse outcome.
            msgs = list(s.execute(sa.select(ParseOutcome.error).where(ParseOutcome.ok.is_(False))).scalars())
            if engine == "loogle":
                assert sorted(m.split("query error: ")[1] for m in msgs) == sorted(b.error for b in errors)
            versions = set(s.execute(sa.select(Answer.parser_version).where(Answer.config_id == cfg)).scalars())
            assert versions == {ENGINES[engine].parser_version}
    finally:
        db.dispose()


# -------------------------------------------------------------- score JSON


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_score_json_counts_dropped_items_per_system(backend, cache, request):
    from scoring.results import score
    from store.writes import HitRow, add_answer
    from tests.support.scoring import bench_queries, gold_name, make_config

    db = cache
    if backend == "postgres":
        import benchmarks
        from store.benchmarks import load_shipped
        from store.corpus import load_corpus

        db = open_database(request.getfixturevalue("pg_url"))
        request.addfinalizer(db.dispose)
        load_shipped(db)
        load_corpus(db, str(benchmarks.SLICE_CORPUS), name=benchmarks.SLICE_CORPUS_NAME,
                    revision=benchmarks.SLICE_CORPUS_REVISION)
    qs = bench_queries(db, "mathlibqr")[:3]
    cid = make_config(db, "tolerant")
    with db.session() as s, s.begin():
        # A superseded answer's drops do not count (scoring reads current answers only).
        old = add_answer(s, config_id=cid, query_text=qs[0].text, query_sha256=qs[0].query_sha256, hits=[])
        old.superseded, old.dropped_items = True, 50
        s.flush()
        for i, q in enumerate(qs):
            a = add_answer(s, config_id=cid, query_text=q.text, query_sha256=q.query_sha256,
                           hits=[HitRow(2, gold_name(q))])
            a.dropped_items = i  # 0 + 1 + 2
    (system,) = score(db, "mathlibqr").to_json()["systems"]
    assert system["resolution"]["dropped_items"] == 3
    assert system["resolution"]["resolved"] == 3


# ------------------------------------------------------- parser-version guard

# How to update: when a test below fails, an adapter's parsing code changed. If what it
# parses changed (names, ranks, drops, errors, for any body), bump that adapter's
# ``parser_version`` (archived exchanges are re-parsed under the new version) and put the
# new version and the printed digest here. If only names or layout changed and every body
# still parses the same, put the new digest here with the same version. Comments and
# formatting do not count (the digest is over the code's tokens). A change to the shared
# base (``decode_json_body``, ``finish_hits``, ``HitList``, ``RemoteAdapter``'s parse template)
# changes every engine's digest. (Moved to the RemoteAdapter template without a version bump:
# every archived, recorded and hostile body parsed the same before and after.)
PARSER_FINGERPRINTS = {
    "leansearch": (3, "d96774756c2c02a20480c4f4f9a2e64ac2a5bc883e6c3bbdb216b9f88ff4a8d8"),
    "leanexplore": (3, "0853df76909f544120846a467c148c5db52965661667013f7e6ce97751888a53"),
    "leanfinder": (3, "3e9155ca02ecdaaedc1e5844bef8fe73d2ff762f41595608afb352f4083b2cd1"),
    "loogle": (4, "dccacc6f70e7d80ad4c03614bde31faa96af7d35b835e51fd68da5aba229a195"),
    "leanstatesearch": (2, "e995e8163d87d42a6d5bd7c5da7a1fa73feed09f426321f57eb0c091428d948f"),
    "leanpremise": (1, "20443e67bdb4eb4a397ffc72940e52adea593e4268857d6338c111b4b7471df9"),
    "leansearch-ps": (1, "0cf688474e799a5a1ce21e28036522a70b48a5f64dfd4262a34a44a961a9f008"),
    "leandex": (1, "fd2522675b740245e3ba730c299bb872e528d46283e8607fe9168c4da3d4c519"),
    "theoremsearch": (1, "cf45c619b83bf234c882a1ab019ec37f3dc3bcb1a0251a233ba565a10dbd4bef"),
    "octo": (1, "2aa4b6221ae0f8ee33b7ccb9a3df256c21f7027288b11065f30d9846a6a71263"),
    "leanexplore-mcp": (1, "2921b8489677630ad7c40b6efa061d227319a5a05f3fa6029c4e52991f168e58"),
}

_SHARED = [jsonbody.decode_json_body, jsonbody.decode_json_object, jsonbody.snippet, protocol.finish_hits,
           protocol.HitList, RemoteAdapter.hit_list]
# The template's steps as each adapter resolves them (its own override, else RemoteAdapter's).
_HOOKS = ("parse", "decode", "body_error", "items", "item_name", "item_raw")
PARSE_CODE = {
    "leansearch": [leansearch.join_name, leansearch.is_legacy, leansearch.legacy_item_name, leansearch._item_name,
                   leansearch._usual_name],
    "leanexplore": [leanexplore.result_name, repr(sorted(leanexplore.ENVELOPE_KEYS))],
    "leanfinder": [leanfinder.detect_schema, leanfinder.DOCS_PATTERN.pattern],
    "loogle": [loogle.is_backend_crash, loogle._CRASH.pattern],
    "leanstatesearch": [leanstatesearch.error_message],
    "leanpremise": [leanpremise.fastapi_detail],
    "leansearch-ps": [leansearch_ps.NAME],
    "leandex": [leanexplore.result_name, sse.SSEParser, sse.parse_sse, leandex.EVENT_STREAM],
    # The MCP engines share the JSON-RPC / SSE reading (engines.mcpwire, engines.sse).
    "theoremsearch": [mcpwire.rpc_message, sse.parse_sse, mcpwire.McpAdapter.rpc_error, theoremsearch.TheoremSearchAdapter.hit_list],
    "octo": [mcpwire.rpc_message, sse.parse_sse, mcpwire.McpAdapter.rpc_error, octo.OctoAdapter.tool_error],
    "leanexplore-mcp": [mcpwire.rpc_message, sse.parse_sse, mcpwire.McpAdapter.rpc_error],
}


def _code_tokens(obj: Any) -> str:
    """The source's tokens without comments and layout (stable across Python versions, unlike ast.dump)."""
    src = textwrap.dedent(inspect.getsource(obj))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    return " ".join(t.string for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type not in skip)


def parse_fingerprint(engine: str) -> str:
    h = hashlib.sha256()
    cls = ENGINES[engine]
    for obj in [*_SHARED, *(getattr(cls, hook) for hook in _HOOKS), cls.json_object, cls.item_label,
                cls.name_field, *PARSE_CODE[engine]]:
        h.update((repr(obj) if isinstance(obj, (str, bool)) else _code_tokens(obj)).encode("utf-8") + b"\0")
    return h.hexdigest()


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_parsing_code_changes_need_a_parser_version_bump(engine):
    assert engine in PARSER_FINGERPRINTS, f"add {engine!r} to PARSER_FINGERPRINTS and PARSE_CODE"
    version, digest = PARSER_FINGERPRINTS[engine]
    now = (ENGINES[engine].parser_version, parse_fingerprint(engine))
    assert now == (version, digest), (
        f"{engine}: parsing code or parser_version changed: now {now}. If the parse of any body changed, bump "
        f"{ENGINES[engine].__name__}.parser_version; then set PARSER_FINGERPRINTS[{engine!r}] = {now!r}"
    )
