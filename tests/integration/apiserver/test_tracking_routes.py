"""``/ml-tracking`` against the real MLflow server: a training step (MLflow's own client, with
only the environment an ML pipeline's container is given) logs runs and metrics, and the
routes read them back page by page; the tenant is checked before MLflow is asked."""

from __future__ import annotations

from urllib.parse import quote

import aiohttp
import pytest

from sim.mlflow import MlflowServer
from tests.integration.compiler.mlflow_steps import (
    Tracking,
    container_env,
    logged_run,
    new_tenant,
    save_ml,
    training_step,
)
from tests.integration.compiler.pipeline_stack import Stack, body, headers, ml_stack, stack

__all__ = ["ml_stack", "stack"]

READ = "tracking.read,pipelines.read,pipelines.write"


def reader(tenant: str, permissions: str = READ) -> dict[str, str]:
    return headers(tenant, permissions=permissions)


async def pages(stack: Stack, path: str, tenant: str, limit: int) -> list[list[dict[str, object]]]:
    """Every page of a list, following next_cursor."""
    found = []
    cursor = None
    while True:
        query = f"?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        status, page = await stack.call("GET", f"{path}{query}", as_=reader(tenant))
        assert status == 200, page
        assert page["total"] is None
        found.append(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return found


def requests_seen(server: MlflowServer) -> int:
    """Requests the MLflow server has answered (its access log)."""
    return server.log_path.read_text(errors="replace").count('HTTP/1.1"')


@pytest.mark.timeout(180)
async def test_a_training_steps_runs_and_metrics_are_read_back_page_by_page(
    ml_stack: Stack,
) -> None:
    tenant = new_tenant()
    pipeline = await save_ml(ml_stack, tenant)
    env = await container_env(ml_stack, tenant, pipeline)
    assert set(env) >= {
        "MLFLOW_TRACKING_URI",
        "MLFLOW_TRACKING_USERNAME",
        "MLFLOW_TRACKING_PASSWORD",
        "MLFLOW_EXPERIMENT_NAME",
    }
    first, second, third = await training_step(env, runs=3, points=7)

    runs = await pages(ml_stack, f"ml-tracking/{pipeline}/runs", tenant, limit=2)
    assert [[run["run_id"] for run in page] for page in runs] == [[third, second], [first]]
    newest = runs[0][0]
    assert newest["name"] == "train-2"
    assert newest["status"] == "FINISHED"
    assert newest["params"] == {"learning_rate": "0.01"}
    assert newest["metrics"] == {"loss": pytest.approx(1 / 7), "eval/auc": pytest.approx(0.92)}
    assert newest["started_at"].endswith("Z")
    assert newest["ended_at"] is not None

    history = await pages(ml_stack, f"ml-tracking/{pipeline}/runs/{first}/metrics/loss", tenant, 3)
    assert [len(page) for page in history] == [3, 3, 1]
    points = [point for page in history for point in page]
    assert [point["step"] for point in points] == list(range(7))
    assert [point["value"] for point in points] == pytest.approx([1 / (s + 1) for s in range(7)])
    status, auc = await ml_stack.call(
        "GET",
        f"ml-tracking/{pipeline}/runs/{second}/metrics/{quote('eval/auc', safe='')}",
        as_=reader(tenant),
    )
    assert status == 200, auc
    assert [point["value"] for point in auc["items"]] == [pytest.approx(0.91)]
    assert auc["key"] == "eval/auc"

    # An administrator acting for the tenant sees the same.
    status, acting = await ml_stack.call(
        "GET",
        f"ml-tracking/{pipeline}/runs?acting_tenant={tenant}",
        as_=headers(None, admin=True, permissions=""),
    )
    assert status == 200
    assert [run["run_id"] for run in acting["items"]] == [third, second, first]


async def test_another_tenants_pipeline_is_a_404_and_mlflow_is_never_asked(
    ml_stack: Stack, mlflow_server: MlflowServer
) -> None:
    owner, intruder = new_tenant(), new_tenant()
    pipeline = await save_ml(ml_stack, owner)
    run = await logged_run(await container_env(ml_stack, owner, pipeline))
    await save_ml(ml_stack, intruder)
    status, data = await ml_stack.call("POST", "data-pipelines", json=body(), as_=headers(owner))
    assert status == 201

    before = requests_seen(mlflow_server)
    for path, who in [
        (f"ml-tracking/{pipeline}/runs", intruder),
        (f"ml-tracking/{pipeline}/runs/{run}/metrics/loss", intruder),
        (f"ml-tracking/{data['id']}/runs", owner),  # a data pipeline has no experiment
        ("ml-tracking/0123456789abcdef/runs", owner),
    ]:
        status, answer = await ml_stack.call("GET", path, as_=reader(who))
        assert (status, answer["error"]) == (404, "not_found"), path
    status, answer = await ml_stack.call(
        "GET", f"ml-tracking/{pipeline}/runs", as_=reader(owner, "pipelines.read")
    )
    assert (status, answer["details"]) == (403, {"permission": "tracking.read"})
    assert requests_seen(mlflow_server) == before


async def test_a_run_of_another_experiment_is_not_served_under_a_pipeline(
    ml_stack: Stack,
) -> None:
    tenant = new_tenant()
    mine = await save_ml(ml_stack, tenant, "mine")
    other = await save_ml(ml_stack, tenant, "other")
    their_run = await logged_run(await container_env(ml_stack, tenant, other))
    status, answer = await ml_stack.call(
        "GET", f"ml-tracking/{mine}/runs/{their_run}/metrics/loss", as_=reader(tenant)
    )
    assert status == 404, answer
    status, answer = await ml_stack.call(
        "GET", f"ml-tracking/{mine}/runs/{'f' * 32}/metrics/loss", as_=reader(tenant)
    )
    assert status == 404, answer


async def test_cursors_are_bound_to_their_list(ml_stack: Stack) -> None:
    tenant = new_tenant()
    first = await save_ml(ml_stack, tenant, "first")
    second = await save_ml(ml_stack, tenant, "second")
    env = await container_env(ml_stack, tenant, first)
    for _ in range(2):
        await logged_run(env)
    status, page = await ml_stack.call(
        "GET", f"ml-tracking/{first}/runs?limit=1", as_=reader(tenant)
    )
    assert status == 200
    cursor = page["next_cursor"]
    assert cursor
    status, refused = await ml_stack.call(
        "GET", f"ml-tracking/{second}/runs?limit=1&cursor={cursor}", as_=reader(tenant)
    )
    assert (status, refused["details"]) == (400, {"parameter": "cursor"})
    forged = cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB")
    status, refused = await ml_stack.call(
        "GET", f"ml-tracking/{first}/runs?cursor={forged}", as_=reader(tenant)
    )
    assert status == 400


async def test_a_pipeline_saved_without_tracking_has_no_runs(stack: Stack) -> None:
    status, saved = await stack.call("POST", "ml-pipelines", json=body())
    assert status == 201
    status, page = await stack.call(
        "GET", f"ml-tracking/{saved['id']}/runs", as_=headers(permissions=READ)
    )
    assert (status, page["items"], page["next_cursor"]) == (200, [], None)


async def test_the_tenants_own_account_sees_what_the_routes_show(ml_stack: Stack) -> None:
    """The routes read as the administrator; the tenant's own account reads the same runs."""
    tenant = new_tenant()
    pipeline = await save_ml(ml_stack, tenant)
    env = await container_env(ml_stack, tenant, pipeline)
    run = await logged_run(env)

    async with aiohttp.ClientSession() as http:
        status, found = await Tracking(http, env).call("GET", "/runs/get", params={"run_id": run})
    assert status == 200
    status, page = await ml_stack.call("GET", f"ml-tracking/{pipeline}/runs", as_=reader(tenant))
    assert [item["run_id"] for item in page["items"]] == [found["run"]["info"]["run_id"]]
