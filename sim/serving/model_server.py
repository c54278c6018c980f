"""One revision's model server: KServe's v1 protocol on an aiohttp server of its own
(127.0.0.1, a free port), as kserve's `model_server.py` answers it.

- `GET /v1/models/<name>`: `{"name", "ready": true}`; `GET /` and `/v2/health/live`: alive.
- `POST /v1/models/<name>:predict` with `{"instances": [...]}`: `{"predictions": [...]}`; an
  unknown model 404 `{"error": "Model with name <name> does not exist."}`; bad input 400
  `{"error": ...}`.
"""

from __future__ import annotations

import json

from aiohttp import web

from sim.serving.model import InvalidInput, LinearModel


class ModelServer:
    """Serves one loaded model under the ISVC's name (KServe's `--model_name`)."""

    def __init__(self, *, name: str, model: LinearModel, revision: str) -> None:
        self.name = name
        self.model = model
        self.revision = revision
        self.requests = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._live)
        app.router.add_get("/v2/health/live", self._live)
        app.router.add_get("/v1/models/{model}", self._ready)
        app.router.add_post("/v1/models/{model}:predict", self._predict)
        return app

    async def start(self, host: str = "127.0.0.1") -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _unknown(self, name: str) -> web.Response:
        return web.json_response({"error": f"Model with name {name} does not exist."}, status=404)

    async def _live(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def _ready(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.name:
            return self._unknown(name)
        return web.json_response({"name": self.name, "ready": True})

    async def _predict(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.name:
            return self._unknown(name)
        self.requests += 1
        try:
            body = json.loads(await request.read())
        except (UnicodeDecodeError, json.JSONDecodeError):
            return web.json_response({"error": "Unrecognized request format"}, status=400)
        if not isinstance(body, dict) or "instances" not in body:
            return web.json_response(
                {"error": 'Expected "instances" or "inputs" in the request body'}, status=400
            )
        try:
            predictions = self.model.predict(body["instances"])
        except InvalidInput as error:
            return web.json_response({"error": str(error)}, status=400)
        return web.json_response({"predictions": predictions})
