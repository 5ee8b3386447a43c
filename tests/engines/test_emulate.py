"""Stand-ins over real loopback sockets: adapter → socket → stand-in → adapter.parse.

The tiny corpus is small enough to rank by hand with the rule in
engines/emulate/scorer.py: each distinct query token (split on ./_/camelCase,
lower-cased, one-letter tokens dropped) scores 2 if it is in the row's name, else 1 if
in its signature or docstring; ties keep row order.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from engines.base import USER_AGENT, EngineHTTPError, EngineParseError, Rate
from engines.emulate import FaultConfig, LexicalIndex, StandIn, load_rows, tokenize
from engines.registry import ENGINES as REGISTRY
from engines.registry import get_adapter
from store.errors import InputError

TINY = [
    {"name": ["Nat", "add_comm"], "module_name": ["Mathlib", "Algebra", "Group", "Defs"], "kind": "theorem",
     "signature": "(n m : ℕ) : n + m = m + n", "docstring": "Addition is commutative."},
    {"name": ["Nat", "mul_comm"], "module_name": ["Mathlib", "Algebra", "Group", "Defs"], "kind": "theorem",
     "signature": "(n m : ℕ) : n * m = m * n", "docstring": "Multiplication is commutative."},
    {"name": ["Nat", "add_assoc"], "module_name": ["Mathlib", "Algebra", "Group", "Defs"], "kind": "theorem",
     "signature": "(n m k : ℕ) : n + m + k = n + (m + k)", "docstring": "Addition is associative."},
    {"name": ["orderOf_dvd_card"], "module_name": ["Mathlib", "GroupTheory", "OrderOfElement"], "kind": "theorem",
     "signature": "[Fintype G] (x : G) : orderOf x ∣ Fintype.card G",
     "docstring": "The order of an element divides the cardinality of the group."},
    {"name": ["Real", "sin"], "module_name": ["Mathlib", "Analysis", "SpecialFunctions", "Trigonometric", "Basic"],
     "kind": "definition", "signature": "(x : ℝ) : ℝ", "docstring": "The real sine function."},
    {"name": ["List", "sum_comm"], "module_name": ["Batteries", "Data", "List", "Basic"], "kind": "theorem",
     "signature": "(l : List ℕ) : l.sum = l.reverse.sum", "docstring": "Summing is commutative."},
]

# Worked out by hand from the rule above.
EXPECTED = {
    # add comm: add_comm 2+2; mul_comm 2 (comm); add_assoc 2 (add); sum_comm 2 (comm)
    "add comm": ["Nat.add_comm", "Nat.mul_comm", "Nat.add_assoc", "List.sum_comm"],
    # "commutative" only in docstrings: rows 0, 1, 5 score 1
    "commutative": ["Nat.add_comm", "Nat.mul_comm", "List.sum_comm"],
    # order 2 (orderOf → order, of), group 1, divides 1
    "order of a group divides": ["orderOf_dvd_card"],
    # real 2 (name), sine 1 (docstring)
    "the real sine": ["Real.sin", "orderOf_dvd_card"],  # "the" is in orderOf_dvd_card's docstring too
}
# Every registered engine has a stand-in: the parametrisation derives from the registry.
ENGINES = [name for name, cls in REGISTRY.items() if cls.stand_in]


def adapter_for(engine, srv, **params):
    if engine != "loogle":
        params.setdefault("num_results", 10)
    return get_adapter(engine, base_url=srv.url, **params)


async def ask(client, adapter, text):
    resp = await client.send(adapter.build_request([text]))
    return resp, adapter.parse([text], resp.status_code, resp.headers, resp.content)


def test_tokenize_and_hand_ranking():
    assert tokenize("orderOf_dvd_card (x : G) HTTPServer l2Norm") == ["order", "of", "dvd", "card", "http", "server", "norm"]
    index = LexicalIndex(load_rows(TINY))
    # "the real sine": Real.sin = real(name 2) + the(doc 1) + sine(doc 1) = 4; orderOf_dvd_card = the(doc 1)
    assert [(r.name, s) for r, s in index.search("the real sine")] == [("Real.sin", 4), ("orderOf_dvd_card", 1)]
    assert index.search("zzz unknown") == []


@pytest.mark.parametrize("engine", ENGINES)
async def test_round_trip_exact_ranked_names(engine):
    async with StandIn(engine, TINY) as srv:
        adapter = adapter_for(engine, srv)
        async with httpx.AsyncClient() as client:
            for query, expected in EXPECTED.items():
                resp, hits = await ask(client, adapter, query)
                assert resp.status_code == 200
                assert [h.name for h in hits[0]] == expected, query
                assert [h.rank for h in hits[0]] == list(range(1, len(expected) + 1))
        assert srv.stats.served == len(EXPECTED) == srv.stats.requests
        assert srv.stats.connections == 1  # keep-alive: one connection for every request
        assert {e["user_agent"] for e in srv.stats.log} == {USER_AGENT}


async def test_leansearch_batch_and_num_results():
    async with StandIn("leansearch", TINY) as srv:
        adapter = adapter_for("leansearch", srv, batch_size=3, num_results=2)
        texts = ["add comm", "commutative", "nothing matches zzz"]
        async with httpx.AsyncClient() as client:
            resp = await client.send(adapter.build_request(texts))
        hits = adapter.parse(texts, resp.status_code, resp.headers, resp.content)
        assert [[h.name for h in q] for q in hits] == [["Nat.add_comm", "Nat.mul_comm"], ["Nat.add_comm", "Nat.mul_comm"], []]
        rec = hits[0][0].raw["result"]
        assert rec["name"] == ["Nat", "add_comm"] and rec["module_name"] == ["Mathlib", "Algebra", "Group", "Defs"]
        assert isinstance(hits[0][0].raw["distance"], float)
        assert srv.stats.requests == 1


async def test_leanexplore_packages_filter_and_dependencies_string():
    async with StandIn("leanexplore", TINY) as srv:
        async with httpx.AsyncClient() as client:
            _, hits = await ask(client, adapter_for("leanexplore", srv, packages=["Batteries"]), "add comm")
            assert [h.name for h in hits[0]] == ["List.sum_comm"]
            _, hits = await ask(client, adapter_for("leanexplore", srv, packages="Mathlib", num_results=2), "add comm")
            assert [h.name for h in hits[0]] == ["Nat.add_comm", "Nat.mul_comm"]
            raw = hits[0][0].raw
            assert isinstance(raw["dependencies"], str) and raw["dependencies_list"] == []
            assert raw["module"] == "Mathlib.Algebra.Group.Defs"
            one = await client.get(f"{srv.url}/declarations/{raw['id']}")
            assert one.json()["name"] == "Nat.add_comm"
            assert (await client.get(f"{srv.url}/declarations/999")).status_code == 404
            assert (await client.post(f"{srv.url}/search", params={"q": "x"})).status_code == 405
            missing = await client.get(f"{srv.url}/search")
            assert missing.status_code == 400 and "msg" in missing.json()


async def test_leanfinder_both_schemas_over_the_wire():
    async with StandIn("leanfinder", TINY) as srv:
        async with httpx.AsyncClient() as client:
            _, new = await ask(client, adapter_for("leanfinder", srv), "add comm")
            _, old = await ask(client, adapter_for("leanfinder", srv, version=None), "add comm")
            assert [h.name for h in new[0]] == [h.name for h in old[0]] == EXPECTED["add comm"]
            assert "formal_name" in new[0][0].raw and new[0][0].raw["path"] == "Mathlib/Algebra/Group/Defs"
            assert "url" in old[0][0].raw
            bad = await client.send(adapter_for("leanfinder", srv, version="v4.99.0").build_request(["x"]))
            assert "error" in bad.json()


async def test_loogle_errors_and_caps():
    rows = [{"name": ["Foo", f"lemma{i:03d}"], "module_name": ["Mathlib", "Foo"]} for i in range(250)]
    async with StandIn("loogle", rows + TINY) as srv:
        adapter = adapter_for("loogle", srv)
        async with httpx.AsyncClient() as client:
            resp, hits = await ask(client, adapter, "#find Foo")
            assert resp.json()["count"] == 250 and len(hits[0]) == 200
            assert [h.name for h in hits[0][:2]] == ["Foo.lemma000", "Foo.lemma001"]
            for bad in ("(Nat.add_comm", "zzzz"):
                resp = await client.send(adapter.build_request([bad]))
                assert resp.status_code == 200 and "error" in resp.json()
                with pytest.raises(EngineHTTPError):
                    adapter.parse([bad], resp.status_code, resp.headers, resp.content)
            resp = await client.send(adapter.build_request([""]))
            assert resp.json() == {}
            with pytest.raises(EngineParseError):
                adapter.parse([""], resp.status_code, resp.headers, resp.content)
            urllib_agent = await client.get(f"{srv.url}/json", params={"q": "Real.sin"},
                                            headers={"User-Agent": "Python-urllib/3.12"})
            assert urllib_agent.status_code == 403


async def test_leansearch_cap_validation_and_methods():
    rows = [{"name": ["Foo", f"lemma{i:03d}"], "module_name": ["Mathlib", "Foo"]} for i in range(60)]
    async with StandIn("leansearch", rows) as srv:
        adapter = adapter_for("leansearch", srv, num_results=150)
        async with httpx.AsyncClient() as client:
            _, hits = await ask(client, adapter, "foo")
            assert [h.name for h in hits[0]] == [f"Foo.lemma{i:03d}" for i in range(50)]  # at most 50 back
            s = await client.post(f"{srv.url}/search", json={"query": ["foo"], "num_results": "5"})
            assert len(s.json()[0]) == 5  # numeric strings accepted
            assert (await client.post(f"{srv.url}/search", json={"query": ["foo"], "num_results": 151})).status_code == 422
            assert (await client.post(f"{srv.url}/search", json={"query": "foo"})).status_code == 422
            assert (await client.get(f"{srv.url}/search")).status_code == 405
            assert (await client.post(f"{srv.url}/nope", json={})).status_code == 404
        assert srv.stats.served == 2


async def test_real_mathlib_slice_round_trip():
    from benchmarks import SLICE_CORPUS

    rows = load_rows(SLICE_CORPUS)
    assert len(rows) == 11651
    queries = ["conditional probability measure", "order of a group element divides", "continuous function on a compact set"]

    def oracle(query, k):  # brute force over every row, independent of the inverted index
        q = set(tokenize(query))
        scored = []
        for row in rows:
            name = set(tokenize(row.name))
            text = set(tokenize(" ".join(s for s in (row.get("signature"), row.get("docstring")) if isinstance(s, str))))
            s = sum(2 if t in name else 1 if t in text else 0 for t in q)
            if s:
                scored.append((-s, row.index, row.name))
        return [n for _, _, n in sorted(scored)[:k]]

    async with StandIn("leansearch", SLICE_CORPUS) as srv:
        adapter = adapter_for("leansearch", srv, batch_size=3, num_results=20)
        async with httpx.AsyncClient() as client:
            resp = await client.send(adapter.build_request(queries))
        hits = adapter.parse(queries, resp.status_code, resp.headers, resp.content)
    for query, got in zip(queries, hits):
        assert [h.name for h in got] == oracle(query, 20)
        assert len(got) == 20
    assert "ProbabilityTheory.cond" in [h.name for h in hits[0][:5]]


# --- rate limit ------------------------------------------------------------------------

async def test_rate_limit_counts_violations_and_answers_like_each_engine():
    expected = {"leansearch": (429, None), "leanexplore": (429, "retry"), "leanfinder": (429, None), "loogle": (503, "5")}
    for engine, (status, retry_after) in expected.items():
        async with StandIn(engine, TINY, rate=Rate(2, 30.0)) as srv:
            adapter = adapter_for(engine, srv)
            async with httpx.AsyncClient() as client:
                codes = []
                for _ in range(4):
                    resp = await client.send(adapter.build_request(["add comm"]))
                    codes.append(resp.status_code)
            assert codes == [200, 200, status, status], engine
            assert (srv.stats.violations, srv.stats.served, srv.stats.requests) == (2, 2, 4)
            if retry_after is None:
                assert "retry-after" not in resp.headers
            elif retry_after == "retry":
                assert 1 <= int(resp.headers["retry-after"]) <= 30
            else:
                assert resp.headers["retry-after"] == retry_after
            with pytest.raises(EngineHTTPError):
                adapter.parse(["add comm"], resp.status_code, resp.headers, resp.content)


async def test_paced_client_has_no_violations_and_window_holds():
    rate = Rate(2, 0.25)
    async with StandIn("leansearch", TINY, rate=rate) as srv:
        adapter = adapter_for("leansearch", srv)
        sent: list[float] = []
        async with httpx.AsyncClient() as client:
            for _ in range(6):
                if len(sent) >= rate.n:  # client-side sliding window with a 60 ms margin
                    wait = sent[-rate.n] + rate.period + 0.06 - time.perf_counter()
                    if wait > 0:
                        await asyncio.sleep(wait)
                sent.append(time.perf_counter())
                resp = await client.send(adapter.build_request(["add comm"]))
                assert resp.status_code == 200
        st = srv.stats
        assert (st.violations, st.served, len(st.receive_times)) == (0, 6, 6)
        t = st.receive_times
        assert all(t[i + rate.n] - t[i] > rate.period for i in range(len(t) - rate.n))
        # A burst right after is over the limit and is counted.
        async with httpx.AsyncClient() as client:
            codes = [(await client.send(adapter.build_request(["x"]))).status_code for _ in range(3)]
        assert codes.count(429) >= 1 and st.violations == codes.count(429)


# --- faults ----------------------------------------------------------------------------

async def outcomes(engine, faults, seed, n=12, timeout=5.0, **params):
    """The client-side outcome of n sequential requests, and the server's fault log."""
    async with StandIn(engine, TINY, faults=faults, seed=seed) as srv:
        adapter = adapter_for(engine, srv, timeout=timeout, **params)
        out = []
        async with httpx.AsyncClient() as client:
            for _ in range(n):
                try:
                    resp = await client.send(adapter.build_request(["add comm"]))
                except httpx.TimeoutException:
                    out.append("timeout")
                    continue
                except httpx.TransportError:
                    out.append("transport")
                    continue
                try:
                    names = [h.name for h in adapter.parse(["add comm"], resp.status_code, resp.headers, resp.content)[0]]
                except EngineParseError:
                    out.append(f"{resp.status_code}:parse")
                    continue
                except EngineHTTPError:
                    out.append(f"{resp.status_code}:http")
                    continue
                if len(set(names)) < len(names):
                    out.append("dup")
                else:
                    assert names == EXPECTED["add comm"]
                    out.append("ok")
        return out, [e["fault"] for e in srv.stats.log], srv.stats


CONTENT_FAULTS = [
    ("error_5xx", {"500:http", "502:http", "503:http"}),
    ("malformed_json", {"200:parse"}),
    ("truncated", {"200:parse"}),
    ("html_200", {"200:parse"}),
    ("schema_drift", {"200:parse"}),
    ("duplicates", {"dup"}),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fault,symptoms", CONTENT_FAULTS, ids=[f for f, _ in CONTENT_FAULTS])
async def test_fault_reproducible_by_seed(engine, fault, symptoms):
    cfg = FaultConfig(**{fault: 0.5})
    first, log, stats = await outcomes(engine, cfg, seed=7)
    again, log2, _ = await outcomes(engine, cfg, seed=7)
    other, _, _ = await outcomes(engine, cfg, seed=8)
    assert first == again and log == log2
    assert first != other
    bad = [o for o in first if o != "ok"]
    assert bad and len(bad) < len(first)  # some faulty, some clean
    assert set(bad) <= symptoms
    assert stats.faults[fault] == len(bad) == sum(f == fault for f in log)


async def test_fault_outcomes_do_not_depend_on_other_faults():
    # Request i's draw for a fault depends only on (seed, i).
    a, _, _ = await outcomes("leansearch", FaultConfig(html_200=0.5), seed=3)
    b, _, _ = await outcomes("leansearch", FaultConfig(html_200=0.5, duplicates=0.3), seed=3)
    assert [o == "200:parse" for o in a] == [o == "200:parse" for o in b]


@pytest.mark.parametrize("engine", ["leansearch", "loogle"])
async def test_connection_reset_reproducible(engine):
    first, log, stats = await outcomes(engine, FaultConfig(reset=0.4), seed=11)
    again, _, _ = await outcomes(engine, FaultConfig(reset=0.4), seed=11)
    assert first == again and set(first) == {"ok", "transport"}
    assert stats.faults["reset"] == first.count("transport")


async def test_timeout_no_answer_then_recovers():
    first, log, stats = await outcomes("leanexplore", FaultConfig(timeout=0.3), seed=5, n=8, timeout=0.5)
    again, _, _ = await outcomes("leanexplore", FaultConfig(timeout=0.3), seed=5, n=8, timeout=0.5)
    assert first == again and set(first) == {"ok", "timeout"}
    assert stats.faults["timeout"] == first.count("timeout")


async def test_latency_applied_to_a_seeded_share():
    cfg = FaultConfig(latency=0.3, latency_p=0.5)
    async with StandIn("leanfinder", TINY, faults=cfg, seed=2) as srv:
        adapter = adapter_for("leanfinder", srv)
        slow = []
        async with httpx.AsyncClient() as client:
            for _ in range(8):
                t0 = time.perf_counter()
                await ask(client, adapter, "add comm")
                slow.append(time.perf_counter() - t0 >= 0.3)
    assert 0 < sum(slow) < 8
    async with StandIn("leanfinder", TINY, faults=cfg, seed=2) as srv2:
        adapter = adapter_for("leanfinder", srv2)
        async with httpx.AsyncClient() as client:
            again = []
            for _ in range(8):
                t0 = time.perf_counter()
                await ask(client, adapter, "add comm")
                again.append(time.perf_counter() - t0 >= 0.3)
    assert again == slow


async def test_maintenance_window_and_switch():
    out, log, stats = await outcomes("leansearch", FaultConfig(maintenance=(2, 4)), seed=0, n=6)
    assert out == ["ok", "ok", "405:http", "405:http", "ok", "ok"]
    assert stats.statuses[405] == 2
    async with StandIn("leansearch", TINY) as srv:
        adapter = adapter_for("leansearch", srv)
        async with httpx.AsyncClient() as client:
            srv.maintenance = True
            assert (await client.send(adapter.build_request(["x"]))).status_code == 405
            srv.maintenance = False
            assert (await client.send(adapter.build_request(["x"]))).status_code == 200


async def test_stop_is_clean_with_a_hanging_request():
    srv = StandIn("loogle", TINY, faults=FaultConfig(timeout=1.0))
    await srv.start()
    client = httpx.AsyncClient()
    pending = asyncio.ensure_future(client.get(f"{srv.url}/json", params={"q": "x"}, timeout=30))
    while srv.stats.requests == 0:
        await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    await srv.stop()
    assert time.perf_counter() - t0 < 2
    with pytest.raises(httpx.TransportError):
        await pending
    await client.aclose()


def test_bad_inputs_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="known"):
        StandIn("moogle", TINY)
    with pytest.raises(InputError, match="does not exist"):
        StandIn("loogle", tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": ["A"]}\n{not json\n')
    with pytest.raises(InputError, match="bad.jsonl:2"):
        StandIn("loogle", bad)
    with pytest.raises(InputError, match="probability"):
        FaultConfig(reset=1.5)


def test_in_thread_serves_a_subprocess_client(tmp_path):
    import gzip
    import subprocess
    import sys

    corpus = tmp_path / "tiny.jsonl.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in TINY)
    script = (
        "import sys, httpx\n"
        "from engines.registry import get_adapter\n"
        "a = get_adapter('loogle')\n"  # base URL from ENGINES_LOOGLE_URL
        "r = httpx.Client().send(a.build_request(['add comm']))\n"
        "print(','.join(h.name for h in a.parse(['add comm'], r.status_code, r.headers, r.content)[0]))\n"
    )
    with StandIn("loogle", corpus, rate=Rate(5, 10.0)) as srv:  # sync use = in_thread()
        env = {**__import__("os").environ, "ENGINES_LOOGLE_URL": srv.url}
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().split(",") == EXPECTED["add comm"]
        with httpx.Client() as client:
            assert client.get(f"{srv.url}/json", params={"q": "commutative"}).json()["count"] == 3
        assert (srv.stats.requests, srv.stats.violations) == (2, 0)


async def test_concurrent_burst_counts_every_excess_request():
    async with StandIn("leanexplore", TINY, rate=Rate(5, 30.0)) as srv:
        adapter = adapter_for("leanexplore", srv)
        async with httpx.AsyncClient() as client:
            resps = await asyncio.gather(*(client.send(adapter.build_request([f"add comm {i}"])) for i in range(12)))
        codes = sorted(r.status_code for r in resps)
        assert codes == [200] * 5 + [429] * 7
        assert (srv.stats.requests, srv.stats.violations, srv.stats.served) == (12, 7, 5)
        assert srv.stats.connections > 1  # really concurrent connections
        ok = [r for r in resps if r.status_code == 200]
        assert all([h.name for h in adapter.parse(["q"], 200, r.headers, r.content)[0]] == EXPECTED["add comm"] for r in ok)
