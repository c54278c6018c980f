"""The deployment reconciler: what ``model_deployments`` says each model should serve, made
true on the host cluster, and what became of it written back (docs/operations.md,
"Deployments").

It runs on the leading stage controller beside the dispatcher. A change of a wanted version
(the deploy stage for staging, the promote and rollback routes for production) NOTIFYs
``model_deployments`` on commit; a sweep every ``poll`` seconds looks at every deployment
still deploying, so a missed notification or a restart only delays. For one deployment:

1. when its generation is newer than the one applied: the tenant's serving namespace and what
   it shares (``stagectl.serving.provision``), the InferenceService and its route for the
   wanted version; at first deploy, the deployment's token (the token store keeps its hash;
   the plain token is kept sealed, ``shared.token_sealing``);
2. its readiness: ready (for the spec as written), ``ready`` with the endpoint's URL;
   KServe's failure condition, ``failed`` with its message; the deadline passed, ``failed``
   saying so; otherwise it is looked at again at the next sweep.

Every step is idempotent and an observation counts only for the generation it was made for,
so two leaders at once, or a crash anywhere, leave nothing wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Any, Final

import asyncpg

from shared.config import Settings
from shared.db.deployments import DEPLOYMENTS_CHANNEL, DeploymentRow, DeploymentStore
from shared.db.inference_tokens import TokenStore
from shared.db.listening import listen_forever
from shared.db.registry import RegistryReader
from shared.errors import WorkflowManagerError
from shared.logging import get_logger
from shared.serving import Serving
from shared.token_sealing import seal
from stagectl.serving.params import Deployment, ModelServing, ServingPlatform, deployment_host
from stagectl.serving.provision import Provisioner

log = get_logger(__name__)
ACTOR: Final = "stagectl"


class DeploymentReconciler:
    """See the module docstring."""

    def __init__(
        self,
        *,
        source: Settings | str,
        pool: asyncpg.Pool,
        provisioner: Provisioner,
        platform: ServingPlatform,
        seal_key: bytes | None,
        poll: float,
        scheme: str = "https",
    ) -> None:
        self._source = source
        self._pool = pool
        self._provisioner = provisioner
        self._platform = platform
        self._seal_key = seal_key
        self._poll = poll
        self._scheme = scheme
        self._now = asyncio.Event()

    def on_notify(self, _conn: Any, _pid: int, _channel: str, _payload: str) -> None:
        self._now.set()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(
                listen_forever(
                    self._source,
                    name="model-deployments",
                    application_name="wm-stagectl-deployments",
                    channels={DEPLOYMENTS_CHANNEL: self.on_notify},
                    on_listening=self._now.set,
                )
            )
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._poll):
                        await self._now.wait()
                self._now.clear()
                await self.sweep()

    async def sweep(self) -> int:
        """Reconcile every deployment still deploying; how many settled."""
        try:
            unsettled = await DeploymentStore(self._pool).unsettled()
        except WorkflowManagerError as exc:
            log.warning("deployments_sweep_failed", error=exc.code)
            return 0
        settled = 0
        for row in unsettled:
            try:
                settled += await self.reconcile(row)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the next sweep tries again
                log.warning(
                    "deployment_reconcile_failed",
                    model=row.model_id,
                    environment=row.environment,
                    error=getattr(exc, "code", type(exc).__name__),
                    reason=getattr(exc, "message", str(exc))[:300],
                    exc_info=not isinstance(exc, WorkflowManagerError),
                )
        return settled

    async def reconcile(self, row: DeploymentRow) -> int:
        """One deployment (see the module docstring); 1 when it settled."""
        store = DeploymentStore(self._pool)
        deployment = await self._deployment(row)
        if deployment is None:
            return await self._fail(row, "the model or its version is no longer recorded")
        if row.observed_generation < row.generation:
            await self._provisioner.tenant(deployment.tenant)
            await self._provisioner.deployment(deployment)
            await self._token(row, deployment)
            await store.applied(row.model_id, row.environment, row.generation)
            log.info(
                "deployment_applied",
                model=row.model_id,
                environment=row.environment,
                version=row.version,
                generation=row.generation,
            )
        status = await self._provisioner.status(deployment)
        if status.ready and status.current:
            url = f"{self._scheme}://{deployment_host(deployment, self._platform)}"
            if await store.observe(
                row.model_id, row.environment, row.generation, state="ready", url=url
            ):
                log.info(
                    "deployment_ready",
                    model=row.model_id,
                    environment=row.environment,
                    version=row.version,
                    url=url,
                )
                return 1
            return 0
        if status.failed and status.current:
            return await self._fail(row, status.message or "KServe reported a failure")
        if datetime.now(UTC) >= row.deadline:
            waited = (row.deadline - row.requested_at).total_seconds()
            detail = f" (KServe: {status.message})" if status.message else ""
            return await self._fail(row, f"not ready within {waited:.0f} seconds{detail}")
        return 0

    async def _fail(self, row: DeploymentRow, message: str) -> int:
        if await DeploymentStore(self._pool).observe(
            row.model_id, row.environment, row.generation, state="failed", message=message
        ):
            log.warning(
                "deployment_failed",
                model=row.model_id,
                environment=row.environment,
                version=row.version,
                reason=message[:300],
            )
            return 1
        return 0

    async def _deployment(self, row: DeploymentRow) -> Deployment | None:
        registry = RegistryReader(self._pool)
        model = await registry.find(row.model_id, tenant=None)
        version = await registry.version(row.model_id, row.version)
        if model is None or version is None:
            return None
        serving = ModelServing.from_release(Serving.model_validate(row.serving))
        return Deployment(
            tenant=model.tenant,
            model=model.name,
            environment=row.environment,
            storage_prefix=version.prefix,
            serving=serving,
            model_file=version.model_file,
        )

    async def _token(self, row: DeploymentRow, deployment: Deployment) -> None:
        """At first deploy: the deployment's endpoint and its first token, kept sealed."""
        tokens = TokenStore(self._pool)
        registered = await tokens.register_deployment(
            tenant=deployment.tenant,
            model=deployment.model,
            environment=deployment.environment,
            domain=self._platform.domain,
        )
        if row.token_sealed is not None or self._seal_key is None:
            return
        issued = await tokens.issue(actor=ACTOR, deployment_id=registered.id)
        sealed = seal(
            issued.token,
            key=self._seal_key,
            model_id=row.model_id,
            environment=row.environment,
        )
        if not await DeploymentStore(self._pool).seal_token(row.model_id, row.environment, sealed):
            await tokens.revoke(issued.token_id, actor=ACTOR)  # another leader kept one first
