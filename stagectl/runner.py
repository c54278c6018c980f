"""Wires the stage controller: migrations, the pool, the host's client, the registry's object
storage, and, while this replica leads the ``wm-stagectl`` lease, the informer over the data
controller's workflows, the dispatcher and the approvals watch.

Every replica serves health and metrics; one at a time does stages. Leadership is the only
coordination between replicas and is not needed for correctness: every stage is idempotent
(docs/operations.md, "stagectl"), so a new leader continues where the old one stopped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
from kubernetes_asyncio.client import ApiClient

from shared import labels as L
from shared.argo import ArgoServer
from shared.config import Settings
from shared.db.migrations import apply_migrations
from shared.db.pool import create_pool, database_ready
from shared.errors import ConfigError, DependencyDown
from shared.health import HealthServer
from shared.iam_users import REQUIRED as IAM_REQUIRED
from shared.k8s import host_client
from shared.k8s_informer import ChangeQueue, InformerOptions, WorkflowInformer
from shared.k8s_objects import KubeObjects
from shared.leader import LeaderElector
from shared.logging import get_logger
from shared.runs import ClusterRef
from shared.tasks import Supervisor
from shared.token_sealing import parse_key
from stagectl import metrics
from stagectl.approvals import ApprovalWatch
from stagectl.controller import Dispatcher
from stagectl.deployments import DeploymentReconciler
from stagectl.s3_registry import RegistryObjects
from stagectl.serving.params import ServingPlatform
from stagectl.serving.provision import Provisioner
from stagectl.serving.readers import ModelReaders
from stagectl.work import StageWork

log = get_logger(__name__)

LEASE_NAME = "wm-stagectl"
HOST = ClusterRef("host", "host")


@dataclass
class Parts:
    settings: Settings
    pool: asyncpg.Pool
    host_api: ApiClient
    work: StageWork
    objects: RegistryObjects
    deployments: DeploymentReconciler | None = None  # None: ML_SERVING_DOMAIN unset


def deployment_reconciler(
    settings: Settings, *, pool: asyncpg.Pool, host_api: ApiClient
) -> DeploymentReconciler | None:
    """The reconciler of model deployments, when model serving is configured
    (ML_SERVING_DOMAIN); ConfigError naming what is wrong with its settings."""
    if not settings.ML_SERVING_DOMAIN:
        return None
    try:
        platform = ServingPlatform.from_settings(settings)
        key = settings.DEPLOYMENT_TOKEN_KEY
        seal_key = parse_key(key.get_secret_value()) if key is not None else None
    except ValueError as exc:
        raise ConfigError(f"model serving: {exc}") from None
    readers = None
    if all(getattr(settings, name) for name in IAM_REQUIRED):
        readers = ModelReaders.from_settings(settings, endpoint_url=settings.IAM_ENDPOINT_URL)
    return DeploymentReconciler(
        source=settings,
        pool=pool,
        provisioner=Provisioner(KubeObjects(host_api), platform, readers),
        platform=platform,
        seal_key=seal_key,
        poll=settings.STAGE_DEPLOY_POLL,
    )


def assemble(settings: Settings, *, pool: asyncpg.Pool, host_api: ApiClient) -> Parts:
    """The controller's parts over open connections (tests pass their own)."""
    settings.require("ARTIFACT_BUCKET")
    objects = RegistryObjects(
        bucket=str(settings.ARTIFACT_BUCKET),
        region=settings.AWS_REGION,
        endpoint_url=settings.S3_ENDPOINT_URL,
    )
    work = StageWork(
        pool=pool,
        argo=ArgoServer.from_url(host_api, settings.ARGO_DATA_SERVER_URL),
        objects=objects,
        approval_timeout=settings.STAGE_APPROVAL_TIMEOUT,
        deploy_poll=settings.STAGE_DEPLOY_POLL,
    )
    return Parts(
        settings,
        pool,
        host_api,
        work,
        objects,
        deployment_reconciler(settings, pool=pool, host_api=host_api),
    )


class Leading:
    """What runs while this replica leads, and whether it is watching."""

    def __init__(self, parts: Parts, *, unready_after: float = 60.0) -> None:
        self._parts = parts
        self._informer: WorkflowInformer | None = None
        self._unready_after = unready_after

    async def run(self) -> None:
        """The informer, the dispatcher and the approvals watch, until cancelled."""
        settings = self._parts.settings
        queue = ChangeQueue()
        selector = f"{L.ARGO_CONTROLLER_INSTANCE_ID}={settings.ARGO_DATA_INSTANCE_ID}"
        self._informer = WorkflowInformer(
            cluster=HOST,
            api_client=self._parts.host_api,
            queue=queue,
            options=InformerOptions(label_selector=selector, unready_after=self._unready_after),
            metrics=metrics.INFORMER,
        )
        dispatcher = Dispatcher(
            queue=queue, work=self._parts.work, concurrency=settings.STAGE_CONCURRENCY
        )
        approvals = ApprovalWatch(
            source=settings,
            pool=self._parts.pool,
            work=self._parts.work,
            sweep_interval=settings.STAGE_SWEEP_INTERVAL,
        )
        log.info("stagectl_leading", instance_id=settings.ARGO_DATA_INSTANCE_ID)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._informer.run())
                group.create_task(dispatcher.run())
                group.create_task(approvals.run())
                if self._parts.deployments is not None:
                    group.create_task(self._parts.deployments.run())
        finally:
            self._informer = None

    async def ready(self) -> None:
        """Not ready while leading with a watch that has failed for ``unready_after``."""
        informer = self._informer
        if informer is None:
            return
        since = informer.state.failing_since
        if since is not None and time.monotonic() - since > self._unready_after:
            raise DependencyDown(
                f"the watch of the data controller's workflows is failing: "
                f"{informer.state.last_error or 'unknown'}"
            )


@asynccontextmanager
async def stagectl_parts(settings: Settings) -> AsyncIterator[Parts]:
    await apply_migrations(settings)
    pool = await create_pool(settings, application_name="wm-stagectl")
    try:
        host_api = await host_client(settings)
        try:
            parts = assemble(settings, pool=pool, host_api=host_api)
            try:
                yield parts
            finally:
                parts.objects.close()
        finally:
            await host_api.close()
    finally:
        await pool.close()


async def run(settings: Settings, workers: Supervisor) -> None:
    """Serve health and metrics and, while leading, do stages; until cancelled."""
    async with (
        HealthServer.from_settings(settings) as health,
        stagectl_parts(settings) as parts,
    ):
        health.add_check("postgresql", database_ready(parts.pool))
        leading = Leading(parts)
        health.add_check("stages", leading.ready)
        elector = LeaderElector.from_settings(parts.host_api, settings, name=LEASE_NAME)
        async with elector:
            workers.spawn("stages", lambda: elector.run_while_leading(leading.run))
            log.info("stagectl_started", health_port=health.port)
            await asyncio.Event().wait()
