"""shared.mlflow against the real MLflow server: the administrator's calls, and what leaves
when MLflow refuses (our error types, MLflow's error code, never its text: some quote the SQL
with a password's hash)."""

from __future__ import annotations

import uuid

import aiohttp
import pytest

from shared.errors import Conflict, DependencyDown
from shared.mlflow import MlflowClient
from sim.mlflow import MlflowServer
from sim.ports import free_port


def client(
    http: aiohttp.ClientSession | None, server: MlflowServer, *, password: str | None = None
) -> MlflowClient:
    return MlflowClient(
        http,
        base_url=server.url,
        username=server.admin_username,
        password=password or server.admin_password,
    )


async def test_accounts_and_what_a_refusal_carries(mlflow_server: MlflowServer) -> None:
    name, password = f"u{uuid.uuid4().hex[:8]}", "first-password-123"
    async with aiohttp.ClientSession() as http:
        admin = client(http, mlflow_server)
        assert not await admin.user_exists(name)
        await admin.create_user(name, password)
        assert await admin.user_exists(name)
        with pytest.raises(Conflict) as taken:
            await admin.create_user(name, "second-password-456")
        shown = f"{taken.value.message} {taken.value.details}"
        assert "scrypt" not in shown
        assert "second-password" not in shown
        assert taken.value.details == {
            "dependency": "mlflow",
            "mlflow_error": "RESOURCE_ALREADY_EXISTS",
        }
        assert await admin.authenticates(name, password)
        assert not await admin.authenticates(name, "wrong")
        await admin.update_password(name, "third-password-789")
        assert await admin.authenticates(name, "third-password-789")


async def test_grants_replace_and_repeat(mlflow_server: MlflowServer) -> None:
    name = f"u{uuid.uuid4().hex[:8]}"
    # No session: the compiler's way, one per call.
    admin = client(None, mlflow_server)
    await admin.create_user(name, "a-password-123456")
    experiment = await admin.create_experiment(f"grants/{name}", tags={"k": "v"})
    assert await admin.permission(name, experiment) == "NO_PERMISSIONS"
    await admin.grant(name, experiment, "READ")
    await admin.grant(name, experiment, "EDIT")
    await admin.grant(name, experiment, "EDIT")
    assert await admin.permission(name, experiment) == "EDIT"
    found = await admin.experiment_by_name(f"grants/{name}")
    assert found is not None
    assert found["experiment_id"] == experiment
    assert await admin.experiment("987654321") is None
    assert await admin.experiment_by_name("no/such/experiment") is None
    assert await admin.run("f" * 32) is None
    with pytest.raises(Conflict):
        await admin.create_experiment(f"grants/{name}")


async def test_a_wrong_administrator_or_no_server_is_a_dependency_down(
    mlflow_server: MlflowServer,
) -> None:
    with pytest.raises(DependencyDown) as refused:
        await client(None, mlflow_server, password="not-the-password").user_exists("anyone")
    assert "refused workflow-manager's administrator" in refused.value.message
    gone = MlflowClient(
        None, base_url=f"http://127.0.0.1:{free_port()}", username="a", password="b"
    )
    with pytest.raises(DependencyDown) as down:
        await gone.experiment("1")
    assert down.value.details["dependency"] == "mlflow"
