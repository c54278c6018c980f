"""Wires the compiler deployable: migrations, the pool, the host cluster's client, tenant
provisioning with its leader-elected reconciler, the pipelines' attachments with their
leader-elected drift reconciler, the run notification sender, Git sync with its leader-elected
poller, and the internal API on HTTP_PORT.

Every replica serves the internal API (validate, save, run, sync: the apiserver's calls); only
the leader of the ``wm-compiler`` lease runs the reconcilers, so one replica at a time walks
every tenant and every pipeline's attachments (CronWorkflow, event objects) looking for drift;
only the leader of ``wm-compiler-notify`` sends notifications and only the leader of
``wm-compiler-git`` polls the Git-defined pipelines (leases of their own, so the work may land
on different replicas).
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

from compiler.automation.reconciler import AttachmentReconciler
from compiler.automation.service import ScheduleService
from compiler.automation.webhooks import EventTriggers
from compiler.gitsync.addresses import RemotePolicy
from compiler.gitsync.git_cli import GitCli
from compiler.gitsync.http_refs import RefLister
from compiler.gitsync.reach import Reach
from compiler.gitsync.repositories import GitRepositories
from compiler.gitsync.syncing import GitSync
from compiler.internal_api import create_app
from compiler.notifications.service import NotificationSender, SenderConfig
from compiler.pipelines.compile import StepLimits
from compiler.pipelines.definitions import Limits
from compiler.pipelines.service import PipelineService
from compiler.pipelines.yamldoc import MAX_BYTES as MAX_DOCUMENT_BYTES
from compiler.secrets.service import DataSecretService
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
from shared.k8s_objects import KubeObjects
from shared.leader import LeaderElector
from shared.logging import get_logger
from shared.tasks import Supervisor

log = get_logger(__name__)

LEASE_NAME = "wm-compiler"
NOTIFY_LEASE_NAME = "wm-compiler-notify"
GIT_LEASE_NAME = "wm-compiler-git"


@dataclass
class Parts:
    pool: asyncpg.Pool
    host_api: ApiClient
    tenants: TenantProvisioner
    service: PipelineService
    git: GitSync
    app: web.Application
    schedules: ScheduleService
    notifications: NotificationSender
    secrets: DataSecretService | None = None
    drift: AttachmentReconciler | None = None


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
        schedule_min_interval=settings.SCHEDULE_MIN_INTERVAL,
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
    secrets = DataSecretService(
        pool=pool,
        objects=objects,
        tenants=tenants,
        max_per_tenant=settings.DATA_SECRETS_MAX_PER_TENANT,
    )
    argo = ArgoServer.from_url(host_api, settings.ARGO_DATA_SERVER_URL)
    # A tenant's Git remote reaches no address inside the platform (compiler.gitsync.addresses).
    reach = Reach(RemotePolicy.of(deny=settings.GIT_DENY_CIDRS, allow=settings.GIT_ALLOW_REMOTES))
    refs = RefLister(
        reach=reach,
        timeout=settings.GIT_TIMEOUT,
        ca_bundle=settings.GIT_CA_BUNDLE,
        connections=settings.GIT_SYNC_CONCURRENCY,
    )
    repositories = GitRepositories(
        secrets=objects,
        refs=refs,
        cli=GitCli(
            workdir=settings.GIT_WORKDIR,
            ca_bundle=settings.GIT_CA_BUNDLE,
            timeout=settings.GIT_TIMEOUT,
            max_fetch_bytes=settings.GIT_FETCH_MAX_BYTES,
            max_document_bytes=MAX_DOCUMENT_BYTES,
            reach=reach,
        ),
        fetches=settings.GIT_FETCH_CONCURRENCY,
    )

    async def lint(namespace: str, template: Mapping[str, Any]) -> object:
        return await argo.lint_template(namespace, template)

    # What a pipeline owns besides its templates, following its current version.
    schedules = ScheduleService(
        pool=pool, objects=objects, instance_id=settings.ARGO_DATA_INSTANCE_ID
    )
    events = EventTriggers.from_settings(settings, pool=pool, objects=objects)
    service = PipelineService(
        pool=pool,
        objects=objects,
        tenants=tenants,
        lint=lint,
        limits=limits_of(settings),
        instance_id=settings.ARGO_DATA_INSTANCE_ID,
        attachments=[
            schedules,
            events,
            *ExperimentTracking.from_settings(
                settings, objects=objects, store=ExperimentStore(pool)
            ),
        ],
        data_secrets=secrets,
        git=repositories,
    )
    git = GitSync(
        pool=pool,
        repositories=repositories,
        service=service,
        concurrency=settings.GIT_SYNC_CONCURRENCY,
    )
    key = settings.INTERNAL_API_KEY
    if key is None:
        log.warning("internal_api_key_unset", consequence="every request is refused")
    app = create_app(
        service,
        git,
        schedules=schedules,
        triggers=events,
        internal_key=key.get_secret_value() if key else None,
        data_secrets=secrets,
    )
    notifications = NotificationSender(
        pool=pool,
        objects=objects,
        config=SenderConfig.from_settings(settings),
        listen_dsn=settings,
    )
    # Tracking is left out of the drift passes: each of its checks costs MLflow round trips, and
    # every save of an ML pipeline converges it.
    drift = AttachmentReconciler(
        pool=pool,
        objects=objects,
        attachments=[schedules, events],
        schedules=schedules,
        events_namespace=settings.EVENTS_NAMESPACE,
    )
    return Parts(
        pool, host_api, tenants, service, git, app, schedules, notifications, secrets, drift
    )


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
    """Serve the internal API and, while leading, reconcile tenants and send notifications
    (two leases); until cancelled."""
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
            notifier = LeaderElector.from_settings(parts.host_api, settings, name=NOTIFY_LEASE_NAME)
            git_elector = LeaderElector.from_settings(parts.host_api, settings, name=GIT_LEASE_NAME)
            interval = settings.TENANT_RECONCILE_INTERVAL
            git_interval = settings.GIT_SYNC_INTERVAL
            async with elector, notifier, git_elector:
                workers.spawn(
                    "tenants",
                    lambda: elector.run_while_leading(lambda: parts.tenants.loop(interval)),
                )
                drift = parts.drift
                assert drift is not None
                pipelines_interval = settings.PIPELINE_RECONCILE_INTERVAL
                workers.spawn(
                    "pipeline-drift",
                    lambda: elector.run_while_leading(lambda: drift.loop(pipelines_interval)),
                )
                workers.spawn(
                    "notifications",
                    lambda: notifier.run_while_leading(parts.notifications.run),
                )
                workers.spawn(
                    "git-sync",
                    lambda: git_elector.run_while_leading(lambda: parts.git.loop(git_interval)),
                )
                log.info("compiler_started", port=settings.HTTP_PORT, health_port=health.port)
                await asyncio.Event().wait()
        finally:
            await runner.cleanup()
