"""Carrying out model serving on the host cluster: a tenant's serving namespace and what its
deployments share, one deployment's InferenceService and route, their readiness, and their
removal. The objects come from ``stagectl.serving.manifests`` (pure); this module only writes
them (``shared.k8s_objects``) and reads them back.

Every write converges (create, or replace what drifted, keeping what others added) and is
refused for a live object that is not the platform's (no managed-by label): a tenant's own
object of the same name is never overwritten. The model reader's key is issued once per
tenant and kept in the namespace's Secret; a Secret already holding one is left alone, so a
reconcile never rotates the key a running model server downloads with.
"""

from __future__ import annotations

from typing import Any

from shared.k8s_objects import KubeObjects, not_ours
from shared.logging import get_logger
from shared.manifests import platform_owned
from shared.serving import isvc_name
from stagectl.serving import manifests
from stagectl.serving.params import (
    STORAGE_SECRET,
    Deployment,
    ServingPlatform,
    serving_namespace,
)
from stagectl.serving.readers import ModelReaders
from stagectl.serving.status import ServingStatus, read_status

log = get_logger(__name__)
_ISVC = ("serving.kserve.io/v1beta1", "InferenceService")


class Provisioner:
    """Writes and reads the serving objects (see the module docstring)."""

    def __init__(
        self, objects: KubeObjects, platform: ServingPlatform, readers: ModelReaders | None
    ) -> None:
        self._objects = objects
        self._platform = platform
        self._readers = readers

    async def tenant(self, tenant: str) -> int:
        """The tenant's serving namespace and what its deployments share; the number of
        objects created or changed."""
        changed = 0
        for obj in manifests.namespace_objects(tenant, self._platform):
            changed += await self._apply(obj)
        changed += await self._reader_secret(tenant)
        for grant in manifests.reference_grants(tenant, self._platform):
            changed += await self._apply(grant)
        return changed

    async def deployment(self, deployment: Deployment) -> int:
        """The deployment's InferenceService and the objects publishing it."""
        changed = await self._apply(manifests.inference_service(deployment, self._platform))
        for obj in manifests.publishing_objects(deployment, self._platform):
            changed += await self._apply(obj)
        return changed

    async def status(self, deployment: Deployment) -> ServingStatus:
        live = await self._objects.get(
            *_ISVC,
            serving_namespace(deployment.tenant),
            isvc_name(deployment.model, deployment.environment),
        )
        return read_status(live)

    async def remove(self, deployment: Deployment) -> int:
        """Delete the deployment's objects (the route first, so no request reaches a model
        going away); the number deleted."""
        removed = 0
        objects = [
            *reversed(manifests.publishing_objects(deployment, self._platform)),
            manifests.inference_service(deployment, self._platform),
        ]
        for obj in objects:
            metadata = obj["metadata"]
            live = await self._objects.get(
                obj["apiVersion"], obj["kind"], metadata.get("namespace"), metadata["name"]
            )
            if live is None or not platform_owned(live):
                continue
            if await self._objects.delete(
                obj["apiVersion"], obj["kind"], metadata.get("namespace"), metadata["name"]
            ):
                removed += 1
        return removed

    async def _apply(self, obj: dict[str, Any]) -> int:
        outcome = await self._objects.apply(obj, only_ours=True)
        if outcome != "unchanged":
            metadata = obj["metadata"]
            log.info(
                "serving_object_applied",
                kind=obj["kind"],
                namespace=metadata.get("namespace"),
                name=metadata["name"],
                outcome=outcome,
            )
            return 1
        return 0

    async def _reader_secret(self, tenant: str) -> int:
        """The model reader's key in the namespace's Secret, issued when there is none."""
        if self._readers is None:
            return 0
        namespace = serving_namespace(tenant)
        live = await self._objects.get("v1", "Secret", namespace, STORAGE_SECRET)
        if live is not None and not platform_owned(live):
            # Refused before a key is issued: a new key would revoke the one before it and
            # be stored nowhere, on every pass.
            raise not_ours("Secret", namespace, STORAGE_SECRET)
        if live is not None and (live.get("data") or {}):
            await self._readers.ensure_user(tenant)  # its policy put again, the key kept
            return 0
        await self._readers.ensure_user(tenant)
        key = await self._readers.issue_key(tenant)
        secret = manifests.storage_secret(
            tenant,
            self._platform,
            access_key_id=key.access_key_id,
            secret_access_key=key.secret_access_key,
        )
        return await self._apply(secret)
