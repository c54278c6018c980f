"""The demo's model release: experiment tracking and the registry through the API.

A tenant saves an ML pipeline with a release (train, evaluate; gate on the scorecard; approval
required). The save gives the tenant an MLflow account (the Secret ``kubeopera-mlflow`` in its
namespace) and the pipeline an experiment. The pipeline runs on the sim's data controller; its
train step is played here by MLflow's own Python client with exactly the environment the
step's container is given (the Secret's ``MLFLOW_TRACKING_*`` and ``MLFLOW_EXPERIMENT_NAME``),
logging a loss curve, and the runs and the curve are read back through ``/ml-tracking``. The
stage controller registers the model and gates it, the release waits for approval, it is
approved through ``/models``, and the version, its scorecard and its lineage are printed.

Needs the stage controller doing the stages (stagectl): without it no release waits, and the
showcase says so and stops after the tracking part.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from sim.mlflow import VENV, MlflowServer

TENANT = "demo"
PERMISSIONS = (
    "workflows.read,pipelines.read,pipelines.write,pipelines.run,"
    "models.read,models.approve,tracking.read"
)
SCORECARD = {"auc": 0.93, "precision": 0.88, "recall": 0.81}
PIPELINE = {
    "name": "fraud-detector",
    "description": "train and evaluate the fraud model, release it when the gate passes",
    "definition": {
        "type": "wizard",
        "spec": {
            "apiVersion": "pipelines.kubeopera.io/v1",
            "steps": [
                {
                    "name": "train",
                    "image": "ghcr.io/demo/train:2.1",
                    "command": ["train", "--epochs", "10"],
                    # The sim's pods write an output artifact from SIM_ARTIFACT_<NAME>.
                    "env": [{"name": "SIM_ARTIFACT_MODEL", "value": "fraud-model-weights"}],
                    "outputs": {"artifacts": [{"name": "model", "path": "/out/model.pkl"}]},
                },
                {
                    "name": "evaluate",
                    "image": "ghcr.io/demo/evaluate:2.1",
                    "command": ["evaluate"],
                    "depends_on": ["train"],
                    "env": [{"name": "SIM_ARTIFACT_SCORECARD", "value": json.dumps(SCORECARD)}],
                    "outputs": {
                        "artifacts": [{"name": "scorecard", "path": "/out/eval_scorecard.json"}]
                    },
                },
            ],
        },
    },
    "release": {
        "model": "fraud",
        "model_artifact": {"step": "train", "artifact": "model"},
        "scorecard": {"step": "evaluate", "artifact": "scorecard"},
        "gate": {"thresholds": [{"metric": "auc", "op": ">=", "value": 0.9}]},
        "approval": {"required": True},
    },
}
# The train step's own code: MLflow's client configured by the environment alone.
TRAINING = """
import math, sys
import mlflow

with mlflow.start_run(run_name="train-fraud") as run:
    mlflow.set_tag("kubeopera.workflow", sys.argv[1])
    mlflow.log_params({"epochs": 10, "learning_rate": 0.05, "max_depth": 6})
    for epoch in range(10):
        mlflow.log_metric("loss", round(0.69 * math.exp(-0.25 * epoch), 4), step=epoch)
        mlflow.log_metric("val/auc", round(0.80 + 0.013 * epoch, 4), step=epoch)
    print("run_id=" + run.info.run_id, flush=True)
"""


async def start_tracking(state: Path) -> MlflowServer:
    """The shared MLflow server, as production runs it (basic-auth, NO_PERMISSIONS), on a fresh
    state: the demo's database is new each time, and an earlier run's auth store would keep
    its own administrator password (MLflow creates the admin once)."""
    shutil.rmtree(state, ignore_errors=True)
    server = MlflowServer(state)
    await asyncio.to_thread(server.start)
    return server


def tracking_env(server: MlflowServer) -> dict[str, str]:
    """What the compiler and the apiserver are given to administer it."""
    return {
        "MLFLOW_URL": server.url,
        "MLFLOW_ADMIN_USERNAME": server.admin_username,
        "MLFLOW_ADMIN_PASSWORD": server.admin_password,
    }


async def _tenant_secret(kubeconfig: str) -> dict[str, str]:
    """The Secret kubeopera-mlflow as the step's container sees it (read from the host)."""
    from kubernetes_asyncio.client import CoreV1Api

    from shared.k8s import client_from_kubeconfig

    text = await asyncio.to_thread(Path(kubeconfig).read_text)
    api = await client_from_kubeconfig(text)
    try:
        secret = await CoreV1Api(api).read_namespaced_secret(
            "kubeopera-mlflow", f"kubeopera-data-{TENANT}"
        )
    finally:
        await api.close()
    return {key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}


async def _train(env: dict[str, str], workflow: str) -> str:
    child = await asyncio.create_subprocess_exec(
        str(VENV / "bin" / "python"),
        "-c",
        TRAINING,
        workflow,
        env={"PATH": "/usr/bin:/bin", "MLFLOW_DISABLE_TELEMETRY": "true", **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(err.decode(errors="replace")[-500:])
    return next(line[7:] for line in out.decode().splitlines() if line.startswith("run_id="))


async def release_showcase(
    *, api: str, api_key: str, kubeconfig: str, log: Callable[[str], None]
) -> None:
    headers = {
        "X-API-Key": api_key,
        "X-Kubeopera-Tenant": TENANT,
        "X-Kubeopera-Actor": "rosa@demo",
        "X-Kubeopera-Permissions": PERMISSIONS,
    }
    async with aiohttp.ClientSession(base_url=api, headers=headers) as http:

        async def call(method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
            async with http.request(method, f"/api/v1/{path}", **kwargs) as answer:
                text = await answer.text()
                with contextlib.suppress(ValueError):
                    return answer.status, json.loads(text)
                return answer.status, text

        for _ in range(120):  # the apiserver and the compiler may still be starting
            with contextlib.suppress(aiohttp.ClientError):
                if (await call("GET", "ml-pipelines"))[0] == 200:
                    break
            await asyncio.sleep(0.5)
        await asyncio.sleep(12)  # after the data pipeline's showcase, so the output stays readable
        status, saved = await call("POST", "ml-pipelines", json=PIPELINE)
        if status != 201:
            log(f"POST /api/v1/ml-pipelines → {status} {saved}")
            return
        pipeline = saved["id"]
        log(
            f"tenant demo saved ML pipeline 'fraud-detector' → 201 (release: model 'fraud', gate "
            f"auc >= 0.9, approval required); MLflow account tenant-demo in the Secret "
            f"kubeopera-mlflow of kubeopera-data-demo, experiment demo/{pipeline} with EDIT"
        )
        status, run = await call("POST", f"ml-pipelines/{pipeline}/run", json={})
        if status != 201:
            log(f"POST .../run → {status} {run}")
            return
        workflow = run["workflow"]["name"]
        log(f"POST /api/v1/ml-pipelines/{pipeline}/run → 201: {workflow}")

        status, detail = await call("GET", f"ml-pipelines/{pipeline}")
        container = next(
            t["container"]
            for t in detail["current"]["template"]["spec"]["templates"]
            if "container" in t
        )
        env = {**await _tenant_secret(kubeconfig)}
        env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
        run_id = await _train(env, workflow)
        log(
            f"the train step (MLflow's client, with only its container's env: "
            f"MLFLOW_TRACKING_URI/USERNAME/PASSWORD from the Secret, MLFLOW_EXPERIMENT_NAME="
            f"{env.get('MLFLOW_EXPERIMENT_NAME')}) logged run {run_id}"
        )
        status, runs = await call("GET", f"ml-tracking/{pipeline}/runs")
        for item in runs.get("items", [])[:1]:
            metrics = ", ".join(f"{k}={v}" for k, v in sorted(item["metrics"].items()))
            log(
                f"GET /api/v1/ml-tracking/{pipeline}/runs → {item['name']} "
                f"{item['status']}: {metrics}"
            )
        status, history = await call(
            "GET", f"ml-tracking/{pipeline}/runs/{run_id}/metrics/loss?limit=4"
        )
        points = " ".join(f"{p['step']}:{p['value']}" for p in history.get("items", []))
        more = " …" if history.get("next_cursor") else ""
        log(
            f"GET .../runs/{run_id[:8]}…/metrics/loss?limit=4 → {points}{more} "
            "(next_cursor pages on)"
        )
        status, _ = await call(
            "GET",
            f"ml-tracking/{pipeline}/runs",
            headers={**headers, "X-Kubeopera-Tenant": "intruder"},
        )
        log(f"the same as tenant 'intruder' → {status} (MLflow never asked)")

        deadline = time.monotonic() + 120
        model: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            status, models = await call("GET", "models")
            found = [m for m in models.get("items", []) if m["name"] == "fraud"]
            if found:
                status, model = await call("GET", f"models/{found[0]['id']}")
                if model and model.get("pending_approvals"):
                    break
            await asyncio.sleep(2)
        else:
            log(
                "no release is waiting for approval: the stage controller (stagectl) is not "
                "doing the stages here"
            )
            return
        assert model is not None
        version = model["versions"][0]
        log(
            f"stagectl registered fraud v{version['number']} (state {version['state']}, gate "
            f"{version['verdict']}) and the release waits for approval "
            f"(run {model['pending_approvals'][0]['run']['name']})"
        )
        status, decided = await call(
            "POST",
            f"models/{model['id']}/approvals/{workflow}/approve",
            json={"reason": "auc 0.93 on the holdout set"},
        )
        log(
            f"POST /api/v1/models/{model['id']}/approvals/{workflow}/approve → {status} "
            f"({decided.get('approval', {}).get('state')} by rosa@demo)"
        )
        for _ in range(60):
            status, model = await call("GET", f"models/{model['id']}")
            if model["versions"][0].get("release_outcome"):
                break
            await asyncio.sleep(1)
        version = model["versions"][0]
        log(
            f"fraud v{version['number']}: state {version['state']}, release "
            f"{version['release_outcome']}, from {version['run']['name']} "
            f"(pipeline {version['pipeline']['id']} v{version['pipeline']['version']})"
        )
        files = f"models/{model['id']}/versions/{version['number']}/files"
        status, scorecard = await call("GET", f"{files}/eval_scorecard.json")
        log(f"GET .../files/eval_scorecard.json → {status} {json.dumps(scorecard)}")
        status, lineage = await call("GET", f"{files}/lineage.json")
        log(f"GET .../files/lineage.json → {status} {json.dumps(lineage)[:400]}")
