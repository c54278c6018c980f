"""The world the stage controller's tests drive: the pipelines stack (apiserver, compiler, the
sim host with its data controller) with artifacts in moto S3, ML pipelines saved with a release
through the real compiler, and helpers to run them, wait on observable facts and read the
registry. ``release_stack`` is a fixture (re-exported by conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg
import boto3
import pytest

from shared.config import Settings
from sim.argo.server import ArgoServer as SimArgoServer
from stagectl.runner import Leading, assemble
from tests.integration.compiler.pipeline_stack import NS, Stack, make_stack

T = TypeVar("T")
Obj = dict[str, Any]
BUCKET = "wm-artifacts"
REGION = "us-east-1"
WORKFLOWS = ("argoproj.io", "v1alpha1", "workflows")
GOOD_SCORECARD = {"auc": 0.91, "loss": 0.2}
# The key the stack's stagectl seals deployment tokens with and its apiserver opens them with.
DEPLOYMENT_TOKEN_KEY = "q0J6n3m8wR3b2l7Yp4cT9sV1xZ5aK8dF2hJ6kL0mN4o"


def ml_spec(
    *,
    scorecard: str | None,
    model_env: bool = True,
    fail_train: bool | str = False,
    model: str = "weights",
) -> Obj:
    """Train writes a model, evaluate writes ``scorecard`` (the text of eval_scorecard.json;
    None: the step writes no such variable, so the sim stores a line of text). ``fail_train``
    "param": train fails unless the run's parameter ``fail`` is "false" (a retry can set it)."""
    evaluate_env = (
        [] if scorecard is None else [{"name": "SIM_ARTIFACT_SCORECARD", "value": scorecard}]
    )
    parameters = [{"name": "day", "default": "2026-01-01"}]
    if fail_train == "param":
        parameters.append({"name": "fail", "default": "true"})
        fail = "{{workflow.parameters.fail}}"
    else:
        fail = "true" if fail_train else "false"
    train_env = [{"name": "SIM_FAIL", "value": fail}]
    if model_env:
        train_env.append({"name": "SIM_ARTIFACT_MODEL", "value": model})
    return {
        "apiVersion": "pipelines.kubeopera.io/v1",
        "parameters": parameters,
        "steps": [
            {
                "name": "train",
                "image": "ghcr.io/acme/train:1.0",
                "command": ["train"],
                "args": ["--day", "{{workflow.parameters.day}}"],
                "env": train_env,
                "outputs": {"artifacts": [{"name": "model", "path": "/out/model.pkl"}]},
            },
            {
                "name": "evaluate",
                "image": "ghcr.io/acme/evaluate:1.0",
                "command": ["evaluate"],
                "depends_on": ["train"],
                "env": evaluate_env,
                "outputs": {
                    "artifacts": [{"name": "scorecard", "path": "/out/eval_scorecard.json"}]
                },
            },
        ],
    }


def release(
    *,
    model: str = "churn",
    approval: bool = False,
    threshold: float = 0.8,
    compare: bool = False,
    serving: Obj | None = None,
) -> Obj:
    gate: Obj = {"thresholds": [{"metric": "auc", "op": ">=", "value": threshold}]}
    if compare:
        gate["compare_to_production"] = {"metric": "auc", "max_regression": 0.02}
    return {
        "model": model,
        "model_artifact": {"step": "train", "artifact": "model"},
        "scorecard": {"step": "evaluate", "artifact": "scorecard"},
        "gate": gate,
        "approval": {"required": approval},
        **({"serving": serving} if serving is not None else {}),
    }


@dataclass
class ReleaseStack:
    stack: Stack
    settings: Settings
    moto: str

    @property
    def pool(self) -> asyncpg.Pool:
        return self.stack.pool

    @property
    def data_server(self) -> SimArgoServer:
        server = self.stack.world.host.data_server
        assert server is not None
        return server

    def s3(self) -> Any:
        return boto3.client("s3", endpoint_url=self.moto, region_name=REGION)

    def object(self, key: str) -> bytes:
        body: bytes = self.s3().get_object(Bucket=BUCKET, Key=key)["Body"].read()
        return body

    def keys(self, prefix: str) -> list[str]:
        pages = self.s3().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents") or [])

    async def save(
        self,
        name: str = "churn",
        *,
        scorecard: str | None = json.dumps(GOOD_SCORECARD),
        model_env: bool = True,
        fail_train: bool | str = False,
        model: str = "weights",
        release_model: str = "churn",
        **release_fields: Any,
    ) -> str:
        body = {
            "name": name,
            "definition": {
                "type": "wizard",
                "spec": ml_spec(
                    scorecard=scorecard, model_env=model_env, fail_train=fail_train, model=model
                ),
            },
            "release": release(model=release_model, **release_fields),
        }
        status, saved = await self.stack.call("POST", "ml-pipelines", json=body)
        assert status == 201, saved
        return str(saved["id"])

    async def run(self, pipeline: str) -> str:
        status, started = await self.stack.call("POST", f"ml-pipelines/{pipeline}/run", json={})
        assert status in (200, 201), started
        return str(started["workflow"]["name"])

    def stored_workflow(self, name: str) -> Obj:
        """The workflow as the host's API server holds it (its nodes maybe packed)."""
        store = self.stack.world.host.store
        found: Obj = store.get(store.resolve(*WORKFLOWS), NS, name)
        return found

    def workflow(self, name: str) -> Obj:
        """The workflow as the Argo server shows it: its nodes in ``status.nodes``."""
        return self.data_server.node_status.unpack(self.stored_workflow(name))

    def node(self, name: str, template: str) -> Obj | None:
        nodes = self.workflow(name).get("status", {}).get("nodes", {}).values()
        return next((n for n in nodes if n.get("templateName") == template), None)

    def phase(self, name: str) -> str | None:
        phase: str | None = self.workflow(name).get("status", {}).get("phase")
        return phase

    async def versions(self) -> list[asyncpg.Record]:
        return await self.pool.fetch("SELECT * FROM model_versions ORDER BY model_id, number")

    async def outcome(self, uid: str, stage: str) -> Obj | None:
        row = await self.pool.fetchrow(
            "SELECT outcome, completed_at FROM stage_outcomes WHERE run_uid = $1 AND stage = $2 "
            "ORDER BY recorded_at DESC LIMIT 1",  # the latest attempt's
            uid,
            stage,
        )
        return None if row is None else {**row["outcome"], "completed": row["completed_at"]}

    def uid(self, name: str) -> str:
        return str(self.workflow(name)["metadata"]["uid"])

    def completions(self, name: str) -> dict[str, int]:
        """Node id -> how many set/resume calls moved it from waiting to finished."""
        counted: dict[str, int] = {}
        for action in self.data_server.node_actions:
            if action.name == name:
                for nid in action.completed:
                    counted[nid] = counted.get(nid, 0) + 1
        return counted


async def eventually(
    check: Callable[[], Awaitable[T | None]], *, within: float = 20.0, what: str = ""
) -> T:
    """The first truthy answer of ``check``, asked every 20 ms; fails after ``within`` s."""
    async with asyncio.timeout(within):
        while True:
            value = await check()
            if value:
                return value
            await asyncio.sleep(0.02)
    raise AssertionError(what)  # pragma: no cover - the timeout raises first


def empty_bucket(endpoint: str) -> None:
    s3 = boto3.resource("s3", endpoint_url=endpoint, region_name=REGION)
    bucket = s3.Bucket(BUCKET)
    if bucket.creation_date is not None:
        bucket.objects.all().delete()


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")


@contextlib.asynccontextmanager
async def running_controller(stack: ReleaseStack, **overrides: Any) -> AsyncIterator[None]:
    """The stage controller leading (without an election), in this process, with settings
    ``overrides``, and the data controller ticking."""
    settings = stack.settings.model_copy(update=overrides)
    parts = assemble(settings, pool=stack.pool, host_api=stack.stack.kube)
    task = asyncio.create_task(Leading(parts).run())
    data = stack.stack.world.host.data_argo
    assert data is not None
    data.start()
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await data.stop()


@pytest.fixture
async def controller(release_stack: ReleaseStack) -> AsyncIterator[ReleaseStack]:
    async with running_controller(release_stack):
        yield release_stack


@pytest.fixture
async def release_stack(
    db: asyncpg.Pool,
    database_url: str,
    settings_factory: Any,
    moto_endpoint: str,
    aws_credentials: None,
) -> AsyncIterator[ReleaseStack]:
    overrides = {
        "ARTIFACT_BUCKET": BUCKET,
        "S3_ENDPOINT_URL": moto_endpoint,
        "AWS_REGION": REGION,
        "STAGE_SWEEP_INTERVAL": 0.5,
        "DEPLOYMENT_TOKEN_KEY": DEPLOYMENT_TOKEN_KEY,
    }
    world = {"s3_endpoint": moto_endpoint, "bucket": BUCKET}
    empty_bucket(moto_endpoint)  # moto lives as long as the module; each test starts empty
    async for stack in make_stack(
        db, database_url, settings_factory, world_options=world, **overrides
    ):
        yield ReleaseStack(stack, settings_factory(**overrides), moto_endpoint)
