"""Experiment tracking end to end against the real MLflow server (basic-auth app,
NO_PERMISSIONS): an ML pipeline's save creates its tenant's account (the Secret
``kubeopera-mlflow``) and its experiment with EDIT for that account only; one tenant's
credentials, used as a training container uses them, reach nothing of another tenant's."""

from __future__ import annotations

import aiohttp

from sim.mlflow import MlflowServer
from tests.integration.compiler.mlflow_steps import (
    API2,
    Tracking,
    drop_secret,
    experiment_of,
    new_tenant,
    save_ml,
    tracking_secret,
)
from tests.integration.compiler.pipeline_stack import Stack, body, headers


async def test_an_ml_pipeline_gets_an_account_an_experiment_and_the_credentials_in_its_steps(
    ml_stack: Stack, mlflow_server: MlflowServer
) -> None:
    tenant = new_tenant()
    pipeline = await save_ml(ml_stack, tenant)

    env = tracking_secret(ml_stack, tenant)
    assert env is not None
    assert env["MLFLOW_TRACKING_USERNAME"] == f"tenant-{tenant}"
    assert env["MLFLOW_TRACKING_URI"] == mlflow_server.url
    assert len(env["MLFLOW_TRACKING_PASSWORD"]) >= 40
    experiment = await experiment_of(ml_stack, pipeline)

    status, detail = await ml_stack.call("GET", f"ml-pipelines/{pipeline}", as_=headers(tenant))
    assert status == 200
    templates = detail["current"]["template"]["spec"]["templates"]
    containers = [t["container"] for t in templates if "container" in t]
    assert containers
    for container in containers:
        assert container["envFrom"][0] == {"secretRef": {"name": "kubeopera-mlflow"}}
        assert {"name": "MLFLOW_EXPERIMENT_NAME", "value": f"{tenant}/{pipeline}"} in container[
            "env"
        ]

    async with aiohttp.ClientSession() as http:
        step = Tracking(http, env)
        status, found = await step.call(
            "GET", "/experiments/get-by-name", params={"experiment_name": f"{tenant}/{pipeline}"}
        )
        assert (status, found["experiment"]["experiment_id"]) == (200, experiment)
        run = await step.start_run(experiment)
        status, _ = await step.call(
            "POST",
            "/runs/log-metric",
            json={"run_id": run, "key": "loss", "value": 0.5, "timestamp": 1000, "step": 0},
        )
        assert status == 200
        # EDIT, not MANAGE: the tenant cannot delete its experiment.
        status, _ = await step.call(
            "POST", "/experiments/delete", json={"experiment_id": experiment}
        )
        assert status == 403

    admin = {
        "Authorization": aiohttp.encode_basic_auth(
            mlflow_server.admin_username, mlflow_server.admin_password
        )
    }
    async with (
        aiohttp.ClientSession(headers=admin) as http,
        http.get(
            f"{mlflow_server.url}/api/3.0/mlflow/users/permissions/get",
            params={
                "username": f"tenant-{tenant}",
                "resource_type": "experiment",
                "resource_id": experiment,
            },
        ) as answer,
    ):
        assert (await answer.json())["permission"] == "EDIT"


async def test_one_tenants_account_reaches_nothing_of_another_tenants(
    ml_stack: Stack,
) -> None:
    first, second = new_tenant(), new_tenant()
    mine = await save_ml(ml_stack, first)
    theirs = await save_ml(ml_stack, second)
    my_experiment = await experiment_of(ml_stack, mine)
    their_experiment = await experiment_of(ml_stack, theirs)
    my_env, their_env = tracking_secret(ml_stack, first), tracking_secret(ml_stack, second)
    assert my_env is not None
    assert their_env is not None
    assert my_env["MLFLOW_TRACKING_PASSWORD"] != their_env["MLFLOW_TRACKING_PASSWORD"]

    async with aiohttp.ClientSession() as http:
        me, them = Tracking(http, my_env), Tracking(http, their_env)
        their_run = await them.start_run(their_experiment)
        status, _ = await them.call(
            "POST",
            "/runs/log-metric",
            json={"run_id": their_run, "key": "auc", "value": 0.9, "timestamp": 1, "step": 0},
        )
        assert status == 200
        await me.start_run(my_experiment)

        denied = [
            await me.call("GET", "/experiments/get", params={"experiment_id": their_experiment}),
            await me.call("GET", "/runs/get", params={"run_id": their_run}),
            await me.call(
                "GET", "/metrics/get-history", params={"run_id": their_run, "metric_key": "auc"}
            ),
            await me.call("POST", "/runs/create", json={"experiment_id": their_experiment}),
            await me.call(
                "POST",
                "/runs/log-metric",
                json={"run_id": their_run, "key": "auc", "value": 0.1, "timestamp": 2, "step": 1},
            ),
        ]
        assert [status for status, _ in denied] == [403] * 5
        # Searches silently leave out what the account may not read.
        status, searched = await me.call(
            "POST", "/runs/search", json={"experiment_ids": [their_experiment, my_experiment]}
        )
        assert status == 200
        assert {run["info"]["experiment_id"] for run in searched["runs"]} == {my_experiment}
        status, experiments = await me.call(
            "POST", "/experiments/search", json={"max_results": 100}
        )
        assert status == 200
        assert their_experiment not in {e["experiment_id"] for e in experiments["experiments"]}
        # And the tenant's own account is no administrator.
        status, _ = await me.call("GET", "/users/get", params={"username": f"tenant-{second}"})
        assert status == 403


async def test_the_secret_is_reused_and_a_lost_one_resets_the_password(ml_stack: Stack) -> None:
    tenant = new_tenant()
    first = await save_ml(ml_stack, tenant, "first")
    env = tracking_secret(ml_stack, tenant)
    second = await save_ml(ml_stack, tenant, "second")
    assert tracking_secret(ml_stack, tenant) == env  # one account per tenant
    assert await experiment_of(ml_stack, first) != await experiment_of(ml_stack, second)

    drop_secret(ml_stack, tenant)
    status, _ = await ml_stack.call(
        "PUT", f"ml-pipelines/{first}", json=body("first", extra_step=True), as_=headers(tenant)
    )
    assert status == 200
    renewed = tracking_secret(ml_stack, tenant)
    assert env is not None
    assert renewed is not None
    assert renewed["MLFLOW_TRACKING_PASSWORD"] != env["MLFLOW_TRACKING_PASSWORD"]
    async with aiohttp.ClientSession() as http:
        status, _ = await Tracking(http, env).call("GET", "/users/current")
        assert status == 401
        status, _ = await Tracking(http, renewed).call("GET", "/users/current")
        assert status == 200


async def test_a_diverged_password_is_set_back_and_a_renamed_experiment_gets_its_name_back(
    ml_stack: Stack, mlflow_server: MlflowServer
) -> None:
    tenant = new_tenant()
    pipeline = await save_ml(ml_stack, tenant)
    experiment = await experiment_of(ml_stack, pipeline)
    env = tracking_secret(ml_stack, tenant)
    assert env is not None
    admin = {
        "Authorization": aiohttp.encode_basic_auth(
            mlflow_server.admin_username, mlflow_server.admin_password
        )
    }
    async with aiohttp.ClientSession() as http:
        status, _ = await Tracking(http, env).call(
            "POST", "/experiments/update", json={"experiment_id": experiment, "new_name": "mine"}
        )
        assert status == 200
        async with http.patch(
            f"{mlflow_server.url}{API2}/users/update-password",
            json={"username": f"tenant-{tenant}", "password": "changed-behind-our-back"},
            headers=admin,
        ) as answer:
            assert answer.status == 200
        status, _ = await Tracking(http, env).call("GET", "/users/current")
        assert status == 401

        status, _ = await ml_stack.call(
            "PUT", f"ml-pipelines/{pipeline}", json=body(extra_step=True), as_=headers(tenant)
        )
        assert status == 200
        assert tracking_secret(ml_stack, tenant) == env
        assert await experiment_of(ml_stack, pipeline) == experiment
        step = Tracking(http, env)
        status, found = await step.call(
            "GET", "/experiments/get-by-name", params={"experiment_name": f"{tenant}/{pipeline}"}
        )
        assert (status, found["experiment"]["experiment_id"]) == (200, experiment)


async def test_data_pipelines_get_nothing_and_delete_forgets_the_experiment(
    ml_stack: Stack,
) -> None:
    tenant = new_tenant()
    status, saved = await ml_stack.call("POST", "data-pipelines", json=body(), as_=headers(tenant))
    assert status == 201
    assert tracking_secret(ml_stack, tenant) is None
    status, detail = await ml_stack.call(
        "GET", f"data-pipelines/{saved['id']}", as_=headers(tenant)
    )
    for template in detail["current"]["template"]["spec"]["templates"]:
        assert "envFrom" not in template.get("container", {})
    assert await ml_stack.pool.fetchval("SELECT count(*) FROM ml_experiments") == 0

    pipeline = await save_ml(ml_stack, tenant)
    assert await ml_stack.pool.fetchval("SELECT count(*) FROM ml_experiments") == 1
    status, _ = await ml_stack.call("DELETE", f"ml-pipelines/{pipeline}", as_=headers(tenant))
    assert status == 200
    assert await ml_stack.pool.fetchval("SELECT count(*) FROM ml_experiments") == 0


async def test_without_mlflow_configured_ml_pipelines_save_without_tracking(stack: Stack) -> None:
    status, saved = await stack.call("POST", "ml-pipelines", json=body())
    assert status == 201
    status, detail = await stack.call("GET", f"ml-pipelines/{saved['id']}")
    for template in detail["current"]["template"]["spec"]["templates"]:
        assert "envFrom" not in template.get("container", {})
