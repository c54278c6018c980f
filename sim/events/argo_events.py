"""Argo Events on an emulated cluster: webhook event sources served on a real HTTP server, and
sensors whose ``argoWorkflow`` triggers submit workflows as their service account would.

What it follows (argo-events 6478ece):

- every ``spec.webhook`` entry of every ``EventSource`` in the store is served at its
  ``endpoint`` on one aiohttp server (upstream: one HTTP server per port in the event source's
  pod, behind its Service); an EventSource written, changed or deleted is served so at once
  (upstream: after its pod rolls);
- the checks of ``pkg/eventsources/common/webhook``: with an ``authSecret``, the Secret is read
  again on every request (a missing one is a 500), a header without ``Bearer `` is a 401
  ``Invalid Authorization Header``, another token a 401 ``Invalid Auth token``; then a method
  other than the entry's is a 400, a body over ``maxPayloadSize`` (default 1 MiB) a 400, a POST
  body that is not JSON a 400 (forms become ``{key: [values]}``, a GET's query likewise);
  ``Authorization`` is masked in the event. The event, ``{header, body, metadata}``, is put on
  the bus (an in-process queue) and the answer is 200 only then;
- the sensor side (``pkg/sensors``): each sensor of the event source's namespace depending on
  that event source and event fires each trigger whose ``conditions`` name the dependency (or,
  without conditions, a sensor of that one dependency); an ``argoWorkflow`` ``submit`` takes
  ``source.resource``, resolves each parameter's ``dataKey`` over the event (gjson, falling back
  to ``value``; neither is a failed trigger), writes it at ``dest`` (sjson), labels the workflow
  ``events.argoproj.io/sensor``, ``/trigger`` and ``/action-timestamp``, and submits it as Argo's
  CLI does: labelled with ``--instanceid``'s value, or with the label removed without one, in
  the resource's namespace (else the sensor's), after checking the template it references exists;
- the sensor's service account (``spec.template.serviceAccountName``) may create only where a
  RoleBinding in the target namespace names it (the chart's roles are not in the emulator, so
  the binding stands for the grant); elsewhere the trigger fails as Kubernetes would refuse it.

Delivery is at most once, as upstream: a trigger that fails is recorded (``fired``) and logged,
never retried. ``drain()`` waits until the bus is empty and every trigger has been tried, which
is how tests wait for a sensor without sleeping. Other trigger types and operations fail.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import structlog
from aiohttp import web

from sim.argo.restrictions import label_instance
from sim.events import paths
from sim.kube.store import ClusterStore
from sim.kube.types import ApiError, WatchEvent
from sim.ports import free_port

log = structlog.get_logger("sim.events")

DEFAULT_MAX_PAYLOAD = 1_048_576
MASKED = "*** Masked Auth Secret ***"
LABEL_SENSOR = "events.argoproj.io/sensor"
LABEL_TRIGGER = "events.argoproj.io/trigger"
LABEL_ACTION_TIMESTAMP = "events.argoproj.io/action-timestamp"


@dataclass(frozen=True, slots=True)
class Route:
    """One served webhook entry."""

    namespace: str
    source: str
    event: str
    method: str
    secret: tuple[str, str] | None  # (name, key) of the authSecret
    max_payload: int
    metadata: Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class Fired:
    """What one trigger did with one event: the workflow it created, or why it failed."""

    sensor: str
    trigger: str
    namespace: str | None = None
    workflow: str | None = None
    error: str | None = None


class ArgoEventsSim:
    """Argo Events' event sources and sensors on one emulated cluster (see the module)."""

    def __init__(self, store: ClusterStore, *, host: str = "127.0.0.1") -> None:
        self.store = store
        self.host = host
        self.port = 0
        self.fired: list[Fired] = []
        self._routes: dict[str, Route] = {}
        self._bus: asyncio.Queue[tuple[Route, dict[str, Any]]] = asyncio.Queue()
        self._runner: web.AppRunner | None = None
        self._consumer: asyncio.Task[None] | None = None
        self._types = {
            plural: store.resolve(group, version, plural)
            for group, version, plural in (
                ("argoproj.io", "v1alpha1", "eventsources"),
                ("argoproj.io", "v1alpha1", "sensors"),
                ("argoproj.io", "v1alpha1", "workflows"),
                ("argoproj.io", "v1alpha1", "workflowtemplates"),
                ("", "v1", "secrets"),
                ("rbac.authorization.k8s.io", "v1", "rolebindings"),
            )
        }
        self._unsubscribe = store.subscribe(self._on_change)
        self._reroute()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self._consumer = asyncio.create_task(self._consume(), name="sim-argo-events-sensors")

    async def stop(self) -> None:
        self._unsubscribe()
        if self._consumer is not None:
            self._consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._consumer
        if self._runner is not None:
            await self._runner.cleanup()

    async def drain(self) -> None:
        """Until every event on the bus has been handed to its sensors' triggers."""
        await self._bus.join()

    # -- event sources ------------------------------------------------------------------------
    def _on_change(self, event: WatchEvent, rtype: Any) -> None:
        if rtype is self._types["eventsources"]:
            self._reroute()

    def _reroute(self) -> None:
        routes: dict[str, Route] = {}
        items, _ = self.store.list(self._types["eventsources"], None)
        for source in items:
            metadata = source.get("metadata") or {}
            webhooks = (source.get("spec") or {}).get("webhook") or {}
            for event, entry in webhooks.items() if isinstance(webhooks, dict) else ():
                if not isinstance(entry, dict) or not isinstance(entry.get("endpoint"), str):
                    continue
                secret = entry.get("authSecret")
                routes[entry["endpoint"]] = Route(
                    namespace=metadata["namespace"],
                    source=metadata["name"],
                    event=str(event),
                    method=str(entry.get("method") or "POST"),
                    secret=(secret["name"], secret["key"]) if isinstance(secret, dict) else None,
                    max_payload=int(entry.get("maxPayloadSize") or DEFAULT_MAX_PAYLOAD),
                    metadata=entry.get("metadata"),
                )
        self._routes = routes

    def _token(self, route: Route) -> str | None:
        assert route.secret is not None
        name, key = route.secret
        try:
            secret = self.store.get(self._types["secrets"], route.namespace, name)
        except ApiError:
            return None
        encoded = (secret.get("data") or {}).get(key)
        return base64.b64decode(encoded).decode() if isinstance(encoded, str) else None

    async def _handle(self, request: web.Request) -> web.Response:
        route = self._routes.get(request.path)
        if route is None:
            return web.Response(status=404, text="404 page not found")
        if route.secret is not None:
            token = self._token(route)  # read again on every request, as upstream
            if token is None:
                return web.Response(status=500, text="Error loading auth token")
            header = request.headers.get("Authorization", "")
            if not header.startswith("Bearer "):
                return web.Response(status=401, text="Invalid Authorization Header")
            if header.removeprefix("Bearer ") != token:
                return web.Response(status=401, text="Invalid Auth token")
        if request.method != route.method:
            return web.Response(status=400, text="http method does not match")
        try:
            body = await self._body(request, route)
        except ValueError as error:
            return web.Response(status=400, text=str(error))
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            canonical = "-".join(part.capitalize() for part in name.split("-"))
            headers.setdefault(canonical, []).append(value)
        if "Authorization" in headers:
            headers["Authorization"] = [MASKED]
        event = {"header": headers, "body": body, "metadata": route.metadata}
        await self._bus.put((route, event))
        return web.Response(text="success")

    @staticmethod
    async def _body(request: web.Request, route: Route) -> Any:
        if request.method == "GET":
            return {key: values for key, values in parse_qs(request.query_string).items()}
        raw = await request.content.read(route.max_payload + 1)
        if len(raw) > route.max_payload:
            raise ValueError("failed to parse request body, http: request body too large")
        if request.headers.get("Content-Type") == "application/x-www-form-urlencoded":
            return {key: values for key, values in parse_qs(raw.decode()).items()}
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise ValueError("json: error calling MarshalJSON for type *json.RawMessage") from None

    # -- sensors ------------------------------------------------------------------------------
    async def _consume(self) -> None:
        while True:
            route, event = await self._bus.get()
            try:
                self._deliver(route, event)
            except Exception:  # a sensor's failure never stops the bus
                log.exception("sim_sensor_failed", source=route.source, event_name=route.event)
            finally:
                self._bus.task_done()

    def _deliver(self, route: Route, event: dict[str, Any]) -> None:
        sensors, _ = self.store.list(self._types["sensors"], route.namespace)
        for sensor in sensors:
            spec = sensor.get("spec") or {}
            dependencies = [
                dep
                for dep in spec.get("dependencies") or []
                if dep.get("eventSourceName") == route.source
                and dep.get("eventName") == route.event
            ]
            for dependency in dependencies:
                for trigger in spec.get("triggers") or []:
                    if self._conditioned(trigger, dependency["name"], spec):
                        self.fired.append(self._fire(sensor, trigger, dependency["name"], event))

    @staticmethod
    def _conditioned(trigger: Mapping[str, Any], dependency: str, spec: Mapping[str, Any]) -> bool:
        conditions = (trigger.get("template") or {}).get("conditions")
        if not conditions:  # all dependencies, and-ed: only a sensor of this one fires
            return len(spec.get("dependencies") or []) == 1
        if "&&" in conditions:
            return False  # waits for another event too: not simulated
        return dependency in (part.strip(" ()") for part in conditions.split("||"))

    def _fire(
        self, sensor: dict[str, Any], trigger: Mapping[str, Any], dependency: str, event: Any
    ) -> Fired:
        sensor_name = sensor["metadata"]["name"]
        template = trigger.get("template") or {}
        name = str(template.get("name"))
        try:
            namespace, workflow = self._submit(sensor, template, dependency, event)
        except (ValueError, KeyError, TypeError, ApiError) as error:
            message = error.message if isinstance(error, ApiError) else str(error)
            log.warning("sim_trigger_failed", sensor=sensor_name, trigger=name, error=message)
            return Fired(sensor_name, name, error=message)
        log.info("sim_trigger_submitted", sensor=sensor_name, trigger=name, workflow=workflow)
        return Fired(sensor_name, name, namespace=namespace, workflow=workflow)

    def _submit(
        self, sensor: dict[str, Any], template: Mapping[str, Any], dependency: str, event: Any
    ) -> tuple[str, str]:
        action = template.get("argoWorkflow")
        if not isinstance(action, dict):
            raise ValueError("only argoWorkflow triggers are simulated")
        if (action.get("operation") or "submit") != "submit":
            raise ValueError(f"operation {action.get('operation')!r} is not simulated")
        workflow = copy.deepcopy(action["source"]["resource"])
        if not isinstance(workflow, dict):
            raise ValueError("source.resource: expected an object")
        for parameter in action.get("parameters") or []:
            src = parameter["src"]
            if src.get("dependencyName") != dependency:
                continue  # upstream: that dependency's event is missing here, so no value
            found, value = paths.get(event, src["dataKey"])
            if found:
                text = paths.value_text(value)
            elif isinstance(src.get("value"), str):
                text = src["value"]
            else:
                raise ValueError(f"unable to resolve '{dependency}' parameter value")
            paths.set_path(workflow, parameter["dest"], text)
        metadata = workflow.setdefault("metadata", {})
        labels = metadata.setdefault("labels", {})
        labels[LABEL_SENSOR] = sensor["metadata"]["name"]
        labels[LABEL_TRIGGER] = str(template.get("name"))
        labels[LABEL_ACTION_TIMESTAMP] = str(int(time.time() * 1000))
        args = list(action.get("args") or [])
        instance = args[args.index("--instanceid") + 1] if "--instanceid" in args else None
        label_instance(workflow, instance)  # what Argo's CLI does to what it submits
        namespace = metadata.get("namespace") or sensor["metadata"]["namespace"]
        account = (sensor.get("spec") or {}).get("template", {}).get("serviceAccountName")
        self._authorize(str(account or "default"), sensor["metadata"]["namespace"], namespace)
        reference = (workflow.get("spec") or {}).get("workflowTemplateRef") or {}
        if reference.get("name"):  # the CLI validates the workflow against its template
            self.store.get(self._types["workflowtemplates"], namespace, reference["name"])
        created = self.store.create(self._types["workflows"], namespace, workflow)
        return namespace, created["metadata"]["name"]

    def _authorize(self, account: str, account_namespace: str, namespace: str) -> None:
        bindings, _ = self.store.list(self._types["rolebindings"], namespace)
        for binding in bindings:
            for subject in binding.get("subjects") or []:
                if (
                    subject.get("kind") == "ServiceAccount"
                    and subject.get("name") == account
                    and subject.get("namespace") == account_namespace
                ):
                    return
        raise ApiError(
            403,
            "Forbidden",
            f'workflows.argoproj.io is forbidden: User "system:serviceaccount:'
            f'{account_namespace}:{account}" cannot create resource "workflows" in API group '
            f'"argoproj.io" in the namespace "{namespace}"',
        )
