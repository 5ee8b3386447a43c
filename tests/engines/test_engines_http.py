"""Issue 33's HTTP engines, unit level: leanpremise, leansearch-ps, leandex requests and
parses; the Lean Finder default URL move; the refusal lines of permanent 4xx answers."""

from __future__ import annotations

import json

import pytest

from engines.base import EngineHTTPError, EngineParseError, config_hash
from engines.leanfinder import HF_URL, PROXY_URL
from engines.registry import adapter_for_config, get_adapter
from store.errors import InputError

SSE = {"content-type": "text/event-stream"}


def test_leanpremise_request_clamp_and_goal_format():
    a = get_adapter("leanpremise")
    r = a.build_request(["a + b = b + a"])
    assert (r.method, str(r.url)) == ("POST", "http://leanpremise.net/retrieve")
    assert json.loads(r.content) == {"state": "⊢ a + b = b + a", "k": 32, "new_premises": []}
    assert "authorization" not in r.headers and a.SECRET_ENVS == ()
    assert a.read_request("POST", str(r.url), r.content).texts == ["a + b = b + a"]
    big = get_adapter("leanpremise", num_results=5000)
    assert big.num_results == 1024 and big.identity()["num_results"] == 1024
    assert big.notes == ["leanpremise: num_results 5000 is sent as 1024 (the server clamps k to 1024)"]
    assert json.loads(big.build_request(["x"]).content)["k"] == 1024
    pp = get_adapter("leanpremise", goal_format="pp-explicit")
    assert config_hash(pp.identity()) != config_hash(a.identity()) and a.identity()["goal_format"] == "notation"
    with pytest.raises(InputError, match="goal_format"):
        get_adapter("leanpremise", goal_format="two words")


def test_leanpremise_errors():
    a = get_adapter("leanpremise")
    body = json.dumps({"detail": [{"type": "string_type", "loc": ["body", "state"], "msg": "Input should be a valid string",
                                   "input": ["a", "b"]}]}).encode()
    assert a.refusal(422, {}, body) == ("leanpremise: HTTP 422: the server refused the request body: `state`: "
                                        "Input should be a valid string (a client bug; not retried)")
    assert "wrong base URL" in a.refusal(404, {}, b'{"detail":"Not Found"}')
    assert "/max-new-premises" in a.refusal(404, {}, b'{"detail":"Not Found"}')
    over = b'{"detail":"Internal Server Error: Embed service overloaded"}'
    assert a.outage_reason(500, {}, over) == "HTTP 500: Internal Server Error: Embed service overloaded"
    assert a.outage_reason(500, {}, b"oops") is None
    (hits,) = a.parse(["x"], 200, {}, b'[{"score": 0.81, "name": "Nat.succ_le_succ"}, {"score": 0.7, "name": "A.b"}]')
    assert [(h.rank, h.name, h.raw["score"]) for h in hits] == [(1, "Nat.succ_le_succ", 0.81), (2, "A.b", 0.7)]
    with pytest.raises(EngineParseError):
        a.parse(["x"], 200, {}, b'{"results": []}')


def test_leansearch_ps_batch_and_errors(monkeypatch):
    monkeypatch.delenv("ENGINES_LEANSEARCH_PS_URL", raising=False)
    with pytest.raises(InputError, match="Run the server"):
        get_adapter("leansearch-ps")
    monkeypatch.setenv("ENGINES_LEANSEARCH_PS_URL", "http://127.0.0.1:8080")
    a = get_adapter("leansearch-ps")
    assert a.batch_size == 8 and str(a.defaults.rate) == "1/1s"
    r = a.build_request(["n + 0 = n", "h : p\n⊢ q"])
    assert str(r.url) == "http://127.0.0.1:8080/retrieve_premises"
    assert json.loads(r.content) == {"query": ["⊢ n + 0 = n", "h : p\n⊢ q"], "num": 50}
    assert a.read_request("POST", str(r.url), r.content).texts == ["n + 0 = n", "h : p\n⊢ q"]
    body = json.dumps({"error": False, "msg": "", "data": [[{"Formal name": "Nat.add_zero"}], [{"x": 1}, {"Formal name": "B"}]]})
    one, two = a.parse(["a", "b"], 200, {}, body.encode())
    assert [h.name for h in one] == ["Nat.add_zero"] and [(h.rank, h.name) for h in two] == [(2, "B")]
    with pytest.raises(EngineHTTPError, match="boom"):
        a.parse(["a"], 200, {}, b'{"error": true, "msg": "boom", "data": {}}')
    assert "Missing param" in a.refusal(400, {}, b'{"error": true, "msg": "Missing param \'query\'", "data": {}}')
    with pytest.raises(EngineParseError, match="1 result lists for 2"):
        a.parse(["a", "b"], 200, {}, b'{"error": false, "msg": "", "data": [[]]}')


def test_leandex_request_key_and_stream(monkeypatch):
    monkeypatch.setenv("ENGINES_LEANDEX_API_KEY", "s3cret")
    a = get_adapter("leandex")
    r = a.build_request(["add comm"])
    assert r.url.params["generate_query"] == "False" and r.url.params["analyze_result"] == "False"
    assert r.headers["accept"] == "text/event-stream" and r.headers["authorization"] == "Bearer s3cret"
    assert "s3cret" not in json.dumps(a.identity())
    for url in ("http://leandex.projectnumina.ai", "https://127.0.0.1:9"):  # not https, not its host
        assert "authorization" not in get_adapter("leandex", url).build_request(["q"]).headers
    stream = (b'data: {"stage": "generate_query"}\r\n\r\ndata: {"stage": "search"}\n\n'
              b'data: {"data": {"search_results": [{"primary_declaration": {"lean_name": "A.b"}}, {"name": "C"}]}}\n\n')
    (hits,) = a.parse(["q"], 200, SSE, stream)
    assert [h.name for h in hits] == ["A.b", "C"]
    with pytest.raises(EngineHTTPError, match="error event"):
        a.parse(["q"], 200, SSE, b'data: {"stage": 1}\n\ndata: {"error": "LLM failed"}\n\n')
    with pytest.raises(EngineParseError, match="no data.search_results"):
        a.parse(["q"], 200, SSE, b'data: {"stage": "search"}\n\n')
    with pytest.raises(EngineParseError, match="no data: event"):
        a.parse(["q"], 200, SSE, b": keep-alive\n\n")
    assert a.outage_reason(522, {}, b"") is not None and "406" in a.refusal(406, {}, b"{}")


def test_leanfinder_default_is_the_proxy_and_old_configurations_keep_their_identity():
    a = get_adapter("leanfinder")
    assert a.base_url == PROXY_URL and a.identity()["base_url"] == PROXY_URL
    hf = get_adapter("leanfinder", HF_URL)
    assert "base_url" not in hf.identity()  # what every archived configuration holds: the same hash
    assert config_hash(hf.identity()) == config_hash({"engine": "leanfinder", "endpoint_version": "hf-endpoint-inputs-v1",
                                                      "num_results": 50, "version": "v4.19.0"})
    assert adapter_for_config("leanfinder", hf.identity()).base_url == HF_URL
    assert adapter_for_config("leanfinder", a.identity()).base_url == PROXY_URL
    (hits,) = a.parse(["q"], 200, {}, b'{"results": [{"formal_name": "A.b", "score": 0.93}]}')
    assert hits[0].raw["score"] == 0.93
