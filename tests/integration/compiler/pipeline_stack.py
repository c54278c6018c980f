"""The pipelines stack the pipeline tests drive: the apiserver's routes, the compiler's internal
API behind them, a sim host cluster with Argo and real PostgreSQL (tenant provisioning included,
storage users off). ``stack`` is a fixture (re-exported by conftest.py); the rest are helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer
from kubernetes_asyncio.client import ApiClient

from apiserver.app import create_app as create_api
from apiserver.artifacts.s3_store import S3ObjectStore
from apiserver.clusters.connections import ConnectionCache
from apiserver.pipelines.compiler_client import CompilerClient
from apiserver.runner import deployment_key
from apiserver.runs.pg_runs import RunReader
from apiserver.services import Services
from apiserver.stream.hub import StreamHub
from apiserver.stream.pg_changes import PgChangeSource
from compiler.runner import Parts, assemble
from shared.k8s import client_from_kubeconfig
from shared.mlflow import MlflowClient
from sim.argo.controller import ArgoSimulator
from sim.world import World, start_world

API_KEY = "test-api-key"
INTERNAL_KEY = "test-internal-key"
WRITE = "pipelines.read,pipelines.write,pipelines.run"
NS = "kubeopera-data-acme"
INSTANCE_LABEL = "workflows.argoproj.io/controller-instanceid"
INLINE = {
    "entrypoint": "main",
    "templates": [{"name": "main", "container": {"image": "busybox", "args": ["echo ci"]}}],
}


def headers(
    tenant: str | None = "acme",
    *,
    permissions: str = WRITE,
    admin: bool = False,
    actor: str = "alice@acme",
) -> dict[str, str]:
    values = {
        "X-API-Key": API_KEY,
        "X-Kubeopera-Admin": "true" if admin else "false",
        "X-Kubeopera-Actor": actor,
        "X-Kubeopera-Permissions": permissions,
    }
    if tenant is not None:
        values["X-Kubeopera-Tenant"] = tenant
    return values


def wizard(*, fail_step: bool = False, extra_step: bool = False) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {
            "name": "extract",
            "image": "ghcr.io/acme/extract:1.0",
            "command": ["extract"],
            "args": ["--day", "{{workflow.parameters.day}}"],
            "env": [{"name": "SIM_FAIL", "value": "true" if fail_step else "false"}],
        },
        {
            "name": "load",
            "image": "ghcr.io/acme/load:1.0",
            "command": ["load"],
            "depends_on": ["extract"],
        },
    ]
    if extra_step:
        steps.append({"name": "report", "image": "ghcr.io/acme/report:1.0", "depends_on": ["load"]})
    return {
        "apiVersion": "pipelines.kubeopera.io/v1",
        "parameters": [
            {"name": "day", "default": "2026-01-01"},
            {"name": "shards", "type": "integer", "default": 4},
        ],
        "steps": steps,
    }


def body(name: str = "nightly", **spec: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": "nightly load",
        "definition": {"type": "wizard", "spec": wizard(**spec)},
    }


YAML_TEMPLATE = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata:
  name: mine
spec:
  entrypoint: main
  arguments:
    parameters:
      - name: size
        value: "10"
  templates:
    - name: main
      container:
        image: alpine:3.20
        command: [sh, -c, "echo {{workflow.parameters.size}}"]
"""

ESCAPING_YAML = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata:
  name: sneaky
spec:
  entrypoint: main
  hostNetwork: true
  templates:
    - name: main
      container:
        image: alpine:3.20
        securityContext: {privileged: true}
        volumeMounts: [{name: root, mountPath: /host}]
      volumes:
        - name: root
          hostPath: {path: /}
"""


@dataclass
class Stack:
    world: World
    kube: ApiClient
    api: TestClient[Any, Any]
    compiler: Parts
    internal: TestClient[Any, Any]  # the compiler's internal API
    pool: asyncpg.Pool

    async def call(
        self, method: str, path: str, *, as_: dict[str, str] | None = None, **kwargs: Any
    ) -> tuple[int, Any]:
        response = await self.api.request(
            method, f"/api/v1/{path}", headers=as_ or headers(), **kwargs
        )
        return response.status, await response.json()

    def templates(self, namespace: str = NS) -> list[str]:
        store = self.world.host.store
        rtype = store.resolve("argoproj.io", "v1alpha1", "workflowtemplates")
        items, _ = store.list(rtype, namespace)
        return sorted(item["metadata"]["name"] for item in items)


async def make_stack(
    db: asyncpg.Pool,
    database_url: str,
    settings_factory: Any,
    *,
    world_options: dict[str, Any] | None = None,
    compiler_pool: asyncpg.Pool | None = None,
    **overrides: Any,
) -> AsyncIterator[Stack]:
    """The stack; ``world_options`` go to ``start_world`` (object storage for artifacts),
    ``compiler_pool`` is the compiler's own pool (``db`` by default), ``overrides`` go to the
    settings."""
    options: dict[str, Any] = {"tick": 0.01, "autostart": False, "pod_gc_delay": 0}
    world = await start_world(1, **{**options, **(world_options or {})})
    kube = await client_from_kubeconfig(world.host.kubeconfig)
    # ARGO_DATA_SERVER_URL and ARGO_DATA_INSTANCE_ID by default: the sim host's data controller.
    settings = settings_factory(
        **{"INTERNAL_API_KEY": INTERNAL_KEY, "ARTIFACT_BUCKET": "artifacts", **overrides}
    )
    parts = assemble(settings, pool=compiler_pool or db, host_api=kube, storage=None)
    compiler_client: TestClient[Any, Any] = TestClient(TestServer(parts.app))
    await compiler_client.start_server()
    session = aiohttp.ClientSession()
    services = Services(
        pool=db,
        runs=RunReader(db),
        connections=ConnectionCache(registry=None, host_factory=None),
        # Object storage only where a test gives it one (the release stack's moto).
        objects=(
            S3ObjectStore(region=settings.AWS_REGION, endpoint_url=settings.S3_ENDPOINT_URL)
            if settings.S3_ENDPOINT_URL
            else None
        ),
        artifact_bucket=settings.ARTIFACT_BUCKET if settings.S3_ENDPOINT_URL else None,
        argo_data_server_url=settings.ARGO_DATA_SERVER_URL,
        compiler=CompilerClient(
            session, base_url=str(compiler_client.make_url("")), internal_key=INTERNAL_KEY
        ),
        mlflow=MlflowClient.from_settings(session, settings),
        deployment_token_key=deployment_key(settings),
    )
    hub = StreamHub(PgChangeSource(db, dsn=database_url))
    api: TestClient[Any, Any] = TestClient(TestServer(create_api(services, hub, api_key=API_KEY)))
    await api.start_server()
    try:
        yield Stack(world, kube, api, parts, compiler_client, db)
    finally:
        await api.close()
        await session.close()
        await compiler_client.close()
        await kube.close()
        await world.stop()


@pytest.fixture
async def stack(db: asyncpg.Pool, database_url: str, settings_factory: Any) -> AsyncIterator[Stack]:
    async for value in make_stack(db, database_url, settings_factory):
        yield value


@pytest.fixture
async def ml_stack(
    db: asyncpg.Pool, database_url: str, settings_factory: Any, mlflow_server: Any
) -> AsyncIterator[Stack]:
    """``stack`` with experiment tracking: the compiler and the apiserver are MLflow's
    administrator on the session's real MLflow server (``mlflow_server``)."""
    async for value in make_stack(
        db,
        database_url,
        settings_factory,
        MLFLOW_URL=mlflow_server.url,
        MLFLOW_ADMIN_USERNAME=mlflow_server.admin_username,
        MLFLOW_ADMIN_PASSWORD=mlflow_server.admin_password,
    ):
        yield value


async def finish(
    stack: Stack, name: str, *, namespace: str = NS, controller: ArgoSimulator | None = None
) -> dict[str, Any]:
    """Step one controller, by default the data controller (pipelines run there alone), until
    the workflow `name` finishes."""
    store = stack.world.host.store
    rtype = store.resolve("argoproj.io", "v1alpha1", "workflows")
    controller = controller or stack.world.host.data_argo
    assert controller is not None
    for _ in range(200):
        await controller.step()
        workflow = store.get(rtype, namespace, name)
        if workflow.get("status", {}).get("phase") in ("Succeeded", "Failed", "Error"):
            return workflow
    raise AssertionError(f"{name} did not finish")
