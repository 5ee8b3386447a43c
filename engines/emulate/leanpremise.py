"""The Lean Hammer premise server's stand-in, built as the real one is: a FastAPI app (ENGINE-APIS.md §7).

Routes as ``hanwenzhu/lean-premise-server:app/main.py`` @ af21f77 declares them:
``POST /retrieve`` (pydantic ``RetrievalRequest``: ``state: str``, ``k: int`` required,
``new_premises`` a list of ``{"name", "decl"}`` defaulting to ``[]``, the optional filters),
``GET /max-new-premises`` (a bare integer), ``GET /indexed-premises``,
``GET /indexed-modules``; every other path, ``/`` included, is FastAPI's
``404 {"detail": "Not Found"}``. ``k`` is clamped to 1024, ``k <= 0`` gives ``[]``. The
answer is ``[{"score", "name"}]`` highest first (the stand-in's lexical score stands in
for the embedding inner product). Overload (the ``error_5xx`` fault) is the real
``500 {"detail": "Internal Server Error: Embed service overloaded"}``. Bodies are synthetic.
"""



import contextvars
from typing import Any, Optional, Union

from engines.emulate.apis import EngineAPI, Mods, Reply, Request, finish_items, jreply
from engines.emulate.asgi import call_asgi

K_MAX = 1024
MAX_NEW_PREMISES = 2048
_mods: contextvars.ContextVar[Mods] = contextvars.ContextVar("leanpremise_mods", default=Mods())


def build_app(api: "LeanPremiseAPI") -> Any:
    from fastapi import FastAPI
    from pydantic import BaseModel

    class Premise(BaseModel):
        name: str
        decl: str

    class RetrievalRequest(BaseModel):
        state: str
        k: int
        new_premises: Optional[list[Premise]] = []
        imported_modules: Optional[list[Union[str, int]]] = None
        local_premises: Optional[list[Union[str, int]]] = None
        caller_in_module_system: bool = False
        imported_all_modules: Optional[list[Union[str, int]]] = None

    app = FastAPI()

    @app.post("/retrieve")
    async def retrieve(request: RetrievalRequest) -> list[dict[str, Any]]:
        k = min(request.k, K_MAX)
        if k <= 0:
            return []
        ranked = api.index.search(request.state.replace("⊢", " "), k)
        items = [{"score": round(float(score), 6), "name": row.name} for row, score in ranked]
        return finish_items(items, _mods.get(), api.name_key, api.drift_key)

    @app.get("/max-new-premises")
    async def max_new_premises() -> int:
        return MAX_NEW_PREMISES

    @app.get("/indexed-premises")
    async def indexed_premises() -> list[str]:
        return [row.name for row in api.index.rows]

    @app.get("/indexed-modules")
    async def indexed_modules() -> list[str]:
        return sorted({row.module for row in api.index.rows if row.module})

    return app


class LeanPremiseAPI(EngineAPI):
    error_key = "detail"
    drift_key = "premise"

    def __init__(self, index) -> None:
        super().__init__(index)
        self.app = build_app(self)

    def texts(self, req: Request) -> list[str]:
        import json

        try:
            state = json.loads(req.body).get("state")
        except (ValueError, UnicodeDecodeError, AttributeError):
            return []
        return [state] if isinstance(state, str) else []

    async def handle(self, req: Request, mods: Mods) -> Reply:
        token = _mods.set(mods)
        try:
            reply = await call_asgi(self.app, req)
        finally:
            _mods.reset(token)
        reply.served = req.path == "/retrieve" and reply.status == 200
        return reply

    def server_error(self, status: int) -> Reply:
        if status in (500, 503):
            return jreply(500, {"detail": "Internal Server Error: Embed service overloaded"})
        return super().server_error(status)
