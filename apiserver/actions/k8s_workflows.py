"""Workflows and templates on a cluster through its Kubernetes API (kubernetes-asyncio)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from apiserver.actions.planning import WORKFLOW_GROUP, WORKFLOW_VERSION
from shared.errors import NotFound
from shared.k8s import translating

MERGE_PATCH = "application/merge-patch+json"


class ClusterWorkflows:
    def __init__(self, api: ApiClient) -> None:
        self._api = CustomObjectsApi(api)

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            with translating():
                found: dict[str, Any] = await self._api.get_namespaced_custom_object(
                    WORKFLOW_GROUP, WORKFLOW_VERSION, namespace, "workflows", name
                )
        except NotFound:
            return None
        return found

    async def patch(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        with translating():
            patched: dict[str, Any] = await self._api.patch_namespaced_custom_object(
                WORKFLOW_GROUP,
                WORKFLOW_VERSION,
                namespace,
                "workflows",
                name,
                dict(patch),
                # A dict body is otherwise sent as a JSON patch (DESIGN.md, client facts).
                _content_type=MERGE_PATCH,  # type: ignore[call-arg]
            )
        return patched

    async def create(self, namespace: str, workflow: Mapping[str, Any]) -> dict[str, Any]:
        with translating():
            created: dict[str, Any] = await self._api.create_namespaced_custom_object(
                WORKFLOW_GROUP, WORKFLOW_VERSION, namespace, "workflows", dict(workflow)
            )
        return created

    async def template_exists(self, namespace: str, name: str, *, cluster_scope: bool) -> bool:
        try:
            with translating():
                if cluster_scope:
                    await self._api.get_cluster_custom_object(
                        WORKFLOW_GROUP, WORKFLOW_VERSION, "clusterworkflowtemplates", name
                    )
                else:
                    await self._api.get_namespaced_custom_object(
                        WORKFLOW_GROUP, WORKFLOW_VERSION, namespace, "workflowtemplates", name
                    )
        except NotFound:
            return False
        return True
