"""Wires the compiler deployable: migrations, the pool, the host cluster's client, tenant
provisioning with its leader-elected reconciler, and the internal API on HTTP_PORT.

Every replica serves the internal API (validate, save, run: the apiserver's calls); only the
leader of the ``wm-compiler`` lease runs the reconciler, so one replica at a time walks every
tenant looking for drift.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from aiohttp import web
from kubernetes_asyncio.client import ApiClient

from compiler.internal_api import create_app
from compiler.k8s_objects import KubeObjects
from compiler.pipelines.compile import StepLimits
from compiler.pipelines.service import Limits, PipelineService
from compiler.tenants.service import TenantProvisioner
from compiler.tenants.storage_users import StorageUsers
from compiler.tracking.service import ExperimentTracking, tracking_configured
from shared.argo import ArgoServer
from shared.config import Settings
from shared.db.experiments import ExperimentStore
from shared.db.migrations import apply_migrations
from shared.db.pool import create_pool, database_ready
from shared.health import HealthServer
from shared.k8s import host_client
from shared.leader import LeaderElector
from shared.logging import get_logger
from shared.tasks import Supervisor

log = get_logger(__name__)

LEASE_NAME = "wm-compiler"


@dataclass
class Parts:
    pool: asyncpg.Pool
    host_api: ApiClient
    tenants: TenantProvisioner
    service: PipelineService
    app: web.Application


def storage_users(settings: Settings) -> StorageUsers | None:
    """Per-tenant IAM users when the IAM conventions are configured; None (logged) otherwise."""
    names = (
        "ARTIFACT_BUCKET",
        "ARTIFACT_IAM_USER_PATH",
        "ARTIFACT_IAM_USER_PREFIX",
        "ARTIFACT_IAM_BOUNDARY_ARN",
    )
    if not all(getattr(settings, name) for name in names):
        log.warning(
            "storage_users_disabled",
            reason="ARTIFACT_BUCKET and ARTIFACT_IAM_* are not all set",
            consequence="tenant namespaces get no storage credentials",
        )
        return None
    return StorageUsers.from_settings(settings, endpoint_url=settings.IAM_ENDPOINT_URL)


def limits_of(settings: Settings) -> Limits:
    return Limits(
        data=StepLimits.from_settings(settings, "data"),
        ml=StepLimits.from_settings(settings, "ml"),
        artifact_bucket=settings.ARTIFACT_BUCKET or "",
        templates_kept=settings.PIPELINE_TEMPLATES_KEPT,
        tracking=tracking_configured(settings),
    )


def assemble(
    settings: Settings,
    *,
    pool: asyncpg.Pool,
    host_api: ApiClient,
    storage: StorageUsers | None,
) -> Parts:
    """The compiler's parts over open connections (tests pass their own)."""
    objects = KubeObjects(host_api)
    tenants = TenantProvisioner(
        pool=pool,
        objects=objects,
        settings=settings,
        storage=storage,
    )
    argo = ArgoServer.from_url(host_api, settings.ARGO_DATA_SERVER_URL)

    async def lint(namespace: str, template: Mapping[str, Any]) -> object:
        return await argo.lint_template(namespace, template)

    service = PipelineService(
        pool=pool,
        objects=objects,
        tenants=tenants,
        lint=lint,
        limits=limits_of(settings),
        instance_id=settings.ARGO_DATA_INSTANCE_ID,
        attachments=[
            *ExperimentTracking.from_settings(
                settings, objects=objects, store=ExperimentStore(pool)
            ),
        ],
    )
    key = settings.INTERNAL_API_KEY
    if key is None:
        log.warning("internal_api_key_unset", consequence="every request is refused")
    app = create_app(service, internal_key=key.get_secret_value() if key else None)
    return Parts(pool, host_api, tenants, service, app)


@contextlib.asynccontextmanager
async def compiler_parts(settings: Settings) -> AsyncIterator[Parts]:
    await apply_migrations(settings)
    pool = await create_pool(settings, application_name="wm-compiler")
    try:
        host_api = await host_client(settings)
        try:
            yield assemble(settings, pool=pool, host_api=host_api, storage=storage_users(settings))
        finally:
            await host_api.close()
    finally:
        await pool.close()


async def run(settings: Settings, workers: Supervisor) -> None:
    """Serve the internal API and, while leading, reconcile tenants; until cancelled."""
    async with (
        HealthServer.from_settings(settings) as health,
        compiler_parts(settings) as parts,
    ):
        runner = web.AppRunner(
            parts.app, access_log=None, handle_signals=False, shutdown_timeout=5.0
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, "0.0.0.0", settings.HTTP_PORT, reuse_address=True).start()

            health.add_check("postgresql", database_ready(parts.pool))
            # What start-up allocated (Hera's models above all) lives as long as the process:
            # out of the collector's reach, full collections stop adding tens of milliseconds
            # to a save's schema check.
            gc.collect()
            gc.freeze()
            elector = LeaderElector.from_settings(parts.host_api, settings, name=LEASE_NAME)
            interval = settings.TENANT_RECONCILE_INTERVAL
            async with elector:
                workers.spawn(
                    "tenants",
                    lambda: elector.run_while_leading(lambda: parts.tenants.loop(interval)),
                )
                log.info("compiler_started", port=settings.HTTP_PORT, health_port=health.port)
                await asyncio.Event().wait()
        finally:
            await runner.cleanup()
