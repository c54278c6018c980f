"""Per-route identity of the inference token check (docs/inference-auth.md, "Which deployment").

The deployment a request is checked against comes from route configuration the platform writes,
never from a header the client controls: the client chooses ``Host``, and nginx routes on the
host of an absolute-form request line while ingress-nginx builds ``X-Original-URL`` from
``$http_host``. So each route names its deployment in the check's path:

- ingress-nginx: each Ingress's ``auth-url`` is ``INFERENCE_AUTH_URL`` + ``/<tenant>/<model>/
  <environment>`` (nginx requests it as written, whatever the client sent);
- Envoy Gateway: each route's ``SecurityPolicy.extAuth.http.path`` is the same path, and Envoy
  appends the client's path and query after it.

``deployment_of_path`` reads the deployment back from the check's path: exactly the three
segments after ``AUTH_PATH``, then the end, ``/`` (Envoy's appended client path, ignored) or
``?``. Anything else names no deployment (None), and the check refuses it.

This module is the one place that builds the per-route objects (``inference_ingress``,
``inference_http_route``, ``security_policy``). The token never reaches the model: the
Ingress lists ``Authorization`` in ``auth-response-headers`` (ingress-nginx then sets the
proxied ``Authorization`` to the auth response's, which the check never sends, and nginx
drops an empty header), and the check's 200 carries ``x-envoy-auth-headers-to-remove:
authorization`` for Envoy. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import urlsplit

from shared.identifiers import TENANT_ID
from shared.inference_tokens import ENVIRONMENT, MODEL_NAME, DeploymentRef, check_deployment

AUTH_PATH: Final = "/internal/v1/inference-auth"
DEPLOYMENT_HEADER: Final = "X-Inference-Deployment"
# What ingress-nginx copies from the check's 200 onto the proxied request. Authorization is
# never in the answer, so the model receives none (nginx drops a header set to "").
AUTH_RESPONSE_HEADERS: Final = (DEPLOYMENT_HEADER, "Authorization")
# Envoy's HTTP ext_authz removes the headers an OK answer lists here from the upstream request.
ENVOY_HEADERS_TO_REMOVE: Final = "x-envoy-auth-headers-to-remove"
HEADERS_TO_REMOVE: Final = ("authorization",)

_ANNOTATION: Final = "nginx.ingress.kubernetes.io/"
_PREFIX: Final = AUTH_PATH + "/"
# INFERENCE_AUTH_URL's parts: a DNS name or IPv4 address, an optional port, no userinfo, query
# or fragment, nothing ingress-nginx's URL validator or nginx would read otherwise (`$`, `%`).
_HOST: Final = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
_URL_CHARS: Final = re.compile(r"[A-Za-z0-9.\-_~:/]+")
_SERVICE_HOST: Final = re.compile(
    r"(?P<name>[a-z0-9]([a-z0-9-]*[a-z0-9])?)\.(?P<namespace>[a-z0-9]([a-z0-9-]*[a-z0-9])?)"
    r"\.svc(\.cluster\.local)?"
)


def check_auth_url(auth_url: str) -> str:
    """``INFERENCE_AUTH_URL`` without a trailing slash; ValueError unless it is
    ``http(s)://<host>[:<port>]/internal/v1/inference-auth`` (the path the check serves)."""
    if not isinstance(auth_url, str) or len(auth_url) > 500 or not _URL_CHARS.fullmatch(auth_url):
        raise ValueError(
            "INFERENCE_AUTH_URL: expected http(s)://<host>[:<port>]" + AUTH_PATH + ", plain ASCII"
        )
    parts = urlsplit(auth_url.rstrip("/"))
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (
        parts.scheme not in ("http", "https")
        or parts.hostname is None
        or not _HOST.fullmatch(parts.hostname)
        or parts.netloc != (parts.hostname if port is None else f"{parts.hostname}:{port}")
        or (port is not None and not 0 < port < 65536)
        or parts.path != AUTH_PATH
    ):
        raise ValueError(
            "INFERENCE_AUTH_URL: expected http(s)://<host>[:<port>]"
            + AUTH_PATH
            + " (lower-case host, no user, query or fragment)"
        )
    return auth_url.rstrip("/")


def deployment_path(ref: DeploymentRef) -> str:
    """``/internal/v1/inference-auth/<tenant>/<model>/<environment>``; ValueError when a part
    does not fit the deployment scheme (so nothing else can enter a route's path)."""
    check_deployment(tenant=ref.tenant, model=ref.model, environment=ref.environment)
    return f"{_PREFIX}{ref.tenant}/{ref.model}/{ref.environment}"


def deployment_auth_url(ref: DeploymentRef, *, auth_url: str) -> str:
    """The ``auth-url`` of the deployment's Ingress: ``INFERENCE_AUTH_URL`` + its segments."""
    base = check_auth_url(auth_url)
    return base[: -len(AUTH_PATH)] + deployment_path(ref)


def deployment_of_path(path: str) -> DeploymentRef | None:
    """The deployment a check's path names (request target as received, query included or
    not); None when it names none. Never raises."""
    if not isinstance(path, str) or not path.startswith(_PREFIX):
        return None
    rest = path[len(_PREFIX) :]
    tenant, slash, rest = rest.partition("/")
    if not slash:
        return None
    model, slash, rest = rest.partition("/")
    if not slash:
        return None
    end = len(rest)
    for stop in "/?":
        index = rest.find(stop, 0, end)
        if index >= 0:
            end = index
    environment = rest[:end]
    if (
        not TENANT_ID.fullmatch(tenant)
        or not MODEL_NAME.fullmatch(model)
        or not ENVIRONMENT.fullmatch(environment)
    ):
        return None
    return DeploymentRef(tenant=tenant, model=model, environment=environment)


def ingress_annotations(ref: DeploymentRef, *, auth_url: str) -> dict[str, str]:
    """The ingress-nginx annotations of the deployment's Ingress. No ``auth-cache-key`` (a
    cached 200 would outlive a revocation) and no snippet (refused by default)."""
    return {
        _ANNOTATION + "auth-url": deployment_auth_url(ref, auth_url=auth_url),
        _ANNOTATION + "auth-response-headers": ",".join(AUTH_RESPONSE_HEADERS),
    }


def inference_ingress(
    ref: DeploymentRef,
    *,
    host: str,
    auth_url: str,
    namespace: str,
    service: str,
    port: int,
    ingress_class: str | None = None,
    tls_secret: str | None = None,
    upstream_vhost: str | None = None,
) -> dict[str, Any]:
    """The deployment's Ingress (networking.k8s.io/v1): ``host`` (its endpoint host, from
    ``shared.inference_tokens.endpoint_host``) routed to ``service:port`` behind the check.
    ``upstream_vhost`` is the ``Host`` sent upstream (a Knative gateway routes on it)."""
    name = route_name(ref)
    spec: dict[str, Any] = {
        "rules": [
            {
                "host": host,
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": service, "port": {"number": port}}},
                        }
                    ]
                },
            }
        ]
    }
    if ingress_class is not None:
        spec["ingressClassName"] = ingress_class
    if tls_secret is not None:
        spec["tls"] = [{"hosts": [host], "secretName": tls_secret}]
    annotations = ingress_annotations(ref, auth_url=auth_url)
    if upstream_vhost is not None:
        annotations[_ANNOTATION + "upstream-vhost"] = upstream_vhost
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": annotations,
        },
        "spec": spec,
    }


def route_name(ref: DeploymentRef) -> str:
    """``inference-<model>-<environment>``: the name of the deployment's Ingress, HTTPRoute
    and SecurityPolicy (at most 79 characters, within the 253 of an object name)."""
    check_deployment(tenant=ref.tenant, model=ref.model, environment=ref.environment)
    return f"inference-{ref.model}-{ref.environment}"


def inference_http_route(
    ref: DeploymentRef,
    *,
    host: str,
    namespace: str,
    gateway_namespace: str,
    gateway: str,
    service: str,
    service_namespace: str,
    port: int,
    upstream_host: str,
) -> dict[str, Any]:
    """The deployment's HTTPRoute (gateway.networking.k8s.io/v1), attached to the Gateway
    ``gateway_namespace/gateway``: ``host`` to ``service_namespace/service:port`` with the
    ``Host`` rewritten to ``upstream_host``. The check is the SecurityPolicy targeting it
    (``security_policy``), which also removes the client's token; a backend in another
    namespace needs a ReferenceGrant there."""
    backend: dict[str, Any] = {"name": service, "port": port}
    if service_namespace != namespace:
        backend["namespace"] = service_namespace
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": route_name(ref), "namespace": namespace},
        "spec": {
            "parentRefs": [{"name": gateway, "namespace": gateway_namespace}],
            "hostnames": [host],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "filters": [{"type": "URLRewrite", "urlRewrite": {"hostname": upstream_host}}],
                    "backendRefs": [backend],
                }
            ],
        },
    }


def auth_service(auth_url: str) -> tuple[str, str, int]:
    """(name, namespace, port) of the check's Service named by ``INFERENCE_AUTH_URL``;
    ValueError unless its host is ``<service>.<namespace>.svc[.cluster.local]``."""
    parts = urlsplit(check_auth_url(auth_url))
    match = _SERVICE_HOST.fullmatch(parts.hostname or "")
    if match is None:
        raise ValueError(
            "INFERENCE_AUTH_URL: Envoy Gateway needs the check's Service as "
            "<service>.<namespace>.svc[.cluster.local]"
        )
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return match.group("name"), match.group("namespace"), port


def security_policy(
    ref: DeploymentRef, *, auth_url: str, namespace: str, route: str
) -> dict[str, Any]:
    """Envoy Gateway's SecurityPolicy for the deployment's HTTPRoute ``route`` (same
    namespace): HTTP ext_authz to the check's Service (from ``INFERENCE_AUTH_URL``, which must
    then name it as ``<service>.<namespace>.svc[.cluster.local]``), with ``path`` naming the
    deployment. In another namespace than the route's, the Service needs a ReferenceGrant."""
    service, service_namespace, port = auth_service(auth_url)
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "SecurityPolicy",
        "metadata": {"name": route_name(ref), "namespace": namespace},
        "spec": {
            "targetRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route}
            ],
            "extAuth": {
                "failOpen": False,
                # Envoy sends Host, the method and the path in any case.
                "headersToExtAuth": ["authorization"],
                "http": {
                    "backendRefs": [
                        {
                            "name": service,
                            "namespace": service_namespace,
                            "port": port,
                        }
                    ],
                    "path": deployment_path(ref),
                    "headersToBackend": [DEPLOYMENT_HEADER.lower()],
                },
            },
        },
    }
