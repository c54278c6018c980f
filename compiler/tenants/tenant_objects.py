"""Provisioning one tenant namespace on the host cluster: apply, record, discover.

``provision_tenant`` applies every object ``compiler.tenants.provisioning`` builds, in order, then
records the spec hash on the namespace (annotation ``kubeopera.io/provisioning-spec-hash``) only
once all of them were applied: a namespace carrying a hash is known to have converged to that
spec in full, whatever the database says. ``compiler.tenants.service`` records the same hash in the
``tenants`` table and runs the passes; a reconcile pass applies everything for every tenant
whatever the recorded hash says, since drift (a deleted quota, an edited policy) leaves the hash
unchanged, and an unchanged object costs one read. When the namespace takes a new hash, what an
earlier schema created and nothing creates any more (``obsolete_objects``) is deleted first.

The compiler writes a tenant namespace's contents through the RoleBinding that provisioning
applies right after the namespace (``compiler.tenants.provisioning``, "Rights"). The API server's
authorizer learns of a new binding from a watch, a moment later (on each API server of the
control plane separately), so after creating or replacing that binding a refusal (HTTP 403) is
retried with backoff for a few seconds before it counts.

``discover_api_server`` finds the API server's addresses for the network policy (see
``compiler.tenants.provisioning``); call it when building the spec, and again each pass so that a
control plane that moves rolls out like any other change.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

from compiler.tenants.network_policy import host_cidr
from compiler.tenants.provisioning import (
    COMPILER_BINDING,
    ProvisioningSpec,
    obsolete_objects,
    spec_hash,
    tenant_namespace,
    tenant_objects,
)
from shared import labels as L
from shared.errors import DependencyDown, NotFound
from shared.k8s_objects import KubeObjects
from shared.logging import get_logger

log = get_logger(__name__)

TENANT_PROVISIONED: Final = "tenant_provisioned"
API_SERVER_NOT_FOUND: Final = "api_server_endpoints_not_found"
GRANT_NOT_YET_IN_FORCE: Final = "tenant_grant_not_yet_in_force"

# Seconds between tries of a write refused while the compiler's new binding propagates (3.1 s in
# all; the authorizer's watch usually delivers it within a second).
GRANT_BACKOFF: Final = (0.1, 0.2, 0.4, 0.8, 1.6)

T = TypeVar("T")

# The Service in front of the API server, and the label its EndpointSlices carry.
API_SERVER_NAMESPACE: Final = "default"
API_SERVER_SERVICE: Final = "kubernetes"
SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"


def _address_cidr(address: object) -> str | None:
    try:
        return host_cidr(address) if isinstance(address, str) else None
    except ValueError:
        return None  # "None" (headless) or a name: nothing a policy can name


async def discover_api_server(objects: KubeObjects) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(CIDRs, ports) at which pods reach the API server: the ``default/kubernetes`` Service's
    cluster IPs and ports, and the addresses and ports of its EndpointSlices (what a network
    policy sees once the Service address is translated). Empty when neither can be read."""
    cidrs: set[str] = set()
    ports: set[int] = set()
    service = await objects.get("v1", "Service", API_SERVER_NAMESPACE, API_SERVER_SERVICE)
    spec: Mapping[str, Any] = (service or {}).get("spec") or {}
    for address in [*(spec.get("clusterIPs") or []), spec.get("clusterIP")]:
        cidr = _address_cidr(address)
        if cidr:
            cidrs.add(cidr)
    ports.update(p["port"] for p in spec.get("ports") or [] if isinstance(p.get("port"), int))
    try:
        slices = await objects.list(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            API_SERVER_NAMESPACE,
            label_selector=f"{SERVICE_NAME_LABEL}={API_SERVER_SERVICE}",
        )
    except NotFound:  # a server without the discovery API
        slices = []
    for endpoint_slice in slices:
        for endpoint in endpoint_slice.get("endpoints") or []:
            for address in endpoint.get("addresses") or []:
                cidr = _address_cidr(address)
                if cidr:
                    cidrs.add(cidr)
        ports.update(
            p["port"] for p in endpoint_slice.get("ports") or [] if isinstance(p.get("port"), int)
        )
    if not cidrs or not ports:
        log.warning(API_SERVER_NOT_FOUND, namespace=API_SERVER_NAMESPACE)
        return (), ()
    return tuple(sorted(cidrs)), tuple(sorted(ports))


def _refused(exc: DependencyDown) -> bool:
    return (exc.details or {}).get("status") == 403


async def _granted(
    call: Callable[[], Awaitable[T]],
    *,
    patient: bool,
    tenant: str,
    sleep: Callable[[float], Awaitable[Any]],
) -> T:
    """``call()``; while ``patient``, a 403 is tried again after each of ``GRANT_BACKOFF``."""
    delays = iter(GRANT_BACKOFF if patient else ())
    while True:
        try:
            return await call()
        except DependencyDown as exc:
            delay = next(delays, None)
            if delay is None or not _refused(exc):
                raise
            log.info(GRANT_NOT_YET_IN_FORCE, tenant=tenant, retry_in=delay)
            await sleep(delay)


async def provision_tenant(
    objects: KubeObjects,
    tenant: str,
    spec: ProvisioningSpec,
    *,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> dict[str, int]:
    """Converge a tenant's namespace to ``spec``; counts of objects created, updated, unchanged.

    Idempotent: a second call with the same spec changes nothing. ValueError for a malformed
    tenant id; shared errors from the API (the next pass retries what failed).
    """
    counts = {"created": 0, "updated": 0, "unchanged": 0}
    patient = False  # the compiler's own binding was just written: its grant may lag
    for obj in tenant_objects(tenant, spec):
        outcome = await _granted(
            functools.partial(objects.apply, obj), patient=patient, tenant=tenant, sleep=sleep
        )
        counts[outcome] += 1
        if obj["kind"] == "RoleBinding" and obj["metadata"]["name"] == COMPILER_BINDING:
            patient = outcome != "unchanged"
    digest = spec_hash(spec)
    if await applied_hash(objects, tenant) != digest:
        for api_version, kind, namespace, name in obsolete_objects(tenant):
            await _granted(
                functools.partial(objects.delete, api_version, kind, namespace, name),
                patient=patient,
                tenant=tenant,
                sleep=sleep,
            )
        await objects.patch_merge(
            "v1",
            "Namespace",
            None,
            tenant_namespace(tenant),
            {"metadata": {"annotations": {L.PROVISIONING_SPEC_HASH: digest}}},
        )
    if counts["created"] or counts["updated"]:
        log.info(TENANT_PROVISIONED, tenant=tenant, spec_hash=digest, **counts)
    return counts


async def applied_hash(objects: KubeObjects, tenant: str) -> str | None:
    """The spec hash last applied in full to a tenant's namespace; None when never."""
    namespace = await objects.get("v1", "Namespace", None, tenant_namespace(tenant))
    annotations = ((namespace or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(L.PROVISIONING_SPEC_HASH)
    return value if isinstance(value, str) else None
