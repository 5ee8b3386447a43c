"""The base class of every remote adapter: its declaration, its plumbing and its parse template.

An engine is declared once, on its adapter class (:class:`RemoteAdapter`'s class
attributes below): the registry (:mod:`engines.registry`), the stand-ins, the demo, the
CLI's help and the tests all read it from there. docs/adding-an-engine.md walks through one.

An ordinary JSON adapter fills in the parse template's hooks and nothing else:

- :meth:`RemoteAdapter.body_error`: the error message a decoded body carries, or None;
- :meth:`RemoteAdapter.items`: the list of result items of a decoded body (raises
  :class:`EngineParseError` when the envelope is wrong);
- :meth:`RemoteAdapter.item_name`: the dotted Lean name of one item (raises
  :class:`EngineParseError` with the reason when it has none: the item is dropped);
- :meth:`RemoteAdapter.item_raw`: what of an item is archived as its raw JSON (default: the item).
"""

from __future__ import annotations

import os
from typing import Any, Mapping
from urllib.parse import parse_qs, urlsplit

import httpx

from engines import __version__
from engines.jsonbody import decode_json_body, decode_json_object, snippet
from engines.protocol import (
    OUTAGE_STATUSES,
    AskedFor,
    EngineDefaults,
    EngineHTTPError,
    EngineParseError,
    ForeignItem,
    HitList,
    ParsedHit,
    finish_hits,
)
from engines.redact import redact_url
from engines.urls import check_base_url

USER_AGENT = f"engines/{__version__} (Lean/Mathlib search benchmark harness; +https://github.com/engines-bench/engines)"


class RemoteAdapter:
    """Common constructor, identity, host, request plumbing and parse template of the remote adapters.

    Subclasses declare the engine (class attributes, read by :func:`engines.registry.register`)
    and implement ``build_request``, its inverse ``read_request``, and either the parse
    hooks or ``parse`` itself.
    """

    # --- the declaration: everything per engine, in one place --------------------------
    engine: str = ""  # registry name, e.g. "leansearch" (also ENGINES_<NAME>_URL)
    display_name: str = ""  # as people write it: "Lean Finder" (labels, --system matching)
    summary: str = ""  # one line for help texts and docs
    DEFAULT_URL: str = ""  # the public service (where a crawl goes without --url)
    # The URL an identity without ``base_url`` means (default: DEFAULT_URL). When the default
    # moves to another server, the old one stays here, so archived configurations keep
    # their identities and the new default's configurations record their base_url.
    IDENTITY_URL: str = ""
    KNOWN_URLS: tuple[str, ...] = ()  # other public servers of the same service
    defaults: EngineDefaults  # courtesy rate, timeout, result cap, batch size, results per query
    transport: str = "http"  # how requests travel (the crawler speaks "http")
    stand_in: str = ""  # "module:Class" of its loopback stand-in API (engines.emulate.apis.EngineAPI)
    demo_port: int | None = None  # in `engines demo`: its stand-in's usual loopback port (None: not in the demo)
    demo_weights: Mapping[str, int] | None = None  # in the demo: its stand-in's field weights
    accepts: tuple[str, ...] = ("application/json",)  # content types asked for (the Accept header)
    endpoint_version: str = ""  # part of the identity: a new request shape is a new configuration
    parser_version: int = 1  # bump when what a body parses to changes (archived bodies re-parse)
    PARAMS: dict[str, Any] = {}  # result-changing parameters beyond num_results, with defaults
    MAX_BATCH: int | None = 1  # most texts one request can carry (None: no limit)
    MAX_NUM_RESULTS: int | None = None  # most results one request may ask for (None: no limit)
    # Environment variables holding this engine's secrets (API keys): a crawl refuses to
    # start when one of them would go over plain http:// to a non-loopback host.
    SECRET_ENVS: tuple[str, ...] = ()
    # A self-hosted engine has no public DEFAULT_URL: this one line says how to run its
    # server, and a crawl without --url / ENGINES_<NAME>_URL stops with it.
    run_hint: str = ""
    liveness_path: str = ""  # a cheap GET that answers when the service is up ("" : none known)

    # --- the parse template's settings ---------------------------------------------------
    json_object: bool = False  # the answer's top level must be a JSON object
    item_label: str = "result"  # how a drop reason names an item: "result 3: ..."
    name_field: str = "name"  # the item field :meth:`item_name` reads by default

    def __init__(self, base_url: str | None = None, **params: Any) -> None:
        from store.errors import InputError

        env = self.url_env()
        url = base_url or os.environ.get(env) or self.DEFAULT_URL
        if not url:
            raise InputError(f"{self.engine}: no public server; pass --url {self.engine}=http://HOST:PORT "
                             f"or set {env}. {self.run_hint}".rstrip())
        self.notes: list[str] = []  # what the constructor changed, for the user (one line each)
        self.base_url = check_base_url(self.engine, url, f"--url or {env}")
        self.batch_size = int(params.pop("batch_size", self.defaults.batch_size))
        if self.batch_size < 1 or (self.MAX_BATCH is not None and self.batch_size > self.MAX_BATCH):
            raise InputError(f"{self.engine}: batch_size {self.batch_size} out of range 1..{self.MAX_BATCH}")
        self.num_results = int(params.pop("num_results", self.defaults.num_results))
        if self.MAX_NUM_RESULTS is not None and not 1 <= self.num_results <= self.MAX_NUM_RESULTS:
            raise InputError(f"{self.engine}: num_results {self.num_results} out of range 1..{self.MAX_NUM_RESULTS}")
        if self.num_results < 1:
            raise InputError(f"{self.engine}: num_results {self.num_results} must be at least 1")
        self.timeout = float(params.pop("timeout", self.defaults.timeout))
        self.params = {k: params.pop(k, v) for k, v in self.PARAMS.items()}
        if params:
            known = ", ".join(["batch_size", "num_results", "timeout", *self.PARAMS])
            raise InputError(f"{self.engine}: unknown parameter(s) {', '.join(sorted(params))}; known: {known}")

    @classmethod
    def url_env(cls) -> str:
        """``ENGINES_<NAME>_URL`` (``-`` in the name becomes ``_``)."""
        return f"ENGINES_{cls.engine.upper().replace('-', '_')}_URL"

    @classmethod
    def stored_url(cls) -> str:
        """The base URL of a stored configuration that records none (:attr:`IDENTITY_URL`)."""
        return (cls.IDENTITY_URL or cls.DEFAULT_URL).rstrip("/")

    @property
    def host(self) -> str:
        # host[:port] only: credentials in --url (user:password@) are sent, never stored
        # (host_state, send_log) nor printed.
        return urlsplit(self.base_url).netloc.rpartition("@")[2]

    def identity(self) -> dict[str, Any]:
        ident: dict[str, Any] = {
            "engine": self.engine,
            "endpoint_version": self.endpoint_version,
            "num_results": self.num_results,
            **self.params,
        }
        # A stand-in or mirror must never share cache rows with the public service. The
        # identity is stored and shown (params, label): credentials in the URL stay out.
        if self.base_url != self.stored_url():
            ident["base_url"] = redact_url(self.base_url)
        return ident

    def outage_reason(self, status_code: int, headers: Mapping[str, str], body: bytes) -> str | None:
        """Why this response means the service is down (an outage), or None.

        The fetcher asks this first, for every response. Default: 405/502/503/504 (our
        requests always use the correct method, so a 405 is a maintenance page, as
        LeanSearch served from 2025-05-31 to 2025-06-02). Adapters add in-band signs.
        """
        if status_code in OUTAGE_STATUSES:
            return f"HTTP {status_code}: {snippet(body, 100)}"
        return None

    def refusal(self, status_code: int, headers: Mapping[str, str], body: bytes) -> str | None:
        """The one line a permanent non-2xx answer (a 4xx the fetcher does not retry) is
        recorded with, or None for the default ``HTTP <status>: <body start>``. Adapters say
        what the status means for their engine (a field a 422 names, a wrong base URL)."""
        return None

    def read_request(self, method: str, url: str, body: bytes | None) -> AskedFor | None:
        """The inverse of ``build_request``: what a request asked for, or None.

        None when the request is not one this adapter builds: another method, another host
        or path than its base URL's endpoint, or a body or query without this engine's
        fields. A request of its shape whose value cannot be read (``num_results`` not a
        number) raises ``ValueError``. Round trip: ``read_request`` of
        ``build_request(texts)`` gives ``texts`` back, and its ``params`` rebuild an
        adapter with the same identity (except where an adapter's docstring says).
        Adapters that recognise nothing keep this default.
        """
        return None

    # --- request plumbing for subclasses -------------------------------------------------
    def sent_to(self, method: str, url: str, want: str, path: str) -> dict[str, list[str]] | None:
        """The query parameters of ``url`` when the request is a ``want`` to this adapter's base
        URL + ``path`` (host and path compared, a trailing ``/`` ignored), else None."""
        if str(method).strip().upper() != want:
            return None
        try:
            got, endpoint = urlsplit(url), urlsplit(self.base_url + path)
        except ValueError:
            return None
        if got.netloc.rpartition("@")[2].lower() != self.host.lower():
            return None
        if got.path.rstrip("/") != endpoint.path.rstrip("/"):
            return None
        return parse_qs(got.query)

    def request_headers(self, *, json_body: bool = False) -> dict[str, str]:
        """The project's ``User-Agent``, ``Accept`` (:attr:`accepts`), and a JSON ``Content-Type`` when asked."""
        headers = {"User-Agent": USER_AGENT, "Accept": ", ".join(self.accepts)}
        if json_body:
            headers["Content-Type"] = "application/json"
        return headers

    def new_request(self, method: str, url: str, **kw: Any) -> httpx.Request:
        """An ``httpx.Request`` carrying this adapter's timeout."""
        # httpx only applies a timeout to a hand-built Request through this extension.
        ext = {"timeout": httpx.Timeout(self.timeout).as_dict()}
        return httpx.Request(method, url, extensions=ext, **kw)

    def check_texts(self, texts: list[str]) -> None:
        """``ValueError`` unless 1..``batch_size`` texts."""
        if not texts or len(texts) > self.batch_size:
            raise ValueError(f"{self.engine}: need 1..{self.batch_size} texts per request, got {len(texts)}")

    # --- the parse template ----------------------------------------------------------------
    def parse(
        self, texts: list[str], status_code: int, headers: Mapping[str, str], body: bytes
    ) -> list[HitList]:
        """One answer per request: decode, the body's error first, then its items one by one."""
        data = self.decode(status_code, headers, body)
        message = self.body_error(data)
        if message is not None:
            raise EngineHTTPError(f"{self.engine}: {message}")
        return [self.hit_list(self.items(data))]

    def decode(self, status_code: int, headers: Mapping[str, str], body: bytes) -> Any:
        """The JSON of a body (:mod:`engines.jsonbody`); an object when :attr:`json_object`."""
        decode = decode_json_object if self.json_object else decode_json_body
        return decode(self.engine, status_code, headers, body)

    def body_error(self, data: Any) -> str | None:
        """The error a decoded body reports (raised as :class:`EngineHTTPError` after
        ``"<engine>: "``), or None. May raise :class:`EngineOutage` itself."""
        return None

    def items(self, data: Any) -> list[Any]:
        """The result items of a decoded body that is not an error, in rank order."""
        raise NotImplementedError(f"{type(self).__name__}: implement items() or parse()")

    def item_name(self, item: Any) -> str:
        """The dotted name of one item; :class:`EngineParseError` (the reason) drops it.
        Default: a non-empty string in the item's :attr:`name_field`."""
        field = self.name_field
        name = item.get(field) if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            what = f"keys {sorted(item)[:10]}" if isinstance(item, dict) else type(item).__name__
            raise EngineParseError(f"no string `{field}` ({what})")
        return name

    def item_raw(self, item: Any) -> Any:
        """What of a named item is kept as its hit's raw JSON (default: the item itself)."""
        return item

    def hit_list(self, items: list[Any], *, where: str = "answer", label: str | None = None,
                 name: Any = None) -> HitList:
        """The hits of one answer's items: an item without a name is dropped
        (``"<label> <rank>: <reason>"``), the others keep their as-returned ranks; every item
        unusable is a parse error (:func:`finish_hits`). ``name`` replaces :meth:`item_name`."""
        label = label or self.item_label
        name_of = name or self.item_name
        raw_of = None if type(self).item_raw is RemoteAdapter.item_raw else self.item_raw
        # The default item_name, inlined for the usual item (a dict with a non-empty string
        # name): the archive re-parses millions of items. Anything else takes item_name.
        field = self.name_field if name is None and type(self).item_name is RemoteAdapter.item_name else None
        hits = HitList()
        benign = 0
        for i, item in enumerate(items):
            found = item.get(field) if field is not None and type(item) is dict else None
            if type(found) is not str or not found:
                try:
                    found = name_of(item)
                except EngineParseError as exc:
                    benign += isinstance(exc, ForeignItem)
                    hits.drop(f"{label} {i + 1}: {exc}")
                    continue
            hits.append(ParsedHit(i + 1, found, item if raw_of is None else raw_of(item)))
        return finish_hits(self.engine, hits, len(items), where=where, benign=benign)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r}, params={self.identity()!r})"
