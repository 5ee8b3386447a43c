"""Adapters: requests on the wire, and table-driven parsing of realistic and malformed bodies.

Payloads follow the examples in ENGINE-APIS.md (§2.4, §3.3, §4.3, §4.4, §5.2, §5.3).
"""

from __future__ import annotations

import json

import httpx
import pytest

from engines.base import (
    USER_AGENT,
    Adapter,
    EngineHTTPError,
    EngineOutage,
    EngineParseError,
    config_hash,
    parse_rate,
    redact_headers,
    redact_url,
)
from engines.registry import ENGINES, get_adapter
from store.errors import InputError

JSON_CT = {"content-type": "application/json"}

# --- realistic payloads --------------------------------------------------------------

LS_RECORD = {
    "value": ":=\n  ⟨succ_lt_succ l.h⟩",
    "type": "∀ (m n : ℕ) [l : Fin2.IsLT m n], Fin2.IsLT m.succ n.succ",
    "signature": " (m n) [l : IsLT m n] : IsLT (succ m) (succ n)",
    "name": ["Fin2", "IsLT", "succ"],
    "module_name": ["Mathlib", "Data", "Fin", "Fin2"],
    "kind": "instance",
    "informal_name": "Successor preserves the less-than relation for natural numbers",
    "informal_description": "For natural numbers $m$ and $n$, if $m < n$ holds, then $\\mathrm{succ}(m) < \\mathrm{succ}(n)$ also holds.",
    "docstring": None,
}
LS_DOC = [[{"result": LS_RECORD, "distance": 0.0862322449684143}]]



@pytest.fixture(autouse=True)
def _self_hosted_url(monkeypatch):
    """leansearch-ps has no public server: its adapter needs a URL (here a loopback one)."""
    monkeypatch.setenv("ENGINES_LEANSEARCH_PS_URL", "http://127.0.0.1:8080")


def ls_hit(name, distance, **extra):
    return {"result": {**LS_RECORD, "name": name, **extra}, "distance": distance}


# v2: distance not monotone in rank; v1 2025-11 records carry start/stop.
LS_BATCH = [
    [ls_hit(["Nat", "add_comm"], 0.31), ls_hit(["Nat", "add_assoc"], 0.12, start=10, stop=12)],
    [ls_hit(["orderOf_dvd_card"], 0.2)],
]

LE_DOC = {
    "query": "commutative addition",
    "results": [{
        "id": 12345, "name": "Nat.add_comm", "module": "Mathlib.Data.Nat.Basic",
        "docstring": "Addition of natural numbers is commutative.",
        "source_text": "theorem Nat.add_comm (n m : Nat) : n + m = m + n := by omega",
        "source_link": "https://github.com/leanprover-community/mathlib4/blob/master/Mathlib/Data/Nat/Basic.lean#L42",
        "dependencies": "[\"Nat.add\", \"Nat.zero\"]",
        "informalization": "The sum of two natural numbers is the same regardless of order.",
    }],
    "count": 1, "processing_time_ms": 45,
}
LE_TWO = {
    "query": "q",
    "results": [
        {**LE_DOC["results"][0], "name": "Nat.add_comm"},
        {**LE_DOC["results"][0], "id": 7, "name": "Nat.mul_comm", "dependencies": None, "pagerank": 0.3},
    ],
    "count": 2,  # processing_time_ms missing: tolerated
}

LF_CURRENT = {"results": [{
    "formal_name": "intervalIntegral.integral_eq_sub_of_hasDerivAt",
    "informal_name": "Fundamental Theorem of Calculus for Functions with Pointwise Derivatives on $[a, b]$",
    "kind": "theorem",
    "type": "∀ {E : Type u_3} ... → ∫ (y : ℝ) in a..b, f' y = f b - f a",
    "informal_description": "Let $f : \\mathbb{R} \\to E$ be a function and $f'$ its derivative. ...",
    "path": "Mathlib/MeasureTheory/Integral/IntervalIntegral/FundThmCalculus",
}]}
DOCS = "https://leanprover-community.github.io/mathlib4_docs/find/?pattern="
LF_OLD = {"results": [
    {"url": DOCS + "intervalIntegral.integral_eq_sub_of_hasDerivAt#doc",
     "formal_statement": "theorem intervalIntegral.integral_eq_sub_of_hasDerivAt ...", "informal_statement": "FTC"},
    {"url": "https://github.com/leanprover/cslib/blob/main/Foo.lean#L3",
     "formal_statement": "theorem Foo.bar ...", "informal_statement": "not Mathlib"},
    {"url": DOCS + "Nat.sub_add_cancel%27#doc", "formal_statement": "...", "informal_statement": "..."},
]}

LOOGLE_DOC = {"header": "<summary line>", "heartbeats": 120, "count": 1500,
              "hits": [{"name": "Real.sin", "type": " (x : ℝ) : ℝ",
                        "module": "Mathlib.Data.Complex.Trigonometric", "doc": None}]}

HTML = b"<!DOCTYPE html><html><body><h1>Maintenance</h1></body></html>"


def enc(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


OK, PARSE, HTTP, OUTAGE = "ok", EngineParseError, EngineHTTPError, EngineOutage

# (case id, engine, adapter params, texts, status, headers, body, expected names or error type)
CASES = [
    # LeanSearch: POST /search generation (April 2025 on, same shape in v2)
    ("ls-doc-example", "leansearch", {}, ["q"], 200, JSON_CT, enc(LS_DOC), [["Fin2.IsLT.succ"]]),
    ("ls-batch-order-kept", "leansearch", {"batch_size": 2}, ["a", "b"], 200, JSON_CT, enc(LS_BATCH),
     [["Nat.add_comm", "Nat.add_assoc"], ["orderOf_dvd_card"]]),
    ("ls-empty-answer", "leansearch", {}, ["q"], 200, JSON_CT, b"[[]]", [[]]),
    ("ls-dotted-name-string", "leansearch", {}, ["q"], 200, JSON_CT, enc([[ls_hit("Nat.succ_le", 0.1)]]), [["Nat.succ_le"]]),
    ("ls-top-level-object", "leansearch", {}, ["q"], 200, JSON_CT, enc({"results": []}), PARSE),
    ("ls-error-key-200", "leansearch", {}, ["q"], 200, JSON_CT, enc({"error": "Rate limit exceeded: 1 per 1 second"}), HTTP),
    ("ls-top-level-string", "leansearch", {}, ["q"], 200, JSON_CT, b'"oops"', PARSE),
    ("ls-inner-not-list", "leansearch", {}, ["q"], 200, JSON_CT, enc([{"result": LS_RECORD}]), PARSE),
    ("ls-hit-missing-result", "leansearch", {}, ["q"], 200, JSON_CT, enc([[{"distance": 0.1}]]), PARSE),
    ("ls-drift-name-renamed", "leansearch", {}, ["q"], 200, JSON_CT,
     enc([[{"result": {("full_name" if k == "name" else k): v for k, v in LS_RECORD.items()}, "distance": 0.1}]]), PARSE),
    ("ls-name-wrong-type", "leansearch", {}, ["q"], 200, JSON_CT, enc([[ls_hit(42, 0.1)]]), PARSE),
    ("ls-name-bad-component", "leansearch", {}, ["q"], 200, JSON_CT, enc([[ls_hit(["Nat", None], 0.1)]]), PARSE),
    ("ls-wrong-list-count", "leansearch", {"batch_size": 2}, ["a", "b"], 200, JSON_CT, enc(LS_DOC), PARSE),
    # The legacy GET API's flat list parses for one query (a service can roll back), not for a batch.
    ("ls-legacy-flat-schema", "leansearch", {}, ["q"], 200, JSON_CT,
     enc([{"id": 1, "formal_name": "Nat.add_comm", "formal_type": "...", "kind": "theorem"}]), [["Nat.add_comm"]]),
    ("ls-legacy-flat-schema-batch", "leansearch", {"batch_size": 2}, ["a", "b"], 200, JSON_CT,
     enc([{"id": 1, "formal_name": "Nat.add_comm"}, {"id": 2, "formal_name": "Nat.mul_comm"}]), PARSE),
    ("ls-html-200", "leansearch", {}, ["q"], 200, {"content-type": "text/html"}, HTML, PARSE),
    ("ls-html-200-json-ctype", "leansearch", {}, ["q"], 200, JSON_CT, HTML, PARSE),
    ("ls-truncated", "leansearch", {}, ["q"], 200, JSON_CT, enc(LS_DOC)[:-40], PARSE),
    ("ls-empty-body", "leansearch", {}, ["q"], 200, JSON_CT, b"", PARSE),
    ("ls-429", "leansearch", {}, ["q"], 429, JSON_CT, enc({"error": "Rate limit exceeded"}), HTTP),
    ("ls-405-maintenance", "leansearch", {}, ["q"], 405, JSON_CT, enc({"detail": "Method Not Allowed"}), HTTP),
    # LeanExplore v2
    ("le-doc-example", "leanexplore", {}, ["q"], 200, JSON_CT, enc(LE_DOC), [["Nat.add_comm"]]),
    ("le-null-deps-extra-key", "leanexplore", {}, ["q"], 200, JSON_CT, enc(LE_TWO), [["Nat.add_comm", "Nat.mul_comm"]]),
    ("le-empty-results", "leanexplore", {}, ["q"], 200, JSON_CT, enc({"query": "q", "results": [], "count": 0}), [[]]),
    ("le-top-level-list", "leanexplore", {}, ["q"], 200, JSON_CT, enc(LE_DOC["results"]), PARSE),
    # The official client reads a missing `results` as none: an empty answer, unless the
    # envelope says there were some or has keys we do not know (a changed schema).
    ("le-missing-results-count-0", "leanexplore", {}, ["q"], 200, JSON_CT, enc({"query": "q", "count": 0}), [[]]),
    ("le-empty-object", "leanexplore", {}, ["q"], 200, JSON_CT, b"{}", [[]]),
    ("le-missing-results-count-3", "leanexplore", {}, ["q"], 200, JSON_CT, enc({"query": "q", "count": 3}), PARSE),
    ("le-missing-results-other-key", "leanexplore", {}, ["q"], 200, JSON_CT, enc({"hits": []}), PARSE),
    ("le-results-object", "leanexplore", {}, ["q"], 200, JSON_CT, enc({"results": {"a": 1}}), PARSE),
    ("le-drift-name-renamed", "leanexplore", {}, ["q"], 200, JSON_CT,
     enc({"results": [{("lean_name" if k == "name" else k): v for k, v in LE_DOC["results"][0].items()}]}), PARSE),
    ("le-item-not-object", "leanexplore", {}, ["q"], 200, JSON_CT, enc({"results": ["Nat.add_comm"]}), PARSE),
    ("le-msg-200", "leanexplore", {}, ["q"], 200, JSON_CT, enc({"msg": "Invalid query"}), HTTP),
    ("le-400", "leanexplore", {}, ["q"], 400, JSON_CT, enc({"msg": "Missing query"}), HTTP),
    ("le-html-200", "leanexplore", {}, ["q"], 200, {"content-type": "text/html; charset=utf-8"}, HTML, PARSE),
    ("le-truncated", "leanexplore", {}, ["q"], 200, JSON_CT, enc(LE_DOC)[:57], PARSE),
    # Lean Finder: current schema (2026-05-20 on) and the older url/formal_statement schema
    ("lf-current-doc-example", "leanfinder", {}, ["q"], 200, JSON_CT, enc(LF_CURRENT),
     [["intervalIntegral.integral_eq_sub_of_hasDerivAt"]]),
    ("lf-old-url-schema", "leanfinder", {"version": None}, ["q"], 200, JSON_CT, enc(LF_OLD),
     [["intervalIntegral.integral_eq_sub_of_hasDerivAt", "Nat.sub_add_cancel'"]]),
    ("lf-empty-results", "leanfinder", {}, ["q"], 200, JSON_CT, b'{"results": []}', [[]]),
    ("lf-error-key", "leanfinder", {}, ["q"], 200, JSON_CT, enc({"error": "Unsupported version"}), HTTP),
    ("lf-error-key-400", "leanfinder", {}, ["q"], 400, JSON_CT, enc({"error": "bad"}), HTTP),
    ("lf-top-level-list", "leanfinder", {}, ["q"], 200, JSON_CT, enc(LF_CURRENT["results"]), PARSE),
    ("lf-missing-results", "leanfinder", {}, ["q"], 200, JSON_CT, enc({"hits": []}), PARSE),
    ("lf-drift-neither-schema", "leanfinder", {}, ["q"], 200, JSON_CT,
     enc({"results": [{("formalName" if k == "formal_name" else k): v for k, v in LF_CURRENT["results"][0].items()}]}), PARSE),
    ("lf-formal-name-null", "leanfinder", {}, ["q"], 200, JSON_CT, enc({"results": [{"formal_name": None}]}), PARSE),
    ("lf-html-200", "leanfinder", {}, ["q"], 200, {"content-type": "text/html"}, HTML, PARSE),
    ("lf-truncated", "leanfinder", {}, ["q"], 200, JSON_CT, enc(LF_CURRENT)[:80], PARSE),
    # Loogle
    ("loogle-doc-example", "loogle", {}, ["Real.sin"], 200, JSON_CT, enc(LOOGLE_DOC), [["Real.sin"]]),
    ("loogle-no-hits", "loogle", {}, ["q"], 200, JSON_CT, enc({"header": "h", "heartbeats": 1, "count": 0, "hits": []}), [[]]),
    ("loogle-error-200", "loogle", {}, ["q"], 200, JSON_CT,
     enc({"error": "unknown identifier 'foo'", "heartbeats": 0, "suggestions": ["Foo"]}), HTTP),
    # A crashed backend is an outage (transient), not a failed query.
    ("loogle-crash-200", "loogle", {}, ["q"], 200, JSON_CT, enc({"error": "Loogle crashed. Restarting..."}), OUTAGE),
    ("loogle-died-200", "loogle", {}, ["q"], 200, JSON_CT, enc({"error": "backend died with code 137"}), OUTAGE),
    ("loogle-empty-object", "loogle", {}, [""], 200, JSON_CT, b"{}", PARSE),
    ("loogle-top-level-list", "loogle", {}, ["q"], 200, JSON_CT, enc(LOOGLE_DOC["hits"]), PARSE),
    ("loogle-drift-name-renamed", "loogle", {}, ["q"], 200, JSON_CT,
     enc({**LOOGLE_DOC, "hits": [{"decl_name": "Real.sin", "type": "", "module": None, "doc": None}]}), PARSE),
    ("loogle-503-busy", "loogle", {}, ["q"], 503, {**JSON_CT, "retry-after": "5"},
     enc({"error": "Loogle is currently under load, please try again later."}), HTTP),
    ("loogle-403-agent", "loogle", {}, ["q"], 403, {"content-type": "text/plain"}, b"Your requests are causing issues", HTTP),
    ("loogle-html-200", "loogle", {}, ["q"], 200, {"content-type": "text/html"}, HTML, PARSE),
    ("loogle-truncated", "loogle", {}, ["q"], 200, JSON_CT, enc(LOOGLE_DOC)[:-3], PARSE),
    ("loogle-not-utf8", "loogle", {}, ["q"], 200, JSON_CT, b'{"hits": ["\xff\xfe"]}', PARSE),
]


@pytest.mark.parametrize("cid,engine,params,texts,status,headers,body,expected", CASES, ids=[c[0] for c in CASES])
def test_parse_table(cid, engine, params, texts, status, headers, body, expected):
    adapter = get_adapter(engine, **params)
    if isinstance(expected, type):
        with pytest.raises(expected) as info:
            adapter.parse(texts, status, headers, body)
        assert engine in str(info.value)  # says which engine, for the archive
    else:
        result = adapter.parse(texts, status, headers, body)
        assert [[h.name for h in hits] for hits in result] == expected
        for hits in result:
            assert all(isinstance(h.raw, dict) for h in hits)


def test_leansearch_keeps_rank_and_distance_never_resorts():
    hits = get_adapter("leansearch", batch_size=2).parse(["a", "b"], 200, JSON_CT, enc(LS_BATCH))[0]
    assert [(h.rank, h.raw["distance"]) for h in hits] == [(1, 0.31), (2, 0.12)]
    assert hits[1].raw["result"]["start"] == 10  # unknown record keys kept


def test_leanexplore_dependencies_decoded_and_string_kept():
    (hit,) = get_adapter("leanexplore").parse(["q"], 200, JSON_CT, enc(LE_DOC))[0]
    assert hit.raw["dependencies"] == "[\"Nat.add\", \"Nat.zero\"]"
    assert hit.raw["dependencies_list"] == ["Nat.add", "Nat.zero"]
    hits = get_adapter("leanexplore").parse(["q"], 200, JSON_CT, enc(LE_TWO))[0]
    assert "dependencies_list" not in hits[1].raw


def test_leanfinder_old_schema_skips_non_docs_urls_but_keeps_ranks():
    hits = get_adapter("leanfinder").parse(["q"], 200, JSON_CT, enc(LF_OLD))[0]
    assert [h.rank for h in hits] == [1, 3]
    assert "url" in hits[0].raw  # which generation parsed is visible in the raw item


# --- requests --------------------------------------------------------------------------

def test_registry_lists_engines_and_rejects_unknown(monkeypatch):
    assert set(ENGINES) == {"leansearch", "leanexplore", "leanfinder", "loogle", "leanstatesearch", "leanpremise",
                            "leansearch-ps", "leandex", "theoremsearch", "octo", "leanexplore-mcp"}
    with pytest.raises(InputError, match="leansearch, leanexplore, leanfinder, loogle, leanstatesearch"):
        get_adapter("moogle")
    for name in ENGINES:
        a = get_adapter(name, "http://127.0.0.1:8080" if name == "leansearch-ps" else None)
        assert isinstance(a, Adapter) and a.engine == name and isinstance(a.parser_version, int)
    # A self-hosted engine without a URL: one line saying how to run its server.
    monkeypatch.delenv("ENGINES_LEANSEARCH_PS_URL")
    with pytest.raises(InputError, match=r"no public server; pass --url leansearch-ps=.*ENGINES_LEANSEARCH_PS_URL.*Run"):
        get_adapter("leansearch-ps")


def test_leansearch_request():
    a = get_adapter("leansearch", batch_size=3, num_results=150)
    r = a.build_request(["first query", "ζ second"])
    assert (r.method, str(r.url)) == ("POST", "https://leansearch.net/search")
    assert json.loads(r.content) == {"query": ["first query", "ζ second"], "num_results": 150}
    assert r.headers["user-agent"] == USER_AGENT and r.headers["content-type"] == "application/json"
    assert r.extensions["timeout"]["read"] == a.defaults.timeout
    assert a.defaults.result_cap == 50 and str(a.defaults.rate) == "3/30s" and a.defaults.batch_size == 1
    assert get_adapter("leansearch").num_results == 50
    with pytest.raises(ValueError):
        a.build_request(["a", "b", "c", "d"])
    with pytest.raises(ValueError):
        a.build_request([])
    with pytest.raises(InputError, match="1..150"):
        get_adapter("leansearch", num_results=151)


def test_leanexplore_request_packages_and_limit():
    a = get_adapter("leanexplore", num_results=7, packages="Mathlib,Batteries")
    r = a.build_request(["commutative addition"])
    assert r.method == "GET"
    assert r.url.path == "/api/v2/search" and r.url.host == "www.leanexplore.com"
    assert dict(r.url.params) == {"q": "commutative addition", "limit": "7", "packages": "Batteries,Mathlib"}
    assert a.identity()["packages"] == ["Batteries", "Mathlib"]
    assert "packages" not in get_adapter("leanexplore").build_request(["x"]).url.params
    assert str(a.defaults.rate) == "24/60s"
    with pytest.raises(ValueError):
        a.build_request(["a", "b"])  # one query per GET


def test_leanfinder_request_version_default_and_none():
    r = get_adapter("leanfinder", num_results=20).build_request(["fundamental theorem of calculus"])
    assert r.method == "POST" and r.url.path == "/"
    assert json.loads(r.content) == {"inputs": "fundamental theorem of calculus", "top_k": 20, "version": "v4.19.0"}
    old = get_adapter("leanfinder", version=None)
    assert "version" not in json.loads(old.build_request(["x"]).content)
    assert get_adapter("leanfinder", version="v4.28.0").identity()["version"] == "v4.28.0"
    with pytest.raises(InputError):
        get_adapter("leanfinder", version="latest")
    assert str(old.defaults.rate) == "10/30s"  # lean-lsp-mcp's, the most conservative known client


def test_loogle_request_and_identity_without_count():
    a = get_adapter("loogle")
    r = a.build_request(["|- tsum _ = _ * tsum _"])
    assert r.method == "GET" and r.url.path == "/json" and r.url.params["q"] == "|- tsum _ = _ * tsum _"
    assert r.headers["user-agent"] == USER_AGENT != "Python-urllib/3.12"
    assert "num_results" not in a.identity() and a.defaults.result_cap == 200


def test_base_url_override_by_env_and_constructor(monkeypatch):
    default = get_adapter("leansearch")
    assert "base_url" not in default.identity() and default.host == "leansearch.net"
    monkeypatch.setenv("ENGINES_LEANSEARCH_URL", "http://127.0.0.1:8765/")
    env = get_adapter("leansearch")
    assert env.base_url == "http://127.0.0.1:8765" and env.host == "127.0.0.1:8765"
    assert str(env.build_request(["q"]).url) == "http://127.0.0.1:8765/search"
    assert env.identity()["base_url"] == "http://127.0.0.1:8765"
    assert config_hash(env.identity()) != config_hash(default.identity())
    ctor = get_adapter("leansearch", base_url="http://127.0.0.1:9999")
    assert ctor.host == "127.0.0.1:9999"
    monkeypatch.setenv("ENGINES_LOOGLE_URL", "ftp://nope")
    with pytest.raises(InputError, match="ENGINES_LOOGLE_URL"):
        get_adapter("loogle")


def test_identity_changes_with_result_changing_params_only():
    h = lambda **kw: config_hash(get_adapter("leansearch", **kw).identity())  # noqa: E731
    assert h(num_results=10) != h(num_results=50)
    assert h(batch_size=4) == h()  # batching is transport, not a result-changing parameter
    assert h(timeout=5) == h()
    with pytest.raises(InputError, match="unknown parameter"):
        get_adapter("leansearch", rerank=True)


def test_api_key_goes_only_to_leanexplore_and_is_never_archived(monkeypatch):
    secret = "le-sk-7f3a9c1e5b"
    monkeypatch.setenv("ENGINES_LEANEXPLORE_API_KEY", secret)
    a = get_adapter("leanexplore")
    r = a.build_request(["q"])
    assert r.headers["authorization"] == f"Bearer {secret}"
    archived = {
        "identity": a.identity(), "hash": config_hash(a.identity()), "repr": repr(a), "vars": repr(vars(a)),
        "url": str(r.url), "headers": redact_headers(r.headers), "body": r.content.decode(),
    }
    assert secret not in json.dumps(archived, default=str)
    assert {k.lower(): v for k, v in archived["headers"].items()}["authorization"] == "[redacted]"
    # Never to another host: not to a stand-in, not to the other engines.
    assert "authorization" not in get_adapter("leanexplore", base_url="http://127.0.0.1:1/api/v2").build_request(["q"]).headers
    for name in ("leansearch", "leanfinder", "loogle"):
        req = get_adapter(name).build_request(["q"])
        assert "authorization" not in req.headers and secret not in str(req.url) + req.content.decode()
    # Parsed hits carry only what the server sent.
    hits = a.parse(["q"], 200, JSON_CT, enc(LE_DOC))
    assert secret not in json.dumps([h.raw for h in hits[0]])


def test_redaction_of_headers_and_urls() -> None:
    h = redact_headers({"Authorization": "Bearer s3cret", "X-Api-Key": "k", "Cookie": "sid=1",
                        "X-Auth-Token": "t", "User-Agent": "engines", "Accept": "application/json"})
    assert h == {"Authorization": "[redacted]", "X-Api-Key": "[redacted]", "Cookie": "[redacted]",
                 "X-Auth-Token": "[redacted]", "User-Agent": "engines", "Accept": "application/json"}
    u = redact_url("https://h/x?q=a&api_key=s3cret&token=t2")
    assert "s3cret" not in u and "t2" not in u and "q=a" in u and u.startswith("https://h/x?")
    assert redact_url("https://bot:pa@ss-s3cret@h.example:8443/api/v2?q=1") == "https://h.example:8443/api/v2?q=1"
    assert redact_url("http://only-user@127.0.0.1:9/x") == "http://127.0.0.1:9/x"
    assert redact_url("https://h/x/y") == "https://h/x/y"


@pytest.mark.parametrize("text,n,period", [("3/30s", 3, 30.0), ("20/2s", 20, 2.0), ("1/s", 1, 1.0),
                                            ("24/60s", 24, 60.0), ("5/1m", 5, 60.0), ("2/0.5s", 2, 0.5)])
def test_parse_rate(text, n, period):
    rate = parse_rate(text)
    assert (rate.n, rate.period) == (n, period)


@pytest.mark.parametrize("text", ["", "3", "3/", "x/30s", "0/30s", "3/0s", "3/30q", "-1/s"])
def test_parse_rate_rejects(text):
    with pytest.raises(InputError, match="rate"):
        parse_rate(text)


def test_request_is_sendable_httpx_request():
    # The crawler sends these as-is; a MockTransport stands for the wire here.
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["ua"] = request.headers["user-agent"]
        return httpx.Response(200, json=LS_DOC)

    a = get_adapter("leansearch")
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        resp = client.send(a.build_request(["q"]))
    assert seen["ua"] == USER_AGENT
    assert [h.name for h in a.parse(["q"], resp.status_code, resp.headers, resp.content)[0]] == ["Fin2.IsLT.succ"]


def test_parse_error_messages_name_the_problem():
    a = get_adapter("leansearch")
    with pytest.raises(EngineParseError, match="truncated JSON"):
        a.parse(["q"], 200, JSON_CT, enc(LS_DOC)[:-5])
    with pytest.raises(EngineParseError, match="malformed JSON"):
        a.parse(["q"], 200, JSON_CT, b'[[{"result": ,, }]]')
    with pytest.raises(EngineParseError, match="HTML page"):
        a.parse(["q"], 200, {"Content-Type": "text/html"}, HTML)
    with pytest.raises(EngineHTTPError, match="HTTP 502"):
        a.parse(["q"], 502, {"Content-Type": "text/html"}, HTML)


# --- read_request: the inverse of build_request ----------------------------------------

ROUND_TRIPS = [
    ("leansearch", {}, ["commutativity of addition"]),
    ("leansearch", {"batch_size": 3, "num_results": 150}, ["first query", "ζ second", "a + b = b + a"]),
    ("leanexplore", {}, ["commutative addition"]),
    ("leanexplore", {"num_results": 7, "packages": "Mathlib,Batteries"}, ["a & b = c?#frag"]),
    ("leanfinder", {}, ["fundamental theorem of calculus"]),
    ("leanfinder", {"num_results": 20, "version": "v4.28.0"}, ["∀ n : ℕ, n + 0 = n"]),
    ("loogle", {}, ["|- tsum _ = _ * tsum _"]),
    ("loogle", {}, ["Real.sqrt, \"sq\""]),
    ("leanstatesearch", {}, ["a + b = b + a"]),
    ("leanstatesearch", {"num_results": 10, "rev": "v4.19.0"}, ["x y : ℕ\nh : x < y\n⊢ x + 1 ≤ y"]),
    ("leanstatesearch", {}, ["⊢a = b"]),
]


@pytest.mark.parametrize("engine,params,texts", ROUND_TRIPS)
def test_read_request_is_the_inverse_of_build_request(engine, params, texts):
    """build_request(texts) read back gives the texts, and parameters that rebuild the same identity."""
    a = get_adapter(engine, **params)
    r = a.build_request(texts)
    asked = a.read_request(r.method, str(r.url), r.content)
    assert asked is not None and asked.texts == texts
    assert get_adapter(engine, **asked.params).identity() == a.identity()
    # The engine's default adapter (the one an import asks) reads it the same way.
    assert get_adapter(engine).read_request(r.method, str(r.url), r.content) == asked


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_read_request_refuses_what_its_build_request_never_sends(engine):
    a = get_adapter(engine)
    r = a.build_request(["x = x"])
    url, body = str(r.url), r.content
    other = "PUT" if r.method != "PUT" else "GET"
    assert a.read_request(other, url, body) is None  # another method
    assert a.read_request(r.method, url.replace(r.url.host, "example.org"), body) is None  # another host
    path = r.url.path.rstrip("/") + "/elsewhere"
    assert a.read_request(r.method, str(r.url.copy_with(path=path)), body) is None  # another path
    assert a.read_request(r.method, str(r.url.copy_with(query=None)), b"") is None  # no query at all


def test_leanfinder_without_version_is_read_as_the_default_version():
    """A request without `version` (before 2026-05-20, or version=None) leaves the version to the
    default, as imports always read it: the texts round-trip, the identity does not."""
    old = get_adapter("leanfinder", version=None)
    r = old.build_request(["x"])
    asked = old.read_request(r.method, str(r.url), r.content)
    assert asked.texts == ["x"] and "version" not in asked.params


def test_leanstatesearch_goal_prefix_is_stripped_back_to_the_statement():
    """`⊢ <statement>` is sent for the statement and for the text `⊢ <statement>` alike: read back,
    it is the statement (the text the crawler sends it for); a proof state is its own text."""
    from engines.queries import goal_query, goal_text

    a = get_adapter("leanstatesearch")
    for text, sent, back in [("a = b", "⊢ a = b", "a = b"), ("⊢ a = b", "⊢ a = b", "a = b"),
                             ("h : P\n⊢ Q", "h : P\n⊢ Q", "h : P\n⊢ Q"), ("⊢ ⊢ x", "⊢ ⊢ x", "⊢ ⊢ x"),
                             ("  spaced", "⊢   spaced", "  spaced")]:
        r = a.build_request([text])
        assert r.url.params["query"] == sent == goal_query(text)
        assert a.read_request(r.method, str(r.url), r.content).texts == [back]
        assert goal_query(goal_text(sent)) == sent
    # A query without ⊢ is never sent (the server refuses it with 400): not this adapter's request.
    assert goal_text("a = b") is None
    url = "https://premise-search.com/api/search?query=a+%3D+b&results=50&rev=v4.22.0"
    assert a.read_request("GET", url, b"") is None
