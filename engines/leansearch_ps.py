"""LeanSearch-PS (REAL-Prover's premise retriever): ``POST {base}/retrieve_premises`` (ENGINE-APIS.md §8.5).

Self-hosted only: there is no public server, so ``--url leansearch-ps=`` (or
``ENGINES_LEANSEARCH_PS_URL``) is required; without it the crawl stops with one line
saying how to run the server (``run_hint``).

Body ``{"query": [goal, ...], "num": n}``: a list is a batch, one result list per goal in
order, so texts are batched (``batch_size``, default 8). Goals are sent as for
``leanpremise``: a statement as ``⊢ <statement>`` (:func:`engines.queries.goal_query`).
The answer is ``{"error": false, "msg": "", "data": [[record, ...], ...]}``, nearest
first, with no score; the hit name is ``record["Formal name"]`` (dotted). A body with
``"error": true`` is a failure carrying ``msg``, whatever its status (the server answers
a missing ``query`` with HTTP 400 and that body); any other 500 is Flask's HTML page.

Courtesy rate 1 request / s: a local GPU service with no limit in code (``--rate`` to
change). Server: ``frenzymath/REAL-Prover:LeanSearch-PS-inference/server.py`` @ 6d0e843.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import httpx

from engines.jsonbody import request_json
from engines.protocol import AskedFor, EngineDefaults, EngineHTTPError, EngineParseError, HitList
from engines.queries import goal_query, goal_text
from engines.rates import Rate
from engines.remote import RemoteAdapter

NAME = "Formal name"


def error_body(body: bytes) -> str | None:
    """The ``msg`` of an ``{"error": true, "msg"}`` body, or None."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if isinstance(data, dict) and data.get("error") is True:
        return str(data.get("msg", ""))
    return None


class LeanSearchPSAdapter(RemoteAdapter):
    engine = "leansearch-ps"
    display_name = "LeanSearch-PS"
    summary = "LeanSearch-PS (REAL-Prover premise selection): self-hosted premise retrieval from a goal."
    stand_in = "engines.emulate.leansearch_ps:LeanSearchPSAPI"
    endpoint_version = "post-retrieve-premises-v1"
    parser_version = 1
    DEFAULT_URL = ""
    run_hint = ("Run the server: REAL-Prover's LeanSearch-PS-inference/server.py (python server.py; "
                "kim-em/run-leansearch-ps sets it up), which listens on http://127.0.0.1:8080.")
    json_object = True
    name_field = NAME
    item_label = "record"
    MAX_BATCH = None
    defaults = EngineDefaults(rate=Rate(1, 1.0), timeout=60.0, result_cap=None, batch_size=8, num_results=50)

    def build_request(self, texts: list[str]) -> httpx.Request:
        self.check_texts(texts)
        body = {"query": [goal_query(t) for t in texts], "num": self.num_results}
        return self.new_request("POST", f"{self.base_url}/retrieve_premises",
                                headers=self.request_headers(json_body=True),
                                content=json.dumps(body, ensure_ascii=False).encode("utf-8"))

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """``POST /retrieve_premises`` with ``{"query": [goals], "num"}`` → texts and ``num_results``."""
        data = request_json(body) if self.sent_to(method, url, "POST", "/retrieve_premises") is not None else None
        query = data.get("query") if data is not None else None
        if isinstance(query, str):
            query = [query]
        if not isinstance(query, list) or not query or not all(isinstance(q, str) for q in query):
            return None
        texts = [goal_text(q) for q in query]
        if any(t is None for t in texts):
            return None
        return AskedFor(texts, {"num_results": int(data["num"])} if data.get("num") else {})

    def refusal(self, status_code: int, headers: Mapping[str, str], body: bytes) -> str | None:
        msg = error_body(body)
        return None if msg is None else f"leansearch-ps: HTTP {status_code}: error in body: {msg!r:.200}"

    def body_error(self, data: dict[str, Any]) -> str | None:
        if data.get("error") is True or ("msg" in data and "data" not in data):
            return f"error in body: {data.get('msg')!r:.200}"
        return None

    def parse(self, texts: list[str], status_code: int, headers: Mapping[str, str], body: bytes) -> list[HitList]:
        """One result list per goal, in request order."""
        data = self.decode(status_code, headers, body)
        message = self.body_error(data)
        if message is not None:
            raise EngineHTTPError(f"leansearch-ps: {message}")
        lists = data.get("data")
        if not isinstance(lists, list):
            raise EngineParseError(f"leansearch-ps: `data` is {type(lists).__name__}, expected a list of lists "
                                   f"(keys {sorted(data)[:8]})")
        if len(lists) != len(texts):
            raise EngineParseError(f"leansearch-ps: {len(lists)} result lists for {len(texts)} queries")
        out = []
        for qi, entry in enumerate(lists):
            if not isinstance(entry, list):
                raise EngineParseError(f"leansearch-ps: answer {qi} is {type(entry).__name__}, expected a list")
            out.append(self.hit_list(entry, where=f"answer {qi}"))
        return out
