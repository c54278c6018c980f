"""Tenant provisioning: on first use, and kept converged by a leader-elected reconciler.

A tenant is provisioned in three parts, each idempotent:

1. the ``tenants`` row (the record of what was applied);
2. its storage user (``compiler.tenants.storage_users``): the IAM user, its policy, and an access
   key whose secret half lives only in the namespace's ``kubeopera-artifact-credentials`` Secret. A
   key is issued when the Secret is missing or names a key IAM no longer has, never otherwise,
   so a pass over a healthy tenant changes nothing;
3. the namespace and everything in it (``compiler.tenants.provisioning``), applied object by object:
   missing ones are created, drifted ones replaced, the rest left alone.

The provisioning specification (the settings that shape those objects, plus the API server's
addresses, discovered from the cluster at the first use and again on every reconcile pass so a
control plane that moves rolls out like any other change) has a hash. ``ensure`` (the
first-use path, called before every save and run) does nothing when the tenant's recorded hash
is the current one; the reconciler applies everything for every tenant each pass, which repairs
drift (a deleted quota, an edited policy) and rolls a changed specification out to all tenants,
then records the hash it applied. Concurrent passes for one tenant (two replicas' first uses)
are serialised by a PostgreSQL advisory lock on the tenant.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from compiler import metrics
from compiler.tenants.pg_tenants import TenantStore
from compiler.tenants.provisioning import (
    ACCESS_KEY,
    ARTIFACT_CREDENTIALS_SECRET,
    ProvisioningSpec,
    credentials_secret,
    spec_hash,
    tenant_namespace,
)
from compiler.tenants.storage_users import StorageUsers
from compiler.tenants.tenant_objects import discover_api_server, provision_tenant
from shared.config import Settings
from shared.k8s_objects import KubeObjects
from shared.logging import get_logger

log = get_logger(__name__)


@dataclass
class Outcome:
    """What one pass did to one tenant."""

    tenant: str
    objects: dict[str, int] = field(default_factory=dict)
    key_issued: bool = False


class TenantProvisioner:
    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        objects: KubeObjects,
        settings: Settings,
        storage: StorageUsers | None,
    ) -> None:
        self._store = TenantStore(pool)
        self._objects = objects
        self._settings = settings
        self._storage = storage
        ProvisioningSpec.from_settings(settings)  # a bad configuration stops start-up
        self._spec: ProvisioningSpec | None = None

    async def spec(self, *, rediscover: bool = False) -> ProvisioningSpec:
        """The current specification, with the API server's addresses discovered."""
        if self._spec is None or rediscover:
            cidrs, ports = await discover_api_server(self._objects)
            self._spec = ProvisioningSpec.from_settings(
                self._settings, api_server_cidrs=cidrs, api_server_ports=ports
            )
        return self._spec

    async def spec_hash(self) -> str:
        return spec_hash(await self.spec())

    async def ensure(self, tenant: str) -> None:
        """Provision ``tenant`` unless its recorded specification is the current one."""
        if await self._store.applied_hash(tenant) != await self.spec_hash():
            await self.reconcile(tenant)

    async def reconcile(self, tenant: str) -> Outcome:
        """Apply everything ``tenant`` should have; record the hash (or the error)."""
        outcome = Outcome(tenant)
        spec = await self.spec()
        await self._store.ensure(tenant)
        try:
            async with self._store.held(tenant) as held:
                user, key_id = await self._apply(tenant, spec, outcome)
                await held.record_applied(
                    spec_hash=spec_hash(spec), storage_user=user, storage_key_id=key_id
                )
        except Exception as exc:
            metrics.RECONCILES.labels(what=metrics.TENANT, outcome=metrics.FAILED).inc()
            await self._record_error(tenant, exc)
            raise
        metrics.RECONCILES.labels(what=metrics.TENANT, outcome=metrics.OK).inc()
        changed = {k: v for k, v in outcome.objects.items() if k != "unchanged" and v}
        if changed or outcome.key_issued:
            log.info("tenant_reconciled", tenant=tenant, key_issued=outcome.key_issued, **changed)
        return outcome

    async def _apply(
        self, tenant: str, spec: ProvisioningSpec, outcome: Outcome
    ) -> tuple[str | None, str | None]:
        outcome.objects = await provision_tenant(self._objects, tenant, spec)
        if self._storage is None:
            return None, None
        user = await self._storage.ensure_user(tenant)
        namespace = tenant_namespace(tenant)
        secret = await self._objects.get("v1", "Secret", namespace, ARTIFACT_CREDENTIALS_SECRET)
        in_use = _secret_key_id(secret)
        if in_use is not None and in_use in await self._storage.current_key_ids(tenant):
            return user, in_use
        credentials = await self._storage.issue_key(tenant)
        manifest = credentials_secret(
            tenant, credentials.access_key_id, credentials.secret_access_key
        )
        await self._objects.apply(manifest)
        outcome.key_issued = True
        return user, credentials.access_key_id

    async def _record_error(self, tenant: str, error: BaseException) -> None:
        message = getattr(error, "message", None) or type(error).__name__
        log.warning("tenant_reconcile_failed", tenant=tenant, error=message)
        with contextlib.suppress(Exception):  # the database may be what failed
            await self._store.record_error(tenant, str(message))

    async def reconcile_all(self) -> list[Outcome]:
        """One pass over every known tenant; a failing tenant does not stop the others."""
        await self.spec(rediscover=True)
        outcomes = []
        for tenant in await self._store.ids():
            try:
                outcomes.append(await self.reconcile(tenant))
            except Exception:  # recorded on the tenant's row and logged; the next pass retries
                continue
        return outcomes

    async def loop(self, interval: float, *, sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        """Reconcile every tenant now and then every ``interval`` seconds (run while leading)."""
        while True:
            outcomes = await self.reconcile_all()
            digest = await self.spec_hash()
            log.info("tenants_reconciled", tenants=len(outcomes), spec_hash=digest[:12])
            await sleep(interval)


def _secret_key_id(secret: dict[str, Any] | None) -> str | None:
    data = (secret or {}).get("data")
    encoded = data.get(ACCESS_KEY) if isinstance(data, dict) else None
    if not isinstance(encoded, str):
        return None
    try:
        return base64.b64decode(encoded).decode()
    except (ValueError, UnicodeDecodeError):
        return None
