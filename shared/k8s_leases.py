"""The Kubernetes adapter for leader election: ``LeaseApi`` over coordination.k8s.io/v1.

``KubernetesLeaseApi`` performs the five Lease calls ``shared.leader`` needs with
kubernetes-asyncio, translating API errors into ``shared.errors`` (409 Conflict, 404 NotFound)
and Lease objects into ``leader_state.LeaseRecord``. The election itself is in
``shared.leader`` (one lease) and ``shared.leader_shards`` (one lease per shard).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoordinationV1Api, V1DeleteOptions, V1Preconditions

from shared.errors import NotFound
from shared.k8s import translating
from shared.leader_state import LeaseRecord, LeaseSpec, format_microtime


class KubernetesLeaseApi:
    """``LeaseApi`` over kubernetes-asyncio's CoordinationV1Api; bodies are sent as dicts so that
    MicroTime fields carry exactly RFC 3339 with microseconds and 'Z'."""

    def __init__(self, api_client: ApiClient, *, request_timeout: float = 10.0) -> None:
        self._api = CoordinationV1Api(api_client)
        self._timeout = request_timeout

    async def read(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            with translating():
                lease = await self._api.read_namespaced_lease(name, namespace, **self._kw)
        except NotFound:
            return None
        return _record(lease)

    async def create(
        self, namespace: str, name: str, spec: LeaseSpec, *, labels: Mapping[str, str]
    ) -> LeaseRecord:
        # A dict, not a V1Lease: the model would render MicroTime without the 'Z' form.
        body: Any = _body(namespace, name, spec, labels=labels, resource_version=None)
        with translating():
            return _record(await self._api.create_namespaced_lease(namespace, body, **self._kw))

    async def replace(
        self,
        namespace: str,
        name: str,
        spec: LeaseSpec,
        *,
        resource_version: str,
        labels: Mapping[str, str],
    ) -> LeaseRecord:
        body: Any = _body(namespace, name, spec, labels=labels, resource_version=resource_version)
        with translating():
            lease = await self._api.replace_namespaced_lease(name, namespace, body, **self._kw)
        return _record(lease)

    async def list(self, namespace: str, *, label_selector: str) -> list[tuple[str, LeaseRecord]]:
        with translating():
            leases = await self._api.list_namespaced_lease(
                namespace, label_selector=label_selector, **self._kw
            )
        return [(lease.metadata.name, _record(lease)) for lease in leases.items or []]

    async def delete(self, namespace: str, name: str, *, resource_version: str) -> None:
        options = V1DeleteOptions(preconditions=V1Preconditions(resource_version=resource_version))
        with translating():
            await self._api.delete_namespaced_lease(name, namespace, body=options, **self._kw)

    @property
    def _kw(self) -> dict[str, Any]:
        return {"_request_timeout": self._timeout}


def _body(
    namespace: str,
    name: str,
    spec: LeaseSpec,
    *,
    labels: Mapping[str, str],
    resource_version: str | None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": spec.holder,
            "leaseDurationSeconds": spec.lease_duration_seconds,
            "acquireTime": format_microtime(spec.acquire_time) if spec.acquire_time else None,
            "renewTime": format_microtime(spec.renew_time) if spec.renew_time else None,
            "leaseTransitions": spec.transitions,
        },
    }


def _record(lease: Any) -> LeaseRecord:
    spec = lease.spec
    return LeaseRecord(
        spec=LeaseSpec(
            holder=(spec.holder_identity or None) if spec else None,
            lease_duration_seconds=(spec.lease_duration_seconds or 0) if spec else 0,
            acquire_time=spec.acquire_time if spec else None,
            renew_time=spec.renew_time if spec else None,
            transitions=(spec.lease_transitions or 0) if spec else 0,
        ),
        resource_version=str(lease.metadata.resource_version),
    )
