"""What the experiment-tracking tests share: tenants of their own (MLflow outlives each test),
the tenant's Secret as a container sees it, and MLflow's REST API called the way a training
step calls it, with the credentials it was given."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import aiohttp

from compiler.tracking import accounts
from sim.mlflow import VENV
from tests.integration.compiler.pipeline_stack import Stack, body, headers

API2 = "/api/2.0/mlflow"


def new_tenant() -> str:
    """MLflow outlives each test: every test's tenants are its own."""
    return f"t{uuid.uuid4().hex[:10]}"


def tracking_secret(stack: Stack, tenant: str) -> dict[str, str] | None:
    """The Secret's values as a container given ``envFrom`` it sees them."""
    store = stack.world.host.store
    rtype = store.resolve("", "v1", "secrets")
    try:
        secret = store.get(rtype, f"kubeopera-data-{tenant}", accounts.SECRET_NAME)
    except Exception:
        return None
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def drop_secret(stack: Stack, tenant: str) -> None:
    store = stack.world.host.store
    store.delete(store.resolve("", "v1", "secrets"), f"kubeopera-data-{tenant}", "kubeopera-mlflow")


class Tracking:
    """MLflow's REST API as a training step calls it: with the environment it was given."""

    def __init__(self, http: aiohttp.ClientSession, env: dict[str, str]) -> None:
        self.http = http
        self.base = env["MLFLOW_TRACKING_URI"]
        self.auth = {
            "Authorization": aiohttp.encode_basic_auth(
                env["MLFLOW_TRACKING_USERNAME"], env["MLFLOW_TRACKING_PASSWORD"]
            )
        }

    async def call(
        self, method: str, path: str, *, json: Any = None, params: Any = None
    ) -> tuple[int, Any]:
        async with self.http.request(
            method, f"{self.base}{API2}{path}", json=json, params=params, headers=self.auth
        ) as answer:
            text = await answer.text()
            try:
                return answer.status, await answer.json(content_type=None)
            except ValueError:
                return answer.status, text

    async def start_run(self, experiment_id: str) -> str:
        status, created = await self.call(
            "POST", "/runs/create", json={"experiment_id": experiment_id, "start_time": 1000}
        )
        assert status == 200, created
        return str(created["run"]["info"]["run_id"])


async def save_ml(stack: Stack, tenant: str, name: str = "trainer") -> str:
    status, saved = await stack.call("POST", "ml-pipelines", json=body(name), as_=headers(tenant))
    assert status == 201, saved
    return str(saved["id"])


async def experiment_of(stack: Stack, pipeline_id: str) -> str:
    row = await stack.pool.fetchrow(
        "SELECT experiment_id, name FROM ml_experiments WHERE pipeline_id = $1", pipeline_id
    )
    assert row is not None
    return str(row["experiment_id"])


async def container_env(stack: Stack, tenant: str, pipeline: str) -> dict[str, str]:
    """The environment the pipeline's first container gets, as Kubernetes builds it: its
    ``envFrom`` Secrets, then its ``env`` values."""
    status, detail = await stack.call("GET", f"ml-pipelines/{pipeline}", as_=headers(tenant))
    assert status == 200, detail
    templates = detail["current"]["template"]["spec"]["templates"]
    container = next(t["container"] for t in templates if "container" in t)
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        assert source["secretRef"]["name"] == accounts.SECRET_NAME
        secret = tracking_secret(stack, tenant)
        assert secret is not None
        env.update(secret)
    env.update(
        {item["name"]: item["value"] for item in container.get("env", []) if "value" in item}
    )
    return env


# A training step as tenants write them: MLflow's own client, configured by the environment
# alone (no experiment named in the code), logging parameters and metric histories.
TRAINING = """
import sys
import mlflow

runs, points = int(sys.argv[1]), int(sys.argv[2])
for number in range(runs):
    with mlflow.start_run(run_name=f"train-{number}") as run:
        mlflow.log_param("learning_rate", "0.01")
        for step in range(points):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
        mlflow.log_metric("eval/auc", 0.9 + number / 100, step=0)
        print("run_id=" + run.info.run_id, flush=True)
"""


async def training_step(env: dict[str, str], *, runs: int = 1, points: int = 5) -> list[str]:
    """Run ``TRAINING`` with MLflow's Python client (the pinned one, in its own virtualenv)
    in a process whose environment is ``env`` and nothing of ours; the run ids, oldest first."""
    python = VENV / "bin" / "python"
    child = await asyncio.create_subprocess_exec(
        str(python),
        "-c",
        TRAINING,
        str(runs),
        str(points),
        env={"PATH": "/usr/bin:/bin", "MLFLOW_DISABLE_TELEMETRY": "true", **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await child.communicate()
    assert child.returncode == 0, err.decode(errors="replace")[-3000:]
    # MLflow's client prints lines of its own (a link to each run) on stdout too.
    return [line[7:] for line in out.decode().splitlines() if line.startswith("run_id=")]


async def logged_run(env: dict[str, str], *, points: int = 2) -> str:
    """A run with a ``loss`` history, logged over REST with the step's credentials into the
    experiment it was given (quicker than ``training_step``, which starts MLflow's client)."""
    async with aiohttp.ClientSession() as http:
        step = Tracking(http, env)
        status, found = await step.call(
            "GET",
            "/experiments/get-by-name",
            params={"experiment_name": env["MLFLOW_EXPERIMENT_NAME"]},
        )
        assert status == 200, found
        run = await step.start_run(found["experiment"]["experiment_id"])
        for index in range(points):
            status, _ = await step.call(
                "POST",
                "/runs/log-metric",
                json={"run_id": run, "key": "loss", "value": 1.0, "timestamp": 1, "step": index},
            )
            assert status == 200
        return run
