"""The tenant's data secrets: written, listed, read (names and keys only) and deleted.

A data secret is a Secret in ``kubeopera-data-<tenant>`` labelled ``kubeopera.io/data-secret``
(``compiler.secrets.rules``). Values go one way: from the PUT body into the Secret. Nothing here
returns, logs or audits a value, and an error from the Kubernetes API on a write is raised
again with a message of ours (its own could quote the object): every answer is the same error
class with the secret's name and the error's code only.

Every write is audited in ``run_actions`` (docs/api.md, "Data secrets"): action
``data_secret.create``, ``.replace`` or ``.delete``, target ``(host cluster, namespace,
secret/<name>)`` (a slash no workflow name has, so a secret's history never mixes with a run's),
the key names as ``parameters``, and the outcome: ``failed`` when the cluster refused or the
delete was refused because a pipeline uses the secret.

A tenant has at most ``max_per_tenant`` data secrets (``DATA_SECRETS_MAX_PER_TENANT``: every
save reads them all); a create past it is a 409 naming the cap, counted under the tenant's
exclusive lock below.

A delete is refused (409, naming the pipelines) while the current version of one of the tenant's
pipelines refers to the secret (``compiler.secrets.references``). Saves read the tenant's data
secrets under a shared advisory lock and the delete checks under the exclusive one
(``PipelineStore.guard_data_secrets``), so a save that found the secret and a delete never both
succeed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import asyncpg

from compiler.secrets import references, rules
from compiler.secrets.values import is_data_secret
from shared import labels as L
from shared.db.audit import record_action
from shared.db.pipelines import PipelineStore
from shared.errors import Conflict, NotFound, WorkflowManagerError
from shared.logging import get_logger

log = get_logger(__name__)

API_VERSION: Final = "v1"
KIND: Final = "Secret"
SELECTOR: Final = f"{L.DATA_SECRET}={L.DATA_SECRET_VALUE}"


class Objects(Protocol):
    """The host cluster's objects (``shared.k8s_objects.KubeObjects``)."""

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None: ...

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]: ...

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    async def replace(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    async def delete(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> bool: ...


class Tenants(Protocol):
    """Provisioning on first use (``compiler.tenants.service.TenantProvisioner``)."""

    async def ensure(self, tenant: str) -> None: ...


def utc_now() -> datetime:
    return datetime.now(UTC)


def _namespace(tenant: str) -> str:
    return f"{L.DATA_NAMESPACE_PREFIX}{tenant}"


def _missing(name: str) -> NotFound:
    return NotFound(f"no data secret {name!r}", details={"secret": name})


class DataSecretService:
    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        objects: Objects,
        tenants: Tenants,
        max_per_tenant: int = 100,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._max = max_per_tenant
        self._pool = pool
        self._objects = objects
        self._tenants = tenants
        self._clock = clock

    # --- reads -------------------------------------------------------------------------------
    async def _secrets(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's data secrets, by name (provisioning the tenant first: before, its
        namespace and the compiler's rights there do not exist)."""
        await self._tenants.ensure(tenant)
        return await self._listed(tenant)

    async def _listed(self, tenant: str) -> list[dict[str, Any]]:
        """The data secrets of a tenant provisioned already. Takes no PostgreSQL connection,
        so a caller holding one (a save's transaction) never waits for a second."""
        items = await self._objects.list(
            API_VERSION, KIND, _namespace(tenant), label_selector=SELECTOR
        )
        own = [
            item
            for item in items
            if is_data_secret(item) and rules.is_own(str(item.get("metadata", {}).get("name")))
        ]
        return sorted(own, key=lambda item: str(item["metadata"]["name"]))

    async def names(self, tenant: str) -> frozenset[str]:
        """The names of the data secrets of a tenant provisioned already (the caller ensured
        it): the only Secrets its templates may name."""
        return frozenset(str(item["metadata"]["name"]) for item in await self._listed(tenant))

    async def listing(self, tenant: str, *, after: str | None, limit: int) -> dict[str, Any]:
        """A page of the tenant's data secrets by name, after ``after``: ``{"items", "total",
        "more"}`` (``more``: a next page exists)."""
        secrets = await self._secrets(tenant)
        rest = [s for s in secrets if after is None or str(s["metadata"]["name"]) > after]
        return {
            "items": [rules.describe(secret) for secret in rest[:limit]],
            "total": len(secrets),
            "more": len(rest) > limit,
        }

    async def _own(self, tenant: str, name: str) -> dict[str, Any] | None:
        live = await self._objects.get(API_VERSION, KIND, _namespace(tenant), name)
        return live if live is not None and is_data_secret(live) else None

    async def read(self, tenant: str, name: str) -> dict[str, Any]:
        """A data secret's name, keys and history; NotFound for any other Secret or none."""
        if not rules.is_own(name):
            raise _missing(name)
        await self._tenants.ensure(tenant)
        live = await self._own(tenant, name)
        if live is None:
            raise _missing(name)
        return rules.describe(live)

    # --- writes ------------------------------------------------------------------------------
    async def put(
        self, tenant: str, actor: str, name: str, body: object
    ) -> tuple[dict[str, Any], bool]:
        """Create or replace the data secret ``name`` with the body's ``data``: (what a read
        shows of it, whether it was created)."""
        rules.check_name(name)
        values = rules.parse_body(body)
        await self._tenants.ensure(tenant)
        namespace = _namespace(tenant)
        keys = sorted(values)
        live = await self._objects.get(API_VERSION, KIND, namespace, name)
        if live is not None and not is_data_secret(live):
            await self._audit(tenant, actor, name, "create", keys, "failed", {"error": "conflict"})
            raise Conflict(
                f"a Secret named {name!r} exists in the namespace and is not a data secret",
                details={"reason": "not_a_data_secret", "secret": name},
            )
        at = self._clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        created_by = None
        if live is not None:
            created_by = ((live.get("metadata") or {}).get("annotations") or {}).get(
                rules.CREATED_BY
            )
        secret = rules.manifest(
            tenant=tenant, name=name, values=values, actor=actor, at=at, created_by=created_by
        )
        action = "create" if live is None else "replace"
        try:
            async with contextlib.AsyncExitStack() as held:
                if live is None:
                    # Counted and created under the tenant's exclusive data-secrets lock: two
                    # creates never both take the last place.
                    store = await held.enter_async_context(PipelineStore.transaction(self._pool))
                    await store.guard_data_secrets(tenant, exclusive=True)
                    if len(await self._listed(tenant)) >= self._max:
                        raise _Refused(
                            {"error": "limit", "max_per_tenant": self._max},
                            Conflict(
                                f"a tenant may have at most {self._max} data secrets "
                                "(DATA_SECRETS_MAX_PER_TENANT): delete one first",
                                details={
                                    "reason": "limit",
                                    "secret": name,
                                    "max_per_tenant": self._max,
                                },
                            ),
                        )
                try:
                    if live is None:
                        written = await self._objects.create(secret)
                    else:
                        version = live["metadata"].get("resourceVersion")
                        secret["metadata"]["resourceVersion"] = version
                        written = await self._objects.replace(secret)
                except WorkflowManagerError as exc:
                    raise _Refused({"error": exc.code}, _sanitised(exc, name)) from None
        except _Refused as refused:
            # Audited once the lock's connection is back: a refusal's row must outlive the
            # rolled-back transaction, and takes a connection of its own.
            await self._audit(tenant, actor, name, action, keys, "failed", refused.detail)
            raise refused.error from None
        await self._audit(tenant, actor, name, action, keys, "succeeded", {})
        log.info("data_secret_written", tenant=tenant, secret=name, action=action, keys=len(keys))
        return rules.describe(written), live is None

    async def delete(self, tenant: str, actor: str, name: str) -> dict[str, Any]:
        """Delete the data secret ``name``; Conflict naming the pipelines whose current version
        refers to it."""
        if not rules.is_own(name):
            raise _missing(name)
        await self._tenants.ensure(tenant)
        namespace = _namespace(tenant)
        keys: list[str] = []
        try:
            async with PipelineStore.transaction(self._pool) as store:
                await store.guard_data_secrets(tenant, exclusive=True)
                live = await self._own(tenant, name)
                if live is None:
                    raise _missing(name)
                keys = sorted(rules.describe(live)["keys"])
                current = {
                    pipeline.id: (pipeline, version)
                    for pipeline, version in await store.current_versions_mentioning(tenant, name)
                }
                bodies = {
                    key: (v.template, v.definition, v.settings) for key, (_, v) in current.items()
                }
                using = references.users(name, bodies)
                users = [
                    {"id": pipeline.id, "kind": pipeline.kind, "name": pipeline.name}
                    for pipeline, _ in (current[key] for key in using)
                ]
                if users:
                    listed = ", ".join(
                        f"{user['name']} ({user['kind']}, {user['id']})" for user in users
                    )
                    raise _Refused(
                        {"error": "conflict", "pipelines": users},
                        Conflict(
                            f"data secret {name!r} is used by the current version of: {listed}",
                            details={"reason": "in_use", "secret": name, "pipelines": users},
                        ),
                    )
                try:
                    await self._objects.delete(API_VERSION, KIND, namespace, name)
                except WorkflowManagerError as exc:
                    raise _Refused({"error": exc.code}, _sanitised(exc, name)) from None
        except _Refused as refused:
            await self._audit(tenant, actor, name, "delete", keys, "failed", refused.detail)
            raise refused.error from None
        await self._audit(tenant, actor, name, "delete", keys, "succeeded", {})
        log.info("data_secret_deleted", tenant=tenant, secret=name)
        return {"name": name, "deleted": True}

    async def _audit(
        self,
        tenant: str,
        actor: str,
        name: str,
        action: str,
        keys: list[str],
        outcome: str,
        detail: Mapping[str, Any],
    ) -> None:
        """One ``run_actions`` row: names and keys, never a value."""
        async with PipelineStore.transaction(self._pool) as store:
            cluster_id = await store.host_cluster_id()
        await record_action(
            self._pool,
            cluster_id=cluster_id or "host",
            namespace=_namespace(tenant),
            name=f"secret/{name}",
            run_uid=None,
            tenant=tenant,
            actor=actor,
            action=f"data_secret.{action}",
            parameters={"keys": keys},
            outcome=outcome,
            detail={"secret": name, **detail},
        )


class _Refused(Exception):
    """A write refused inside the lock's transaction: raised out of it, then audited (on a
    connection of its own, once the transaction's is back) and answered with ``error``."""

    def __init__(self, detail: Mapping[str, Any], error: WorkflowManagerError) -> None:
        super().__init__(error.message)
        self.detail = detail
        self.error = error


def _sanitised(exc: WorkflowManagerError, name: str) -> WorkflowManagerError:
    """The same class of error, with no word of the API server's own (which may quote the
    object it refused)."""
    if isinstance(exc, Conflict):
        message = f"data secret {name!r} was changed at the same time; try again"
    else:
        message = f"data secret {name!r} could not be written ({exc.code})"
    return type(exc)(message, details={"secret": name})
