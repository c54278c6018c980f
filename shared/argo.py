"""The Argo server client, reached through a cluster's Kubernetes API service proxy.

We never call an Argo server URL directly: every request goes to
``/api/v1/namespaces/{ns}/services/{scheme}:{service}:{port}/proxy/api/v1/...`` on the cluster's
API server with the cluster's own credentials, so one kubeconfig per cluster is all we hold.

Argo answers errors as gRPC-gateway JSON ``{"code": <grpc code>, "message": ...}``. Argo wraps
most refusals that depend on a workflow's state (set on a node that is not suspended, resume
with nothing to resume) as gRPC Internal, HTTP 500; those become ``ArgoRefused`` (a Conflict)
with Argo's message, not "dependency down". A ``Status`` body comes from the Kubernetes API
server itself (no endpoints, RBAC on ``services/proxy``): the Argo server is unreachable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

import aiohttp
import structlog
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from shared.errors import (
    ConfigError,
    Conflict,
    DependencyDown,
    Invalid,
    NotFound,
    WorkflowManagerError,
)
from shared.k8s import retry_after

log = structlog.get_logger(__name__)

Json = dict[str, Any]
SETTABLE_PHASES = frozenset({"Succeeded", "Failed", "Error", ""})


class ArgoRefused(Conflict):
    """Argo refused an action in the workflow's current state; the message is Argo's."""


class ServiceRef(NamedTuple):
    scheme: str
    service: str
    namespace: str
    port: str


# --- pure helpers ---------------------------------------------------------------------------
def parse_service_url(url: str) -> ServiceRef:
    """``https://argo-data-server.kubeopera-argo-data.svc:2746`` -> the Service it names.

    Purely computational. The host is ``<service>.<namespace>[.svc[.<cluster domain>]]``;
    without a port the scheme's default is used. Raises ConfigError for anything else.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{url!r}: expected an http:// or https:// URL of a Service")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ConfigError(f"{url!r}: a Service URL carries no credentials, query or fragment")
    if parts.path not in ("", "/"):
        raise ConfigError(f"{url!r}: a Service URL has no path")
    labels = (parts.hostname or "").split(".")
    if len(labels) < 2 or not all(labels) or (len(labels) > 2 and labels[2] != "svc"):
        raise ConfigError(f"{url!r}: expected a host <service>.<namespace>[.svc[.<domain>]]")
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{url!r}: the port is not a number") from exc
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return ServiceRef(scheme=parts.scheme, service=labels[0], namespace=labels[1], port=str(port))


def proxy_prefix(ref: ServiceRef) -> str:
    """The API server path proxying to ``ref``. Purely computational."""
    return (
        f"/api/v1/namespaces/{quote(ref.namespace, safe='')}/services/"
        f"{ref.scheme}:{quote(ref.service, safe='')}:{quote(ref.port, safe='')}/proxy"
    )


def workflow_path(namespace: str, name: str, action: str) -> str:
    return f"/api/v1/workflows/{quote(namespace, safe='')}/{quote(name, safe='')}/{action}"


def _parameters(parameters: Mapping[str, str] | None) -> list[str]:
    return [f"{key}={value}" for key, value in (parameters or {}).items()]


def retry_body(
    *,
    restart_successful: bool = False,
    node_field_selector: str | None = None,
    parameters: Mapping[str, str] | None = None,
) -> Json:
    """Body of ``PUT .../retry``. Purely computational."""
    body: Json = {"restartSuccessful": restart_successful}
    if node_field_selector:
        body["nodeFieldSelector"] = node_field_selector
    if parameters:
        body["parameters"] = _parameters(parameters)
    return body


def resubmit_body(*, memoized: bool = False, parameters: Mapping[str, str] | None = None) -> Json:
    """Body of ``PUT .../resubmit``. Purely computational."""
    body: Json = {"memoized": memoized}
    if parameters:
        body["parameters"] = _parameters(parameters)
    return body


def set_body(
    *,
    node_field_selector: str,
    phase: str,
    message: str | None = None,
    output_parameters: Mapping[str, str] | None = None,
) -> Json:
    """Body of ``PUT .../set``; output parameters travel as a JSON object encoded as a string.

    Purely computational. Raises Invalid for a phase Argo cannot set or a non-string value.
    """
    if not node_field_selector:
        raise Invalid("setting a node needs a node field selector")
    if phase not in SETTABLE_PHASES:
        raise Invalid(f"phase {phase!r} cannot be set: use Succeeded, Failed, Error or ''")
    body: Json = {"nodeFieldSelector": node_field_selector, "phase": phase}
    if message is not None:
        body["message"] = message
    if output_parameters is not None:
        bad = sorted(key for key, value in output_parameters.items() if not isinstance(value, str))
        if bad:
            raise Invalid(f"output parameter values must be strings: {', '.join(bad)}")
        body["outputParameters"] = json.dumps(dict(output_parameters), separators=(",", ":"))
    return body


def resume_body(*, node_field_selector: str | None = None) -> Json:
    """Body of ``PUT .../resume``. Purely computational."""
    return {"nodeFieldSelector": node_field_selector} if node_field_selector else {}


def stop_body(*, node_field_selector: str | None = None, message: str | None = None) -> Json:
    """Body of ``PUT .../stop``. Purely computational."""
    body: Json = {}
    if node_field_selector:
        body["nodeFieldSelector"] = node_field_selector
    if message is not None:
        body["message"] = message
    return body


# gRPC status codes as Argo's gRPC gateway reports them in the JSON body.
_INVALID_CODES = frozenset({3, 11})  # InvalidArgument, OutOfRange
_CONFLICT_CODES = frozenset({6, 10})  # AlreadyExists, Aborted
_REFUSAL_CODES = frozenset({2, 9, 13})  # Unknown, FailedPrecondition, Internal
_NOT_FOUND = 5


def translate_argo_error(
    status: int,
    body: str | bytes | None,
    *,
    headers: Mapping[str, str] | None = None,
    refusal: type[WorkflowManagerError] = ArgoRefused,
) -> WorkflowManagerError:
    """The shared error for an unsuccessful answer on the proxy path. Purely computational.

    ``refusal`` is what Argo's state refusals become (lint passes Invalid: the document is bad).
    """
    doc: Any = None
    if body:
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            doc = None
    details: Json = {"http_status": status}
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        # The Kubernetes API server answered, not Argo: it could not (or may not) reach it.
        message = doc.get("message") or f"HTTP {status}"
        details["reason"] = doc.get("reason")
        return DependencyDown(
            f"the Argo server could not be reached through the cluster: {message}",
            details=details,
            delay=retry_after(headers),
        )
    if isinstance(doc, dict) and isinstance(doc.get("code"), int):
        code: int = doc["code"]
        message = str(doc.get("message") or doc.get("error") or f"HTTP {status}")
        details["argo_code"] = code
        if code in _INVALID_CODES:
            return Invalid(message, details=details)
        if code == _NOT_FOUND:
            return NotFound(message, details=details)
        if code in _CONFLICT_CODES:
            return Conflict(message, details=details)
        if code in _REFUSAL_CODES:
            return refusal(message, details=details)
        # Canceled, DeadlineExceeded, PermissionDenied, ResourceExhausted, Unimplemented,
        # Unavailable, DataLoss, Unauthenticated: retry later or an operator must act.
        return DependencyDown(f"the Argo server failed: {message}", details=details)
    # Neither Argo nor the API server's own JSON: something in between answered.
    if status in (400, 422):
        return Invalid(f"the Argo server refused the request (HTTP {status})", details=details)
    if status == 409:
        return Conflict(f"the Argo server reported a conflict (HTTP {status})", details=details)
    return DependencyDown(
        f"the Argo server could not be reached (HTTP {status})",
        details=details,
        delay=retry_after(headers),
    )


# --- the client -----------------------------------------------------------------------------
class ArgoServer:
    """Argo server routes we call, through the Kubernetes API service proxy of one cluster."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        namespace: str = "argo",
        service: str = "argo-server",
        port: str = "2746",
        scheme: str = "https",
        timeout: float = 30.0,
    ) -> None:
        self._api = api_client
        self.ref = ServiceRef(scheme=scheme, service=service, namespace=namespace, port=port)
        self._prefix = proxy_prefix(self.ref)
        self._timeout = timeout

    @classmethod
    def from_url(cls, api_client: ApiClient, url: str, *, timeout: float = 30.0) -> ArgoServer:
        """The server a Service URL such as ``settings.ARGO_DATA_SERVER_URL`` names."""
        ref = parse_service_url(url)
        return cls(
            api_client,
            namespace=ref.namespace,
            service=ref.service,
            port=ref.port,
            scheme=ref.scheme,
            timeout=timeout,
        )

    async def get(self, namespace: str, name: str) -> Json:
        """The workflow as the Argo server shows it: its nodes hydrated from the controller's
        database when offloaded, decompressed when compressed. NotFound when it is gone."""
        path = f"/api/v1/workflows/{quote(namespace, safe='')}/{quote(name, safe='')}"
        return await self._call("GET", path, None)

    async def retry(
        self,
        namespace: str,
        name: str,
        *,
        restart_successful: bool = False,
        node_field_selector: str | None = None,
        parameters: Mapping[str, str] | None = None,
    ) -> Json:
        """Retry a Failed/Error workflow in place; returns the workflow."""
        body = retry_body(
            restart_successful=restart_successful,
            node_field_selector=node_field_selector,
            parameters=parameters,
        )
        return await self._call("PUT", workflow_path(namespace, name, "retry"), body)

    async def resubmit(
        self,
        namespace: str,
        name: str,
        *,
        memoized: bool = False,
        parameters: Mapping[str, str] | None = None,
    ) -> Json:
        """Submit a new workflow from this one; returns the new workflow."""
        body = resubmit_body(memoized=memoized, parameters=parameters)
        return await self._call("PUT", workflow_path(namespace, name, "resubmit"), body)

    async def set_node(
        self,
        namespace: str,
        name: str,
        *,
        node_field_selector: str,
        phase: str,
        message: str | None = None,
        output_parameters: Mapping[str, str] | None = None,
    ) -> Json:
        """Set the phase (and supplied output parameters) of matching suspend nodes."""
        body = set_body(
            node_field_selector=node_field_selector,
            phase=phase,
            message=message,
            output_parameters=output_parameters,
        )
        return await self._call("PUT", workflow_path(namespace, name, "set"), body)

    async def resume(
        self, namespace: str, name: str, *, node_field_selector: str | None = None
    ) -> Json:
        """Resume the workflow, or only the matching suspend nodes."""
        body = resume_body(node_field_selector=node_field_selector)
        return await self._call("PUT", workflow_path(namespace, name, "resume"), body)

    async def stop(
        self,
        namespace: str,
        name: str,
        *,
        node_field_selector: str | None = None,
        message: str | None = None,
    ) -> Json:
        """Stop: run nothing more except exit handlers."""
        body = stop_body(node_field_selector=node_field_selector, message=message)
        return await self._call("PUT", workflow_path(namespace, name, "stop"), body)

    async def terminate(self, namespace: str, name: str) -> Json:
        """Terminate: run nothing more, exit handlers included."""
        return await self._call("PUT", workflow_path(namespace, name, "terminate"), {})

    async def lint_template(self, namespace: str, template: Mapping[str, Any]) -> Json:
        """Argo's own validation of a WorkflowTemplate; Invalid carries its message."""
        path = f"/api/v1/workflow-templates/{quote(namespace, safe='')}/lint"
        body: Json = {"namespace": namespace, "template": dict(template)}
        return await self._call("POST", path, body, refusal=Invalid)

    async def lint_workflow(self, namespace: str, workflow: Mapping[str, Any]) -> Json:
        """Argo's own validation of a Workflow; Invalid carries its message."""
        path = f"/api/v1/workflows/{quote(namespace, safe='')}/lint"
        body: Json = {"namespace": namespace, "workflow": dict(workflow)}
        return await self._call("POST", path, body, refusal=Invalid)

    async def version(self) -> Json:
        """The Argo server's version document (a cheap reachability check)."""
        return await self._call("GET", "/api/v1/version", None)

    async def _call(
        self,
        method: str,
        path: str,
        body: Json | None,
        *,
        refusal: type[WorkflowManagerError] = ArgoRefused,
    ) -> Json:
        log.debug("argo_request", method=method, path=path, service=self.ref.service)
        try:
            result: Any = await self._api.call_api(
                self._prefix + path,
                method,
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                response_types_map={200: "object"},
                _return_http_data_only=True,
                _request_timeout=self._timeout,
            )
        except ApiException as exc:
            error = translate_argo_error(
                int(exc.status or 0), exc.body, headers=exc.headers, refusal=refusal
            )
            log.info(
                "argo_request_failed",
                method=method,
                path=path,
                error=error.code,
                http_status=exc.status,
            )
            raise error from exc
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise DependencyDown(
                "the cluster's API server could not be reached",
                details={"error": type(exc).__name__},
            ) from exc
        return result if isinstance(result, dict) else {}
