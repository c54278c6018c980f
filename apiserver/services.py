"""What the handlers use, handed to the app factory as arguments (tests pass their own)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import asyncpg
from aiohttp import web
from kubernetes_asyncio.client import ApiClient

from apiserver.artifacts.objects import ObjectStore
from apiserver.grants.pg_grants import GrantStore
from apiserver.pipelines.compiler_client import CompilerClient
from apiserver.runs.pg_runs import RunReader
from shared import labels as L
from shared.cursors import CursorCodec, cursor_key
from shared.db.clusters import ClusterStore
from shared.db.deployments import DeploymentStore
from shared.db.experiments import ExperimentReader
from shared.db.pipelines import PipelineReader
from shared.db.registry import RegistryReader
from shared.mlflow import MlflowClient


class ClusterConnections(Protocol):
    """An ApiClient per watched cluster id (``apiserver.clusters.connections``)."""

    async def api(self, cluster_id: str) -> ApiClient: ...

    async def invalidate(self) -> None: ...


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Services:
    pool: asyncpg.Pool
    runs: RunReader
    connections: ClusterConnections
    objects: ObjectStore | None
    artifact_bucket: str | None
    argo_data_server_url: str
    compiler: CompilerClient | None = None
    mlflow: MlflowClient | None = None  # MLflow's administrator (None: tracking not configured)
    # Signs every list's cursors. The runner derives it from API_KEY, which all replicas share;
    # left out (tests), a random key good for this process only.
    cursors: CursorCodec = field(default_factory=lambda: CursorCodec(cursor_key(None)))
    clock: Callable[[], datetime] = utc_now
    heartbeat_seconds: float = 15.0
    argo_data_instance_id: str = L.DATA_CONTROLLER_INSTANCE_ID
    # Opens the deployments' sealed tokens (DEPLOYMENT_TOKEN_KEY; None: none are shown).
    deployment_token_key: bytes | None = None
    # Repositories over ``pool``, built here so that every caller gets the same ones.
    clusters: ClusterStore = field(init=False)
    grants: GrantStore = field(init=False)
    pipelines: PipelineReader = field(init=False)
    experiments: ExperimentReader = field(init=False)
    registry: RegistryReader = field(init=False)
    deployments: DeploymentStore = field(init=False)

    def __post_init__(self) -> None:
        self.clusters = ClusterStore(self.pool)
        self.grants = GrantStore(self.pool)
        self.pipelines = PipelineReader(self.pool)
        self.experiments = ExperimentReader(self.pool)
        self.registry = RegistryReader(self.pool)
        self.deployments = DeploymentStore(self.pool)


SERVICES = web.AppKey("services", Services)
