"""A save is all or nothing: each of a pipeline's attachments (the schedule's CronWorkflow, the
webhook triggers' event source and sensor, experiment tracking) refused in turn by the cluster
on create, update and rollback, and a commit that fails after every attachment was applied. The
save answers an error, records no version, and nothing on the cluster (read through the real
kubernetes-asyncio client) points at a version that was not recorded: every object is as it was
before, webhook tokens included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

from tests.integration.compiler.mlflow_steps import new_tenant
from tests.integration.compiler.pipeline_stack import NS, Stack, body, headers

EVENTS = "kubeopera-pipeline-events"
ARGO = "argoproj.io", "v1alpha1"


def saved_body(version: int) -> dict[str, Any]:
    """An ML pipeline whose every attachment differs between version 1 and version 2."""
    trigger = "on-upload" if version == 1 else "nightly"
    return {
        **body("trainer", extra_step=version == 2),
        "schedule": {"cron": [f"0 {version} * * *"], "timezone": "Europe/Helsinki"},
        "triggers": [{"name": trigger, "type": "webhook", "parameters": {"day": "body.day"}}],
    }


# Each attachment, and how the cluster refuses it: (group, version, plural, namespace, verbs).
FAULTS: dict[str, Callable[[str], tuple[str, str, str, str | None, set[str]]]] = {
    "schedule": lambda ns: (*ARGO, "cronworkflows", ns, {"create", "update", "patch"}),
    "event_source": lambda ns: (*ARGO, "eventsources", EVENTS, {"create", "update", "patch"}),
    "sensor": lambda ns: (*ARGO, "sensors", EVENTS, {"create", "update", "patch"}),
    # Tracking reads and writes the tenant's MLflow account Secret in the tenant namespace.
    "tracking": lambda ns: ("", "v1", "secrets", ns, {"get", "create", "update"}),
}


class Scene:
    def __init__(self, stack: Stack, tenant: str) -> None:
        self.stack, self.tenant = stack, tenant
        self.namespace = f"kubeopera-data-{tenant}"
        self.custom, self.core = CustomObjectsApi(stack.kube), CoreV1Api(stack.kube)

    async def call(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        return await self.stack.call(method, path, as_=headers(self.tenant), **kwargs)

    def refuse(self, attachment: str) -> Callable[[], None]:
        group, version, plural, namespace, verbs = FAULTS[attachment](self.namespace)
        store = self.stack.world.host.store
        return store.faults.refuse(
            store.resolve(group, version, plural), namespace=namespace, verbs=verbs
        )

    async def _items(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        found = await self.custom.list_namespaced_custom_object(*ARGO, namespace, plural)
        return list(found["items"])

    async def cluster(self) -> dict[str, Any]:
        """What the pipelines' objects on the cluster say (through the real client)."""
        crons = {
            item["metadata"]["name"]: (
                item["metadata"]["labels"]["kubeopera.io/pipeline-version"],
                item["spec"]["workflowSpec"],
                item["spec"]["schedules"],
                item["spec"]["suspend"],
            )
            for item in await self._items("cronworkflows", self.namespace)
        }
        sources = {
            item["metadata"]["name"]: sorted(item["spec"]["webhook"])
            for item in await self._items("eventsources", EVENTS)
        }
        sensors = {
            item["metadata"]["name"]: item["spec"]["triggers"]
            for item in await self._items("sensors", EVENTS)
        }
        secrets = await self.core.list_namespaced_secret(EVENTS)
        tokens = {item.metadata.name: item.data for item in secrets.items}
        templates = sorted(
            item["metadata"]["name"]
            for item in await self._items("workflowtemplates", self.namespace)
        )
        return {
            "cron_workflows": crons,
            "event_sources": sources,
            "sensors": sensors,
            "tokens": tokens,
            "templates": templates,
        }

    async def recorded(self) -> dict[str, Any]:
        """What the API says of the tenant's ML pipelines, and the experiments recorded."""
        status, page = await self.call("GET", "ml-pipelines")
        assert status == 200, page
        pipelines = {}
        for item in page["items"]:
            _, versions = await self.call("GET", f"ml-pipelines/{item['id']}/versions")
            pipelines[item["id"]] = (item["current_version"], versions["total"])
        experiments = await self.stack.pool.fetchval(
            "SELECT count(*) FROM ml_experiments WHERE tenant = $1", self.tenant
        )
        return {"pipelines": pipelines, "experiments": experiments}

    async def token(self, pipeline_id: str, trigger: str) -> str:
        status, answer = await self.call(
            "GET", f"ml-pipelines/{pipeline_id}/triggers/{trigger}/webhook"
        )
        assert status == 200, answer
        return str(answer["token"])


@pytest.fixture
async def scene(ml_stack: Stack) -> Scene:
    scene = Scene(ml_stack, new_tenant())
    # The tenant exists, with its MLflow account, before the saves under test.
    status, saved = await scene.call("POST", "ml-pipelines", json=body("other"))
    assert status == 201, saved
    return scene


async def failed(scene: Scene, attachment: str, method: str, path: str, **kwargs: Any) -> Any:
    lift = scene.refuse(attachment)
    try:
        status, answer = await scene.call(method, path, **kwargs)
    finally:
        lift()
    assert status == 503, answer  # the cluster refused: ours to fix, not the tenant's
    return answer


@pytest.mark.parametrize("attachment", sorted(FAULTS))
async def test_a_create_that_fails_leaves_nothing(scene: Scene, attachment: str) -> None:
    before, recorded = await scene.cluster(), await scene.recorded()
    await failed(scene, attachment, "POST", "ml-pipelines", json=saved_body(1))
    assert await scene.cluster() == before
    assert await scene.recorded() == recorded
    status, saved = await scene.call("POST", "ml-pipelines", json=saved_body(1))
    assert status == 201, saved  # the fault alone stopped it


@pytest.mark.parametrize("attachment", sorted(FAULTS))
async def test_an_update_that_fails_leaves_the_previous_version_in_place(
    scene: Scene, attachment: str
) -> None:
    status, saved = await scene.call("POST", "ml-pipelines", json=saved_body(1))
    assert status == 201, saved
    pipeline_id = saved["id"]
    token = await scene.token(pipeline_id, "on-upload")
    before, recorded = await scene.cluster(), await scene.recorded()
    path = f"ml-pipelines/{pipeline_id}"
    await failed(scene, attachment, "PUT", path, json=saved_body(2))
    after = await scene.cluster()
    # The unrecorded version's template may stay: the next save takes its number and replaces it.
    assert set(after.pop("templates")) - set(before.pop("templates")) <= {f"p-{pipeline_id}-v2"}
    assert after == before
    assert await scene.recorded() == recorded
    assert await scene.token(pipeline_id, "on-upload") == token
    status, again = await scene.call("PUT", path, json=saved_body(2))
    assert (status, again["version"]) == (200, 2), again


@pytest.mark.parametrize("attachment", sorted(FAULTS))
async def test_a_rollback_that_fails_leaves_the_current_version_in_place(
    scene: Scene, attachment: str
) -> None:
    status, saved = await scene.call("POST", "ml-pipelines", json=saved_body(1))
    assert status == 201, saved
    pipeline_id = saved["id"]
    status, updated = await scene.call("PUT", f"ml-pipelines/{pipeline_id}", json=saved_body(2))
    assert (status, updated["version"]) == (200, 2), updated
    token = await scene.token(pipeline_id, "nightly")
    before, recorded = await scene.cluster(), await scene.recorded()
    path = f"ml-pipelines/{pipeline_id}/rollback"
    await failed(scene, attachment, "POST", path, json={"version": 1})
    assert await scene.cluster() == before
    assert await scene.recorded() == recorded
    assert await scene.token(pipeline_id, "nightly") == token
    status, rolled = await scene.call("POST", path, json={"version": 1})
    assert (status, rolled["current_version"]) == (200, 1), rolled


async def test_a_commit_that_fails_after_every_attachment_puts_them_back(scene: Scene) -> None:
    status, saved = await scene.call("POST", "ml-pipelines", json=saved_body(1))
    assert status == 201, saved
    pipeline_id = saved["id"]
    token = await scene.token(pipeline_id, "on-upload")
    before, recorded = await scene.cluster(), await scene.recorded()
    lift = await refusing_commits(scene.stack.pool)
    try:
        status, answer = await scene.call("PUT", f"ml-pipelines/{pipeline_id}", json=saved_body(2))
        assert status >= 500, answer
        created, _ = await scene.call("POST", "ml-pipelines", json=saved_body(1) | {"name": "new"})
        assert created >= 500
    finally:
        await lift()
    after = await scene.cluster()
    assert set(after.pop("templates")) - set(before.pop("templates")) <= {f"p-{pipeline_id}-v2"}
    assert after == before
    assert await scene.recorded() == recorded
    assert await scene.token(pipeline_id, "on-upload") == token


async def refusing_commits(pool: Any) -> Callable[[], Any]:
    """A deferred constraint trigger: a version's insert passes, its commit fails."""
    await pool.execute(
        "CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'commit refused'; END $$"
    )
    await pool.execute(
        "CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT ON pipeline_versions "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_commit()"
    )

    async def lift() -> None:
        await pool.execute("DROP TRIGGER refuse_commit ON pipeline_versions")
        await pool.execute("DROP FUNCTION refuse_commit()")

    return lift


async def test_a_save_that_fails_collects_no_template(stack: Stack) -> None:
    """Template GC happens once the save is recorded: a save whose commit fails leaves every
    template its recorded versions say is on the cluster."""
    status, saved = await stack.call("POST", "data-pipelines", json=body())
    assert status == 201, saved
    pipeline_id = saved["id"]
    for number in range(2, 11):  # ten versions: as many templates as are kept
        status, updated = await stack.call(
            "PUT", f"data-pipelines/{pipeline_id}", json=body(extra_step=number % 2 == 0)
        )
        assert (status, updated["version"]) == (200, number), updated
    custom = CustomObjectsApi(stack.kube)

    async def templates() -> set[str]:
        found = await custom.list_namespaced_custom_object(*ARGO, NS, "workflowtemplates")
        return {item["metadata"]["name"] for item in found["items"]}

    assert f"p-{pipeline_id}-v1" in await templates()
    lift = await refusing_commits(stack.pool)
    try:
        status, answer = await stack.call("PUT", f"data-pipelines/{pipeline_id}", json=body())
    finally:
        await lift()
    assert status >= 500, answer
    assert f"p-{pipeline_id}-v1" in await templates()
    _, versions = await stack.call("GET", f"data-pipelines/{pipeline_id}/versions?limit=20")
    assert versions["total"] == 10
    status, _ = await stack.call("PUT", f"data-pipelines/{pipeline_id}", json=body())
    assert status == 200
    assert f"p-{pipeline_id}-v1" not in await templates()  # collected once recorded


async def test_a_delete_that_fails_leaves_the_pipeline_whole(scene: Scene) -> None:
    status, saved = await scene.call("POST", "ml-pipelines", json=saved_body(1))
    assert status == 201, saved
    pipeline_id = saved["id"]
    token = await scene.token(pipeline_id, "on-upload")
    before, recorded = await scene.cluster(), await scene.recorded()
    store = scene.stack.world.host.store
    templates = store.resolve(*ARGO, "workflowtemplates")
    lift = store.faults.refuse(templates, verbs={"delete"}, namespace=scene.namespace)
    try:
        status, answer = await scene.call("DELETE", f"ml-pipelines/{pipeline_id}")
    finally:
        lift()
    assert status == 503, answer
    assert await scene.cluster() == before
    assert await scene.recorded() == recorded
    assert await scene.token(pipeline_id, "on-upload") == token
    status, _ = await scene.call("DELETE", f"ml-pipelines/{pipeline_id}")
    assert status == 200
    after = await scene.cluster()
    assert not any(pipeline_id in name for name in after["cron_workflows"])
    assert not any(pipeline_id in name for name in after["tokens"])
