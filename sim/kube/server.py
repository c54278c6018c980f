"""The Kubernetes REST protocol over a `ClusterStore`, for the real kubernetes-asyncio client."""

from __future__ import annotations

import datetime
import hmac
import json
import logging
import secrets
import ssl
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import trustme
import yaml
from aiohttp import web

from sim.kube.certificates import ca_data, server_context, test_ca
from sim.kube.objects import Stored, dumps
from sim.kube.store import ClusterStore
from sim.kube.types import ApiError, JsonObject, ResourceType

log = logging.getLogger(__name__)

STORE_KEY = web.AppKey("store", ClusterStore)
SERVER_VERSION: JsonObject = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.0-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-04-17T00:00:00Z",
    "goVersion": "go1.22.2",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_TRUE = ("true", "True", "1")
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_LIVENESS_CHECK_S = 5.0


def _json(status: int, body: Any) -> web.Response:
    return web.Response(status=status, body=dumps(body), content_type="application/json")


def _raw(status: int, data: bytes) -> web.Response:
    return web.Response(status=status, body=data, content_type="application/json")


def _error(error: ApiError) -> web.Response:
    return _json(error.status, error.to_status())


async def _read_json(request: web.Request) -> Any:
    data = await request.read()
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"invalid JSON body: {exc}") from exc


@dataclass(frozen=True, slots=True)
class _Target:
    """What a resource URL names."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    rest: list[str]


_MAX_SNAPSHOTS = 64


def _non_negative_int(value: str | None, name: str) -> int:
    if value is None or value == "":
        return 0
    if not value.isdigit():
        raise ApiError(400, "BadRequest", f"{name}: expected a non-negative integer")
    return int(value)


class _Api:
    """The single catch-all request handler."""

    def __init__(self, store: ClusterStore, token: str | None) -> None:
        self._store = store
        self._authorization = None if token is None else f"Bearer {token}"
        # Paged lists: a snapshot per first page, served by continue token (a consistent
        # snapshot, as the real API guarantees); the oldest are forgotten (→ 410 Expired).
        self._snapshots: OrderedDict[str, tuple[list[Stored], str]] = OrderedDict()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            if not self._authenticated(request):
                raise ApiError(401, "Unauthorized", "Unauthorized")
            return await self._route(request)
        except ApiError as error:
            return _error(error)
        except Exception:  # a bug in the emulator must reach the client as a 500 Status
            log.exception("kube_emulator_internal_error path=%s", request.path)
            return _error(ApiError(500, "InternalError", "internal error in the emulator"))

    def _authenticated(self, request: web.Request) -> bool:
        """The bearer token, or a client certificate the TLS handshake verified against the
        cluster's CA (as a real API server trusts its client CA)."""
        if self._authorization is None:
            return True
        if hmac.compare_digest(
            request.headers.get("Authorization", "").encode(), self._authorization.encode()
        ):
            return True
        transport = request.transport
        return transport is not None and bool(transport.get_extra_info("peercert"))

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = request.rel_url.raw_path.split("/")[1:]
        if parts and parts[-1] == "":
            parts.pop()
        head = parts[0] if parts else ""
        if head == "version" and len(parts) == 1:
            return _json(200, SERVER_VERSION)
        if head in ("healthz", "livez", "readyz") and len(parts) == 1:
            return web.Response(text="ok")
        if head == "api":
            if len(parts) == 1:
                return _json(200, self._api_versions(request))
            if parts[1] != "v1":
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            group, version, rest = "", "v1", parts[2:]
        elif head == "apis":
            if len(parts) == 1:
                return _json(200, self._group_list())
            if len(parts) == 2:
                return _json(200, self._group(unquote(parts[1])))
            group, version, rest = unquote(parts[1]), unquote(parts[2]), parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return _json(200, self._resource_list(group, version))
        return await self._resource(request, self._target(group, version, rest))

    def _target(self, group: str, version: str, rest: list[str]) -> _Target:
        namespace: str | None = None
        is_namespace_subresource = len(rest) == 3 and rest[2] in ("status", "finalize")
        if rest[0] == "namespaces" and len(rest) >= 3 and not is_namespace_subresource:
            namespace, rest = unquote(rest[1]), rest[2:]
        rtype = self._store.resolve(group, version, unquote(rest[0]))
        name = unquote(rest[1]) if len(rest) > 1 else None
        subresource = unquote(rest[2]) if len(rest) > 2 else None
        if (namespace is not None and not rtype.namespaced) or (
            namespace is None and rtype.namespaced and name is not None
        ):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return _Target(rtype, namespace, name, subresource, rest[3:])

    async def _resource(self, request: web.Request, target: _Target) -> web.StreamResponse:
        store, rtype, ns, name = self._store, target.rtype, target.namespace, target.name
        method = request.method
        store.faults.check(rtype, ns, _verb(method, name))
        if name is None:
            if method == "GET":
                if request.query.get("watch", "") in _TRUE:
                    return await self._watch(request, target)
                return self._list(request, target)
            if method == "POST":
                return _raw(201, store.create_raw(rtype, ns, await _read_json(request)).data)
            if method == "DELETE":
                deleted = store.delete_collection(
                    rtype,
                    ns,
                    label_selector=request.query.get("labelSelector"),
                    field_selector=request.query.get("fieldSelector"),
                )
                return self._list_body(rtype, deleted)
            raise _method_not_allowed(method)
        sub = target.subresource
        if sub is None or sub == "status":
            status_only = sub == "status"
            if method == "GET":
                return _raw(200, store.get_raw(rtype, ns, name).data)
            if method == "PUT":
                body = await _read_json(request)
                stored = store.replace_raw(rtype, ns, name, body, status_only=status_only)
                return _raw(200, stored.data)
            if method == "PATCH":
                stored = store.patch_raw(
                    rtype,
                    ns,
                    name,
                    await request.read(),
                    content_type=request.headers.get("Content-Type", ""),
                    status_only=status_only,
                )
                return _raw(200, stored.data)
            if method == "DELETE" and sub is None:
                options = await _read_json(request)
                preconditions = options.get("preconditions") if isinstance(options, dict) else None
                gone = store.delete_raw(rtype, ns, name, preconditions=preconditions)
                return _deleted(rtype, gone)
            raise _method_not_allowed(method)
        if rtype.key == ("", "v1", "pods") and sub == "log" and ns is not None:
            return await self._log(request, ns, name)
        if rtype.key == ("", "v1", "services") and sub == "proxy" and ns is not None:
            handler = store.resolve_proxy(ns, name)
            path = "/".join(unquote(part) for part in target.rest).lstrip("/")
            return await handler(request, path)
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _list(self, request: web.Request, target: _Target) -> web.Response:
        limit = _non_negative_int(request.query.get("limit"), "limit")
        token = request.query.get("continue")
        if token:
            snapshot_id, _, offset_text = token.partition(":")
            snapshot = self._snapshots.get(snapshot_id)
            if snapshot is None or not offset_text.isdigit():
                raise ApiError(410, "Expired", "the provided continue parameter is too old")
            items, rv = snapshot
            offset = int(offset_text)
        else:
            items = self._store.list_raw(
                target.rtype,
                target.namespace,
                label_selector=request.query.get("labelSelector"),
                field_selector=request.query.get("fieldSelector"),
            )
            rv, offset = str(self._store.resource_version), 0
        if not limit or offset + limit >= len(items):
            return self._list_body(target.rtype, items[offset:], rv=rv)
        if not token:
            snapshot_id = secrets.token_hex(8)
            self._snapshots[snapshot_id] = (items, rv)
            while len(self._snapshots) > _MAX_SNAPSHOTS:
                self._snapshots.popitem(last=False)
        page = items[offset : offset + limit]
        following = f"{snapshot_id}:{offset + limit}"
        return self._list_body(target.rtype, page, rv=rv, following=following)

    def _list_body(
        self,
        rtype: ResourceType,
        items: list[Stored],
        *,
        rv: str | None = None,
        following: str | None = None,
    ) -> web.Response:
        metadata: JsonObject = {"resourceVersion": rv or str(self._store.resource_version)}
        if following:
            metadata["continue"] = following
        head = dumps(
            {"apiVersion": rtype.api_version, "kind": rtype.list_kind, "metadata": metadata}
        )
        body = head[:-1] + b',"items":[' + b",".join(item.data for item in items) + b"]}"
        return _raw(200, body)

    async def _watch(self, request: web.Request, target: _Target) -> web.StreamResponse:
        query = request.query
        timeout: float | None = None
        if query.get("timeoutSeconds"):
            try:
                timeout = float(query["timeoutSeconds"])
            except ValueError as exc:
                raise ApiError(400, "BadRequest", "invalid timeoutSeconds") from exc
        try:
            stream = self._store.open_watch(
                target.rtype,
                target.namespace,
                resource_version=query.get("resourceVersion"),
                label_selector=query.get("labelSelector"),
                field_selector=query.get("fieldSelector"),
                timeout=timeout,
                bookmarks=query.get("allowWatchBookmarks", "") in _TRUE,
            )
        except ApiError as error:
            if error.status != 410:
                raise
            # The API server answers 200 and reports an expired resourceVersion in the stream.
            response = await self._start_stream(request, "application/json")
            line = dumps({"type": "ERROR", "object": error.to_status()}) + b"\n"
            await _finish(response, line)
            return response
        response = await self._start_stream(request, "application/json")
        try:
            while (batch := await stream.next_batch(_LIVENESS_CHECK_S)) is not None:
                if batch:
                    await response.write(b"".join(batch))
                elif request.transport is None or request.transport.is_closing():
                    break
        except ConnectionError:
            return response  # the client went away
        finally:
            stream.close()
        await _finish(response)
        return response

    async def _log(self, request: web.Request, namespace: str, pod: str) -> web.StreamResponse:
        query = request.query
        follow = query.get("follow", "") in _TRUE
        tail: int | None = None
        if query.get("tailLines"):
            try:
                tail = int(query["tailLines"])
            except ValueError as exc:
                raise ApiError(400, "BadRequest", "invalid tailLines") from exc
        log_ = self._store.open_log(namespace, pod, query.get("container") or None)
        if not follow:
            lines = [line async for line in log_.read(follow=False, tail_lines=tail)]
            text = "".join(f"{line}\n" for line in lines)
            return web.Response(text=text, content_type="text/plain")
        response = await self._start_stream(request, "text/plain")
        try:
            async for line in log_.read(follow=True, tail_lines=tail):
                await response.write(f"{line}\n".encode())
        except ConnectionError:
            return response
        await _finish(response)
        return response

    @staticmethod
    async def _start_stream(request: web.Request, content_type: str) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": content_type})
        response.enable_chunked_encoding()
        await response.prepare(request)
        return response

    # -- discovery ----------------------------------------------------------------------------

    @staticmethod
    def _api_versions(request: web.Request) -> JsonObject:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}
            ],
        }

    def _group_versions(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for rtype in self._store.types():
            if rtype.group:
                versions = groups.setdefault(rtype.group, [])
                if rtype.version not in versions:
                    versions.append(rtype.version)
        return groups

    def _group(self, name: str) -> JsonObject:
        versions = self._group_versions().get(name)
        if not versions:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(name, versions)}

    def _group_list(self) -> JsonObject:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [_group_entry(g, vs) for g, vs in sorted(self._group_versions().items())],
        }

    def _resource_list(self, group: str, version: str) -> JsonObject:
        resources: list[JsonObject] = []
        for rtype in self._store.types():
            if rtype.group != group or rtype.version != version:
                continue
            # Subresources carry an empty singularName, as the API server sends them.
            base = {"singularName": "", "namespaced": rtype.namespaced, "kind": rtype.kind}
            resources.append(
                {**base, "name": rtype.plural, "singularName": rtype.kind.lower(), "verbs": _VERBS}
            )
            resources.append({"name": f"{rtype.plural}/status", **base, "verbs": _STATUS_VERBS})
            if rtype.key == ("", "v1", "pods"):
                resources.append({"name": "pods/log", **base, "verbs": ["get"]})
            if rtype.key == ("", "v1", "services"):
                resources.append(
                    {
                        "name": "services/proxy",
                        **base,
                        "verbs": ["create", "delete", "get", "patch", "update"],
                    }
                )
        if not resources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        group_version = f"{group}/{version}" if group else version
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": resources,
        }


_STATUS_VERBS = ["get", "patch", "update"]


def _group_entry(name: str, versions: list[str]) -> JsonObject:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def _deleted(rtype: ResourceType, deleted: Stored) -> web.Response:
    """Built-in types answer an immediate delete with a success Status, custom resources and
    deletions held by finalizers with the object, as the API server does."""
    meta = deleted.meta
    if not rtype.custom and not meta.get("finalizers"):
        details = {"name": meta["name"], "group": rtype.group, "kind": rtype.plural}
        details["uid"] = meta.get("uid", "")
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        return _json(200, {**status, "details": details})
    return _raw(200, deleted.data)


def _verb(method: str, name: str | None) -> str:
    """The request's verb as RBAC names it (a watch counts as a list)."""
    if method == "GET":
        return "get" if name is not None else "list"
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    return verbs.get(method, method.lower())


def _method_not_allowed(method: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method: {method}")


async def _finish(response: web.StreamResponse, last: bytes = b"") -> None:
    try:
        if last:
            await response.write(last)
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away first


def create_app(store: ClusterStore, *, token: str | None = None) -> web.Application:
    """An aiohttp application serving `store`; requires `Bearer <token>` when given."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[STORE_KEY] = store
    app.router.add_route("*", "/{tail:.*}", _Api(store, token).handle)

    async def end_streams(_: web.Application) -> None:
        store.close_streams()

    app.on_shutdown.append(end_streams)
    return app


@dataclass
class RunningCluster:
    """An emulated cluster served on a local port (over TLS unless started with tls=False)."""

    name: str
    store: ClusterStore
    url: str
    token: str
    kubeconfig: str
    _runner: web.AppRunner = field(repr=False)
    ca: trustme.CA | None = None  # the CA of its serving certificate; None over plain HTTP

    @property
    def kube_system_uid(self) -> str:
        return self.store.kube_system_uid

    @property
    def kubeconfig_dict(self) -> JsonObject:
        config: JsonObject = yaml.safe_load(self.kubeconfig)
        return config

    async def stop(self) -> None:
        await self._runner.cleanup()


def kubeconfig_yaml(
    name: str,
    url: str,
    token: str | None,
    *,
    ca: trustme.CA | None = None,
    client_cert: tuple[str, str] | None = None,
    tls_server_name: str | None = None,
) -> str:
    """A kubeconfig for `url`, its context named `name`: bearer-token auth (or a client
    certificate: (certificate data, key data)), trusting `ca` when given."""
    cluster: JsonObject = {"server": url}
    if ca is not None:
        cluster["certificate-authority-data"] = ca_data(ca)
    if tls_server_name is not None:
        cluster["tls-server-name"] = tls_server_name
    user: JsonObject = {}
    if token is not None:
        user["token"] = token
    if client_cert is not None:
        user["client-certificate-data"], user["client-key-data"] = client_cert
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": f"{name}-user", "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-user"}}],
        "current-context": name,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


async def start_cluster(
    name: str,
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    store: ClusterStore | None = None,
    token: str | None = None,
    kube_system_uid: str | None = None,
    bookmark_interval: float = 1.0,
    tls: bool = True,
    ca: trustme.CA | None = None,
    certificate_expires: datetime.datetime | None = None,
) -> RunningCluster:
    """Serve a new (or the given) cluster store on `host:port` (0 picks a free port).

    Over TLS by default, with a certificate for `host` and localhost from `ca` (the process's
    test CA when None); `certificate_expires` in the past serves an expired one.
    """
    if store is None:
        store = ClusterStore(
            name, kube_system_uid=kube_system_uid, bookmark_interval=bookmark_interval
        )
    token = token or secrets.token_urlsafe(24)
    ssl_context: ssl.SSLContext | None = None
    if tls:
        ca = ca or test_ca()
        hosts = tuple(dict.fromkeys((host, "localhost")))
        ssl_context = server_context(ca, hosts, not_after=certificate_expires)
    else:
        ca = None
    runner = web.AppRunner(
        create_app(store, token=token), access_log=None, handle_signals=False, shutdown_timeout=1.0
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    bound_port = runner.addresses[0][1]
    url = f"{'https' if tls else 'http'}://{host}:{bound_port}"
    return RunningCluster(
        name=name,
        store=store,
        url=url,
        token=token,
        kubeconfig=kubeconfig_yaml(name, url, token, ca=ca),
        _runner=runner,
        ca=ca,
    )
