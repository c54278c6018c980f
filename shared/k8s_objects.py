"""Kubernetes objects as plain dicts, over one kubernetes-asyncio ``ApiClient``.

The typed clients of kubernetes-asyncio turn objects into models and back, dropping fields they
do not know and answering in several shapes; provisioning and apply compare whole documents, so
this adapter speaks JSON through ``ApiClient.call_api`` for a fixed table of kinds we manage and
returns exactly what the API server returned. Every error leaves as a ``shared.errors`` type.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from kubernetes_asyncio.client import ApiClient

from shared.errors import Conflict, NotFound
from shared.k8s import translating
from shared.k8s_drift import drifted, recreated, replacement
from shared.manifests import platform_owned

ApplyOutcome = Literal["created", "updated", "unchanged"]
_PAGE_SIZE: Final = 500
_JSON: Final = "application/json"
_MERGE_PATCH: Final = "application/merge-patch+json"
_FOREIGN: Final = "not_ours"


@dataclass(frozen=True, slots=True)
class Kind:
    """Where a kind is served: its resource (plural) and whether it lives in a namespace."""

    plural: str
    namespaced: bool


KINDS: Final[Mapping[tuple[str, str], Kind]] = {
    ("v1", "Namespace"): Kind("namespaces", namespaced=False),
    ("v1", "ResourceQuota"): Kind("resourcequotas", namespaced=True),
    ("v1", "LimitRange"): Kind("limitranges", namespaced=True),
    ("v1", "ServiceAccount"): Kind("serviceaccounts", namespaced=True),
    ("v1", "Secret"): Kind("secrets", namespaced=True),
    ("v1", "ConfigMap"): Kind("configmaps", namespaced=True),
    ("v1", "Service"): Kind("services", namespaced=True),
    ("discovery.k8s.io/v1", "EndpointSlice"): Kind("endpointslices", namespaced=True),
    ("rbac.authorization.k8s.io/v1", "Role"): Kind("roles", namespaced=True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): Kind("rolebindings", namespaced=True),
    ("networking.k8s.io/v1", "NetworkPolicy"): Kind("networkpolicies", namespaced=True),
    ("argoproj.io/v1alpha1", "WorkflowTemplate"): Kind("workflowtemplates", namespaced=True),
    ("argoproj.io/v1alpha1", "Workflow"): Kind("workflows", namespaced=True),
    ("argoproj.io/v1alpha1", "CronWorkflow"): Kind("cronworkflows", namespaced=True),
    ("argoproj.io/v1alpha1", "EventSource"): Kind("eventsources", namespaced=True),
    ("argoproj.io/v1alpha1", "Sensor"): Kind("sensors", namespaced=True),
    ("networking.k8s.io/v1", "Ingress"): Kind("ingresses", namespaced=True),
    # Model serving (stagectl.serving).
    ("serving.kserve.io/v1beta1", "InferenceService"): Kind("inferenceservices", namespaced=True),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): Kind("httproutes", namespaced=True),
    ("gateway.networking.k8s.io/v1beta1", "ReferenceGrant"): Kind(
        "referencegrants", namespaced=True
    ),
    ("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy"): Kind("securitypolicies", namespaced=True),
}


def resource_path(
    api_version: str, kind: str, namespace: str | None, name: str | None = None
) -> str:
    """The URL path template of a collection or an object, with ``{namespace}``/``{name}`` left
    for the client to quote. ValueError for a kind outside ``KINDS`` or a scope mismatch."""
    served = KINDS.get((api_version, kind))
    if served is None:
        raise ValueError(f"{api_version} {kind} is not a kind this client manages")
    if served.namespaced != (namespace is not None):
        scope = "namespaced" if served.namespaced else "cluster-scoped"
        raise ValueError(f"{kind} is {scope}")
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = (
        f"{base}/namespaces/{{namespace}}/{served.plural}"
        if served.namespaced
        else f"{base}/{served.plural}"
    )
    return f"{path}/{{name}}" if name is not None else path


def _located(obj: Mapping[str, Any]) -> tuple[str, str, str | None, str | None]:
    """(apiVersion, kind, namespace, name) of an object, the name None when it has none."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name")
    named = name if isinstance(name, str) and name else None
    return str(obj.get("apiVersion")), str(obj.get("kind")), metadata.get("namespace"), named


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str | None, str]:
    api_version, kind, namespace, name = _located(obj)
    if name is None:
        raise ValueError("an object to write needs metadata.name")
    return api_version, kind, namespace, name


def not_ours(kind: str, namespace: str | None, name: str) -> Conflict:
    """The refusal of a live object that is not the platform's (``apply(only_ours=True)``)."""
    where = f"{namespace}/{name}" if namespace else name
    return Conflict(
        f"{kind} {where} exists and is not workflow-manager's; it is left as it is",
        details={"reason": _FOREIGN, "kind": kind, "name": where},
    )


class KubeObjects:
    """get/list/create/replace/patch/delete and a convergent ``apply`` for plain-dict objects."""

    def __init__(self, api: ApiClient) -> None:
        self._api = api

    async def _call(
        self,
        method: str,
        path: str,
        *,
        namespace: str | None = None,
        name: str | None = None,
        body: Any = None,
        query: builtins.list[tuple[str, str]] | None = None,
        content_type: str = _JSON,
    ) -> dict[str, Any]:
        path_params = {
            key: value for key, value in (("namespace", namespace), ("name", name)) if value
        }
        with translating():
            answer = await self._api.call_api(
                path,
                method,
                path_params=path_params,
                query_params=query or [],
                header_params={"Accept": _JSON, "Content-Type": content_type},
                body=body,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
            )
        return answer if isinstance(answer, dict) else {}

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        path = resource_path(api_version, kind, namespace, name)
        try:
            return await self._call("GET", path, namespace=namespace, name=name)
        except NotFound:
            return None

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: str | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """Every object of a kind (in a namespace), page by page; items carry apiVersion/kind."""
        path = resource_path(api_version, kind, namespace)
        items: builtins.list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query = [("limit", str(_PAGE_SIZE))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if token:
                query.append(("continue", token))
            page = await self._call("GET", path, namespace=namespace, query=query)
            for item in page.get("items") or []:
                items.append({"apiVersion": api_version, "kind": kind, **item})
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``obj`` (named, or with ``metadata.generateName``: the server picks the name,
        which the returned object carries); Conflict when it already exists."""
        api_version, kind, namespace, name = _located(obj)
        if name is None and not (obj.get("metadata") or {}).get("generateName"):
            raise ValueError("an object to create needs metadata.name or metadata.generateName")
        path = resource_path(api_version, kind, namespace)
        return await self._call("POST", path, namespace=namespace, body=dict(obj))

    async def replace(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace ``obj`` whole; Conflict when its metadata.resourceVersion is stale."""
        api_version, kind, namespace, name = _identity(obj)
        path = resource_path(api_version, kind, namespace, name)
        return await self._call("PUT", path, namespace=namespace, name=name, body=dict(obj))

    async def patch_merge(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Apply a JSON merge patch (RFC 7386) to an object."""
        path = resource_path(api_version, kind, namespace, name)
        return await self._call(
            "PATCH",
            path,
            namespace=namespace,
            name=name,
            body=dict(patch),
            content_type=_MERGE_PATCH,
        )

    async def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        """Delete an object; False when it was already gone."""
        path = resource_path(api_version, kind, namespace, name)
        try:
            await self._call("DELETE", path, namespace=namespace, name=name)
        except NotFound:
            return False
        return True

    async def apply(self, obj: Mapping[str, Any], *, only_ours: bool = False) -> ApplyOutcome:
        """Converge the live object to ``obj``: create it when missing, replace it when it has
        ``drifted`` (keeping what others added), delete and create it again when the change is
        to a field the API server never changes in place (``recreated``: a binding's roleRef,
        which is then briefly absent), leave it alone otherwise.

        A 409 (someone created or changed it between our read and our write) is retried once
        from a fresh read; a second one is raised, for the next reconcile pass to settle.
        ``only_ours``: a live object without the platform's managed-by label is someone
        else's, and is refused (Conflict) instead of converged.
        """
        try:
            return await self._converge(obj, only_ours=only_ours)
        except Conflict as exc:
            if exc.details.get("reason") == _FOREIGN:
                raise
            return await self._converge(obj, only_ours=only_ours)

    async def _converge(self, obj: Mapping[str, Any], *, only_ours: bool) -> ApplyOutcome:
        api_version, kind, namespace, name = _identity(obj)
        live = await self.get(api_version, kind, namespace, name)
        if live is None:
            await self.create(obj)
            return "created"
        if only_ours and not platform_owned(live):
            raise not_ours(kind, namespace, name)
        if not drifted(obj, live):
            return "unchanged"
        if recreated(obj, live):
            await self.delete(api_version, kind, namespace, name)
            await self.create(obj)
            return "updated"
        await self.replace(replacement(obj, live))
        return "updated"
