"""Git sync's test world: a real Git smart-HTTP server with basic auth (``sim.git_server``:
``git http-backend`` over HTTPS), and the pipelines stack configured to trust its CA.
``git_server`` and ``git_stack`` are fixtures (re-exported by conftest.py)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from compiler.gitsync.addresses import RemotePolicy
from compiler.gitsync.reach import Lookup, Reach, system_lookup
from shared import labels as L
from shared.config import PRIVATE_RANGES
from shared.k8s_objects import KubeObjects
from sim.git_server import GitServer
from tests.integration.compiler.pipeline_stack import YAML_TEMPLATE, Stack, make_stack

USER = "deploy-bot"
PASSWORD = "s3cr3t-Pa55w0rd-9f1c2ab"  # distinctive, so a leak anywhere is found by search
SECRET = "git-creds"
PATH = "pipelines/etl.yaml"


@pytest.fixture
async def git_server(tmp_path: Path) -> AsyncIterator[GitServer]:
    root = tmp_path / "repositories"
    root.mkdir()
    server = await GitServer(root, {USER: PASSWORD}).start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def git_stack(
    db: asyncpg.Pool,
    database_url: str,
    settings_factory: Any,
    git_server: GitServer,
    tmp_path: Path,
) -> AsyncIterator[Stack]:
    workdir = tmp_path / "git-work"
    workdir.mkdir()
    async for value in make_stack(
        db,
        database_url,
        settings_factory,
        GIT_CA_BUNDLE=str(git_server.ca_file),
        GIT_ALLOW_REMOTES=allowed(git_server),
        GIT_WORKDIR=str(workdir),
        GIT_TIMEOUT=20.0,
    ):
        yield value


def allowed(server: GitServer) -> str:
    """GIT_ALLOW_REMOTES for the tests' server: exactly its host and port, no range."""
    return f"127.0.0.1:{server.port}"


def reach(server: GitServer, *, lookup: Lookup = system_lookup) -> Reach:
    """What the compiler reaches with the tests' settings: the tests' server and no other
    address inside the platform."""
    return Reach(RemotePolicy.of(deny=PRIVATE_RANGES, allow=[allowed(server)]), lookup=lookup)


async def store_credentials(
    stack: Stack, *, password: str = PASSWORD, tenant: str = "acme", name: str = SECRET
) -> None:
    """The tenant's data secret holding the Git credentials (labelled as the data-secrets API
    labels them), in its namespace (provisioned first)."""
    await stack.compiler.tenants.ensure(tenant)
    await write_credentials(KubeObjects(stack.kube), password=password, tenant=tenant, name=name)


async def write_credentials(
    objects: KubeObjects, *, password: str = PASSWORD, tenant: str = "acme", name: str = SECRET
) -> None:
    namespace = f"{L.DATA_NAMESPACE_PREFIX}{tenant}"
    await objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    await objects.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {L.DATA_SECRET: L.DATA_SECRET_VALUE},
            },
            "type": "Opaque",
            "data": {
                "username": base64.b64encode(USER.encode()).decode(),
                "password": base64.b64encode(password.encode()).decode(),
            },
        }
    )


def git_body(
    server: GitServer,
    repository: str,
    *,
    name: str | None = None,
    path: str = PATH,
    branch: str = "main",
    secret: str | None = SECRET,
) -> dict[str, Any]:
    definition: dict[str, Any] = {
        "type": "git",
        "repository": server.repository_url(repository),
        "branch": branch,
        "path": path,
    }
    if secret is not None:
        definition["credentials_secret"] = secret
    return {"name": name or repository, "description": "from Git", "definition": definition}


def template(size: str = "10") -> str:
    """The pipeline document kept in the repositories: the YAML test template, with a default."""
    return YAML_TEMPLATE.replace('value: "10"', f'value: "{size}"')
