"""Schedules and triggers survive drift: a pipeline's CronWorkflow, event source, sensor, webhook
token Secret and Ingress, deleted or changed out of band through the real kubernetes-asyncio
client, come back as the current version and the pause recorded in PostgreSQL say, made again by
the compiler's drift reconciler (its loop, as the leader runs it). Each test waits, with a
deadline, for the object to come back; nothing is proved by sleeping. Objects of a pipeline that
was never recorded are collected once older than a save could be."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import asyncpg
import pytest
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi, NetworkingV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from compiler import runner
from compiler.automation.reconciler import AttachmentReconciler
from compiler.pipelines.stamping import template_name
from shared.k8s import client_from_kubeconfig
from shared.k8s_objects import KubeObjects
from shared.tasks import Supervisor, run_service
from sim.ports import free_port
from sim.world import start_world
from tests.integration.compiler.pipeline_stack import INTERNAL_KEY, NS, Stack, body, make_stack

EVENTS = "kubeopera-pipeline-events"
ARGO = "argoproj.io", "v1alpha1"
SCHEDULE = {"cron": ["0 2 * * *"], "timezone": "Europe/Helsinki"}
TRIGGER = {"name": "on-upload", "type": "webhook", "parameters": {"day": "body.day"}}
T = TypeVar("T")


@pytest.fixture
async def stack(db: asyncpg.Pool, database_url: str, settings_factory: Any) -> AsyncIterator[Stack]:
    async for value in make_stack(
        db, database_url, settings_factory, EVENTS_PUBLIC_HOST="hooks.example.test"
    ):
        yield value


@contextlib.asynccontextmanager
async def reconciling(stack: Stack) -> AsyncIterator[None]:
    """The compiler's drift reconciler running its loop, as the leader does."""
    drift = stack.compiler.drift
    assert drift is not None
    task = asyncio.create_task(drift.loop(0.02))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def eventually(probe: Callable[[], Awaitable[T | None]], *, within: float = 15.0) -> T:
    """``probe``'s first truthy answer; AssertionError when none came within the deadline."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        found = await probe()
        if found:
            return found
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the object did not come back in time")
        await asyncio.sleep(0.02)


class Cluster:
    """The objects, through the real client."""

    def __init__(self, stack: Stack) -> None:
        self.custom = CustomObjectsApi(stack.kube)
        self.core = CoreV1Api(stack.kube)
        self.networking = NetworkingV1Api(stack.kube)

    async def get(self, plural: str, name: str) -> dict[str, Any] | None:
        namespace = NS if plural == "cronworkflows" else EVENTS
        try:
            if plural == "secrets":
                found = await self.core.read_namespaced_secret(name, namespace)
                return dict(self.core.api_client.sanitize_for_serialization(found))
            if plural == "ingresses":
                found = await self.networking.read_namespaced_ingress(name, namespace)
                return dict(self.core.api_client.sanitize_for_serialization(found))
            return dict(
                await self.custom.get_namespaced_custom_object(*ARGO, namespace, plural, name)
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    async def delete(self, plural: str, name: str) -> None:
        namespace = NS if plural == "cronworkflows" else EVENTS
        if plural == "secrets":
            await self.core.delete_namespaced_secret(name, namespace)
        elif plural == "ingresses":
            await self.networking.delete_namespaced_ingress(name, namespace)
        else:
            await self.custom.delete_namespaced_custom_object(*ARGO, namespace, plural, name)

    async def edit(self, plural: str, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        obj = await self.get(plural, name)
        assert obj is not None
        change(obj)
        namespace = NS if plural == "cronworkflows" else EVENTS
        if plural == "secrets":
            await self.core.replace_namespaced_secret(name, namespace, obj)
        else:
            await self.custom.replace_namespaced_custom_object(*ARGO, namespace, plural, name, obj)


async def saved(stack: Stack) -> str:
    status, answer = await stack.call(
        "POST", "data-pipelines", json={**body(), "schedule": SCHEDULE, "triggers": [TRIGGER]}
    )
    assert status == 201, answer
    return str(answer["id"])


async def token(stack: Stack, pipeline_id: str) -> str:
    status, answer = await stack.call(
        "GET", f"data-pipelines/{pipeline_id}/triggers/on-upload/webhook"
    )
    assert status == 200, answer
    return str(answer["token"])


def tokens_in(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def as_applied(obj: dict[str, Any] | None) -> Any:
    """What we own of an object: comparable before and after a round trip."""
    if obj is None:
        return None
    metadata = obj["metadata"]
    return (metadata.get("labels"), metadata.get("annotations"), obj.get("spec"), obj.get("data"))


# Each kind: its plural and its name from the pipeline id.
KINDS = {
    "cron_workflow": ("cronworkflows", lambda p: f"p-{p}"),
    "event_source": ("eventsources", lambda p: f"p-{p}"),
    "sensor": ("sensors", lambda p: f"p-{p}"),
    "token_secret": ("secrets", lambda p: f"p-{p}-webhooks"),
    "ingress": ("ingresses", lambda p: f"p-{p}-webhooks"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_deleted_object_comes_back(stack: Stack, kind: str) -> None:
    pipeline_id = await saved(stack)
    cluster = Cluster(stack)
    plural, name_of = KINDS[kind]
    name = name_of(pipeline_id)
    before = await cluster.get(plural, name)
    assert before is not None
    await cluster.delete(plural, name)
    async with reconciling(stack):
        back = await eventually(lambda: cluster.get(plural, name))
    if kind == "token_secret":  # the tokens lived only there: a new one, which the API tells
        assert set(tokens_in(back)) == {"on-upload"}
        assert tokens_in(back)["on-upload"] == await token(stack, pipeline_id)
        before["data"] = back["data"]
    assert as_applied(back) == as_applied(before)


def _cron(obj: dict[str, Any]) -> None:
    obj["spec"]["schedules"] = ["* * * * *"]
    obj["spec"]["workflowSpec"] = {"workflowTemplateRef": {"name": "someone-elses"}}


def _source(obj: dict[str, Any]) -> None:
    obj["spec"]["webhook"]["extra"] = {"port": "12000", "endpoint": "/open", "method": "POST"}


def _sensor(obj: dict[str, Any]) -> None:
    trigger = obj["spec"]["triggers"][0]["template"]["argoWorkflow"]
    trigger["source"]["resource"]["spec"]["workflowTemplateRef"]["name"] = "someone-elses"


def _secret(obj: dict[str, Any]) -> None:
    obj["data"]["extra"] = base64.b64encode(b"planted").decode()
    del obj["metadata"]["labels"]["kubeopera.io/pipeline-id"]


CHANGES = {
    "cron_workflow": _cron,
    "event_source": _source,
    "sensor": _sensor,
    "token_secret": _secret,
}


@pytest.mark.parametrize("kind", sorted(CHANGES))
async def test_an_object_changed_out_of_band_is_put_back(stack: Stack, kind: str) -> None:
    pipeline_id = await saved(stack)
    issued = await token(stack, pipeline_id)
    cluster = Cluster(stack)
    plural, name_of = KINDS[kind]
    name = name_of(pipeline_id)
    before = await cluster.get(plural, name)
    await cluster.edit(plural, name, CHANGES[kind])
    assert as_applied(await cluster.get(plural, name)) != as_applied(before)

    async def restored() -> dict[str, Any] | None:
        now = await cluster.get(plural, name)
        return now if as_applied(now) == as_applied(before) else None

    async with reconciling(stack):
        await eventually(restored)
    assert await token(stack, pipeline_id) == issued  # a token nobody removed is kept


async def test_a_paused_schedule_comes_back_paused_from_the_record(stack: Stack) -> None:
    pipeline_id = await saved(stack)
    status, paused = await stack.call("POST", f"data-pipelines/{pipeline_id}/schedule/pause")
    assert status == 200, paused
    cluster = Cluster(stack)
    name = f"p-{pipeline_id}"
    # Deleted, so nothing on the cluster remembers the pause: only PostgreSQL does.
    await cluster.delete("cronworkflows", name)

    async def suspended() -> dict[str, Any] | None:
        now = await cluster.get("cronworkflows", name)
        return now if now is not None and now["spec"]["suspend"] is True else None

    async with reconciling(stack):
        back = await eventually(suspended)
        annotations = back["metadata"]["annotations"]
        assert annotations["kubeopera.io/schedule-paused-by"] == "alice@acme"
        assert annotations["kubeopera.io/schedule-paused-at"] == paused["paused_at"]
        assert back["spec"]["workflowSpec"]["workflowTemplateRef"]["name"] == template_name(
            pipeline_id, 1
        )
        # Resumed out of band (a hand edit): suspended again, the pause is the record's.
        await cluster.edit("cronworkflows", name, lambda obj: obj["spec"].update(suspend=False))
        await eventually(suspended)
    _, read = await stack.call("GET", f"data-pipelines/{pipeline_id}")
    assert (read["schedule"]["paused"], read["schedule"]["paused_by"]) == (True, "alice@acme")

    status, resumed = await stack.call("POST", f"data-pipelines/{pipeline_id}/schedule/resume")
    assert (status, resumed["paused"]) == (200, False)
    await cluster.delete("cronworkflows", name)

    async def running() -> dict[str, Any] | None:
        now = await cluster.get("cronworkflows", name)
        return now if now is not None and now["spec"]["suspend"] is False else None

    async with reconciling(stack):
        back = await eventually(running)
    assert "kubeopera.io/schedule-paused-by" not in (back["metadata"].get("annotations") or {})


async def test_pausing_a_schedule_whose_cron_workflow_was_deleted_makes_it_again(
    stack: Stack,
) -> None:
    pipeline_id = await saved(stack)
    cluster = Cluster(stack)
    await cluster.delete("cronworkflows", f"p-{pipeline_id}")
    status, paused = await stack.call("POST", f"data-pipelines/{pipeline_id}/schedule/pause")
    assert (status, paused["paused"]) == (200, True), paused
    back = await cluster.get("cronworkflows", f"p-{pipeline_id}")
    assert back is not None
    assert back["spec"]["suspend"] is True


async def test_a_pause_made_before_pauses_were_recorded_is_adopted(stack: Stack) -> None:
    """A pipeline paused by the code before migration 0014: the pause only on its
    CronWorkflow, the row not yet adopted."""
    pipeline_id = await saved(stack)
    cluster = Cluster(stack)
    name = f"p-{pipeline_id}"

    def paused_by_hand(obj: dict[str, Any]) -> None:
        obj["spec"]["suspend"] = True
        obj["metadata"]["annotations"] = {
            "kubeopera.io/schedule-paused-by": "carol@acme",
            "kubeopera.io/schedule-paused-at": "2026-01-02T03:04:05Z",
        }

    await cluster.edit("cronworkflows", name, paused_by_hand)
    await stack.pool.execute(
        "UPDATE pipelines SET schedule_pause_adopted = false WHERE id = $1", pipeline_id
    )
    _, read = await stack.call("GET", f"data-pipelines/{pipeline_id}")
    assert read["schedule"]["paused_by"] == "carol@acme"  # shown before the adoption too

    async def adopted() -> bool:
        row = await stack.pool.fetchrow(
            "SELECT schedule_paused_by, schedule_pause_adopted FROM pipelines WHERE id = $1",
            pipeline_id,
        )
        return bool(row["schedule_pause_adopted"]) and row["schedule_paused_by"] == "carol@acme"

    async with reconciling(stack):
        await eventually(adopted)
        await cluster.delete("cronworkflows", name)

        async def suspended() -> dict[str, Any] | None:
            now = await cluster.get("cronworkflows", name)
            return now if now is not None and now["spec"]["suspend"] is True else None

        back = await eventually(suspended)
    annotations = back["metadata"]["annotations"]
    assert annotations["kubeopera.io/schedule-paused-at"] == "2026-01-02T03:04:05Z"


async def test_objects_a_failed_create_could_not_remove_are_collected_once_old(
    stack: Stack,
) -> None:
    """A create refused at its sensor whose put-back is refused too: its CronWorkflow and event
    source belong to no recorded pipeline. The reconciler leaves them while a
    save could still own them, and removes them once older than that."""
    store = stack.world.host.store
    refusals = [
        store.faults.refuse(store.resolve(*ARGO, "sensors")),
        store.faults.refuse(store.resolve(*ARGO, "cronworkflows"), verbs={"delete"}),
        store.faults.refuse(store.resolve(*ARGO, "eventsources"), verbs={"delete"}),
    ]
    try:
        status, answer = await stack.call(
            "POST", "data-pipelines", json={**body(), "schedule": SCHEDULE, "triggers": [TRIGGER]}
        )
    finally:
        for lift in refusals:
            lift()
    assert status == 503, answer
    cluster = Cluster(stack)
    crons = await cluster.custom.list_namespaced_custom_object(*ARGO, NS, "cronworkflows")
    [left] = crons["items"]
    pipeline_id = left["metadata"]["labels"]["kubeopera.io/pipeline-id"]
    name = f"p-{pipeline_id}"
    assert await cluster.get("eventsources", name) is not None

    def reconciler(now: datetime) -> AttachmentReconciler:
        return AttachmentReconciler(
            pool=stack.pool,
            objects=KubeObjects(stack.kube),
            attachments=[],
            schedules=stack.compiler.schedules,
            events_namespace=EVENTS,
            clock=lambda: now,
        )

    young = await reconciler(datetime.now(UTC)).reconcile_all()
    assert young.orphans == 0
    assert await cluster.get("cronworkflows", name) is not None
    old = await reconciler(datetime.now(UTC) + timedelta(hours=1)).reconcile_all()
    assert old.orphans == 2  # the token Secret went with the put-back (settle)
    for plural, gone in (
        ("cronworkflows", name),
        ("eventsources", name),
        ("secrets", f"{name}-webhooks"),
    ):
        assert await cluster.get(plural, gone) is None, plural


async def test_the_compiler_process_puts_a_deleted_cron_workflow_back_paused(
    db: asyncpg.Pool, settings_factory: Any, tmp_path: Path
) -> None:
    """The compiler as it runs (``compiler.runner.run``): its leader's drift reconciler makes a
    paused pipeline's deleted CronWorkflow again, paused, within PIPELINE_RECONCILE_INTERVAL."""
    world = await start_world(1, tick=0.01, autostart=False, pod_gc_delay=0)
    kubeconfig = tmp_path / "host.kubeconfig"
    kubeconfig.write_text(world.host.kubeconfig)
    port = free_port()
    settings = settings_factory(
        HOST_KUBECONFIG=str(kubeconfig),
        HTTP_PORT=port,
        HEALTH_PORT=0,
        INTERNAL_API_KEY=INTERNAL_KEY,
        ARTIFACT_BUCKET="artifacts",
        POD_NAME="compiler-a",
        PIPELINE_RECONCILE_INTERVAL=1.0,
    )
    stop = asyncio.Event()

    async def main(workers: Supervisor) -> None:
        await runner.run(settings, workers)

    service = asyncio.create_task(run_service(main, grace=5.0, signals=(), stop=stop))
    kube = await client_from_kubeconfig(world.host.kubeconfig)
    custom = CustomObjectsApi(kube)
    url = f"http://127.0.0.1:{port}/internal/v1/pipelines/data"
    caller = {"tenant": "acme", "actor": "alice@acme"}
    try:
        async with aiohttp.ClientSession(headers={"X-Internal-Key": INTERNAL_KEY}) as http:

            async def serving() -> bool:
                try:
                    async with http.post(f"{url}/validate", json={}) as response:
                        return response.status == 400
                except aiohttp.ClientError:
                    return False

            await eventually(serving, within=30)
            pipeline = {**body(), "schedule": SCHEDULE}
            async with http.post(url, json={**caller, "pipeline": pipeline}) as response:
                saved = await response.json()
                assert response.status == 201, saved
            pause = f"{url}/{saved['id']}/schedule/pause"
            async with http.post(pause, json=caller) as response:
                assert response.status == 200, await response.json()
        name = f"p-{saved['id']}"
        await custom.delete_namespaced_custom_object(*ARGO, NS, "cronworkflows", name)

        async def back_paused() -> bool:
            try:
                cron = await custom.get_namespaced_custom_object(*ARGO, NS, "cronworkflows", name)
            except ApiException as error:
                if error.status == 404:
                    return False
                raise
            return bool(cron["spec"]["suspend"] is True)

        await eventually(back_paused, within=30)
    finally:
        await kube.close()
        stop.set()
        await asyncio.wait_for(service, 15)
        await world.stop()
