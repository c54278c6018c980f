"""A pipeline's schedule end to end: the apiserver's routes, the compiler, the sim host's store
and its data controller: the CronWorkflow follows the current version (save, update, rollback,
schedule removed, pipeline deleted), pause and resume (audited, kept across a save), the next
fire times, refusals naming their field, an attachment failure failing the save, and the data
controller firing the schedule on its clock."""

from __future__ import annotations

from typing import Any

from shared.runs import ClusterRef, RunSource
from sim.argo.controller import ArgoSimulator
from tests.integration.compiler.pipeline_stack import NS, Stack, body, headers, make_stack
from watcher.normalise import normalise

CRON = "argoproj.io", "v1alpha1", "cronworkflows"
SCHEDULE = {"cron": ["0 2 * * *"], "timezone": "Europe/Helsinki"}


def scheduled(name: str = "nightly", **schedule: Any) -> dict[str, Any]:
    return {**body(name), "schedule": {**SCHEDULE, **schedule}}


def cron_workflows(stack: Stack) -> dict[str, dict[str, Any]]:
    store = stack.world.host.store
    items, _ = store.list(store.resolve(*CRON), NS)
    return {item["metadata"]["name"]: item for item in items}


async def actions(stack: Stack, name: str) -> list[tuple[str, str, str]]:
    rows = await stack.pool.fetch(
        "SELECT action, actor, outcome FROM run_actions WHERE name = $1 ORDER BY id", name
    )
    return [(row["action"], row["actor"], row["outcome"]) for row in rows]


async def test_the_cron_workflow_follows_the_current_version(stack: Stack) -> None:
    status, saved = await stack.call("POST", "data-pipelines", json=scheduled())
    assert status == 201, saved
    name = f"p-{saved['id']}"
    cron = cron_workflows(stack)[name]
    assert cron["metadata"]["labels"] == {
        "kubeopera.io/pipeline-id": saved["id"],
        "kubeopera.io/pipeline-version": "1",
        "kubeopera.io/pipeline-kind": "data",
        "workflows.argoproj.io/controller-instanceid": "kubeopera-data",
    }
    spec = cron["spec"]
    assert spec["schedules"] == ["0 2 * * *"]
    assert "schedule" not in spec  # gone in Argo 4
    assert spec["timezone"] == "Europe/Helsinki"
    assert spec["concurrencyPolicy"] == "Allow"
    assert spec["suspend"] is False
    assert "startingDeadlineSeconds" not in spec
    assert spec["workflowSpec"] == {"workflowTemplateRef": {"name": saved["template_name"]}}
    assert spec["workflowMetadata"]["labels"] == cron["metadata"]["labels"]

    changed = scheduled(concurrency_policy="Forbid", starting_deadline_seconds=600)
    status, v2 = await stack.call("PUT", f"data-pipelines/{saved['id']}", json=changed)
    assert status == 200, v2
    spec = cron_workflows(stack)[name]["spec"]
    assert spec["workflowSpec"]["workflowTemplateRef"]["name"] == v2["template_name"]
    assert (spec["concurrencyPolicy"], spec["startingDeadlineSeconds"]) == ("Forbid", 600)

    status, _ = await stack.call(
        "POST", f"data-pipelines/{saved['id']}/rollback", json={"version": 1}
    )
    assert status == 200
    spec = cron_workflows(stack)[name]["spec"]
    assert spec["workflowSpec"]["workflowTemplateRef"]["name"] == saved["template_name"]
    assert spec["concurrencyPolicy"] == "Allow"
    assert "startingDeadlineSeconds" not in spec

    status, _ = await stack.call("PUT", f"data-pipelines/{saved['id']}", json=body())
    assert status == 200
    assert name not in cron_workflows(stack)  # no schedule in the current version

    await stack.call("POST", f"data-pipelines/{saved['id']}/rollback", json={"version": 2})
    assert name in cron_workflows(stack)
    status, _ = await stack.call("DELETE", f"data-pipelines/{saved['id']}")
    assert status == 200
    assert cron_workflows(stack) == {}


async def test_pause_and_resume_set_suspend_are_audited_and_a_save_keeps_a_pause(
    stack: Stack,
) -> None:
    _, saved = await stack.call("POST", "data-pipelines", json=scheduled())
    pipeline, name = saved["id"], f"p-{saved['id']}"

    status, paused = await stack.call("POST", f"data-pipelines/{pipeline}/schedule/pause")
    assert status == 200, paused
    assert (paused["paused"], paused["paused_by"]) == (True, "alice@acme")
    assert cron_workflows(stack)[name]["spec"]["suspend"] is True

    _, read = await stack.call("GET", f"data-pipelines/{pipeline}")
    assert read["schedule"]["paused"] is True
    assert read["schedule"]["next_runs"] == []  # paused: nothing will run

    changed = scheduled(cron=["30 3 * * *"])
    status, _ = await stack.call("PUT", f"data-pipelines/{pipeline}", json=changed)
    assert status == 200
    cron = cron_workflows(stack)[name]
    assert cron["spec"]["suspend"] is True  # the save did not resume it
    assert cron["spec"]["schedules"] == ["30 3 * * *"]
    await stack.call("POST", f"data-pipelines/{pipeline}/rollback", json={"version": 1})
    assert cron_workflows(stack)[name]["spec"]["suspend"] is True

    status, resumed = await stack.call(
        "POST", f"data-pipelines/{pipeline}/schedule/resume", as_=headers(actor="bob@acme")
    )
    assert status == 200, resumed
    assert resumed["paused"] is False
    assert cron_workflows(stack)[name]["spec"]["suspend"] is False
    _, read = await stack.call("GET", f"data-pipelines/{pipeline}")
    assert read["schedule"]["paused"] is False
    assert len(read["schedule"]["next_runs"]) == 5
    assert read["schedule"]["next_runs"][0].endswith(("T02:00:00+02:00", "T02:00:00+03:00"))

    assert await actions(stack, name) == [
        ("schedule_pause", "alice@acme", "succeeded"),
        ("schedule_resume", "bob@acme", "succeeded"),
    ]


async def test_a_suspended_schedule_stays_suspended_after_a_resume(stack: Stack) -> None:
    _, saved = await stack.call("POST", "data-pipelines", json=scheduled(suspended=True))
    name = f"p-{saved['id']}"
    assert cron_workflows(stack)[name]["spec"]["suspend"] is True
    status, resumed = await stack.call("POST", f"data-pipelines/{saved['id']}/schedule/resume")
    assert status == 200
    assert (resumed["paused"], resumed["suspended"]) == (False, True)
    assert cron_workflows(stack)[name]["spec"]["suspend"] is True


async def test_pausing_without_a_schedule_is_a_conflict_and_audited(stack: Stack) -> None:
    _, saved = await stack.call("POST", "data-pipelines", json=body())
    status, answer = await stack.call("POST", f"data-pipelines/{saved['id']}/schedule/pause")
    assert status == 409, answer
    assert answer["details"]["reason"] == "no_schedule"
    assert await actions(stack, f"p-{saved['id']}") == [("schedule_pause", "alice@acme", "failed")]


async def test_pausing_needs_pipelines_write_and_the_tenant(stack: Stack) -> None:
    _, saved = await stack.call("POST", "data-pipelines", json=scheduled())
    path = f"data-pipelines/{saved['id']}/schedule/pause"
    status, _ = await stack.call("POST", path, as_=headers(permissions="pipelines.read"))
    assert status == 403
    status, _ = await stack.call("POST", path, as_=headers(tenant="other"))
    assert status == 404
    assert cron_workflows(stack)[f"p-{saved['id']}"]["spec"]["suspend"] is False
    status, _ = await stack.call("POST", f"ml-pipelines/{saved['id']}/schedule/pause")
    assert status == 404


async def test_refusals_name_their_field(stack: Stack) -> None:
    cases = [
        ({"cron": ["*/2 * * * *"]}, "schedule.cron[0]"),
        ({"cron": ["0 * * * *", "3 * * * *"]}, "schedule.cron"),
        ({"cron": ["@every 10m"]}, "schedule.cron[0]"),
        ({"cron": ["0 2 * * *", "61 * * * *"]}, "schedule.cron[1]"),
        ({"timezone": "Europe/Atlantis"}, "schedule.timezone"),
        ({"concurrency_policy": "Sometimes"}, "schedule.concurrency_policy"),
        ({"starting_deadline_seconds": -1}, "schedule.starting_deadline_seconds"),
        ({"cron": []}, "schedule.cron"),
    ]
    for schedule, field in cases:
        for method, path in (("POST", "data-pipelines/validate"), ("POST", "data-pipelines")):
            status, answer = await stack.call(method, path, json=scheduled(**schedule))
            assert status == 400, (schedule, answer)
            assert [error["field"] for error in answer["details"]["errors"]] == [field], answer
    assert cron_workflows(stack) == {}
    assert stack.templates() == []


async def test_the_floor_is_the_setting(db: Any, database_url: str, settings_factory: Any) -> None:
    async for stack in make_stack(db, database_url, settings_factory, SCHEDULE_MIN_INTERVAL="1m"):
        status, saved = await stack.call(
            "POST", "data-pipelines", json=scheduled(cron=["*/2 * * * *"])
        )
        assert status == 201, saved


async def test_an_attachment_failure_fails_the_save_and_records_no_version(
    stack: Stack,
) -> None:
    """An admission webhook refusing CronWorkflows (the emulator's fault hook)."""
    _, saved = await stack.call("POST", "data-pipelines", json=body())
    store = stack.world.host.store
    lift = store.faults.refuse(store.resolve(*CRON))
    try:
        status, answer = await stack.call("PUT", f"data-pipelines/{saved['id']}", json=scheduled())
    finally:
        lift()
    assert status == 503, answer  # a 403 from the cluster: ours to fix, not the tenant's
    _, read = await stack.call("GET", f"data-pipelines/{saved['id']}")
    assert (read["current_version"], read["latest_version"]) == (1, 1)
    assert read["schedule"] is None
    _, versions = await stack.call("GET", f"data-pipelines/{saved['id']}/versions")
    assert versions["total"] == 1
    status, again = await stack.call("PUT", f"data-pipelines/{saved['id']}", json=scheduled())
    assert (status, again["version"]) == (200, 2)  # the next save takes the number


async def test_the_data_controller_fires_the_schedule(stack: Stack) -> None:
    _, saved = await stack.call(
        "POST", "data-pipelines", json=scheduled(cron=["*/10 * * * *"], timezone="UTC")
    )
    controller = stack.world.host.data_argo
    assert isinstance(controller, ArgoSimulator)
    clock = SimClock(1_800_000_000.0)  # 2027-01-15T08:00:00Z, on a 10-minute boundary
    controller.clock = clock
    await controller.step()  # sees the CronWorkflow; nothing due yet
    assert runs_of(stack, saved["id"]) == []
    clock.now += 600
    await controller.step()
    created = runs_of(stack, saved["id"])
    assert [run["metadata"]["name"] for run in created] == [f"p-{saved['id']}-1800000600"]
    labels = created[0]["metadata"]["labels"]
    assert labels["workflows.argoproj.io/cron-workflow"] == f"p-{saved['id']}"
    assert labels["kubeopera.io/pipeline-id"] == saved["id"]
    assert labels["workflows.argoproj.io/controller-instanceid"] == "kubeopera-data"
    record = normalise(created[0], ClusterRef("host", "host"))  # as the watcher records it
    assert (record.source, record.pipeline_id) == (RunSource.SCHEDULE, saved["id"])
    # The CI/CD controller never takes it.
    await stack.world.host.argo.step()
    for _ in range(30):
        clock.now += 1
        await controller.step()
    finished = runs_of(stack, saved["id"])[0]
    assert finished["status"]["phase"] == "Succeeded", finished["status"]
    cron = cron_workflows(stack)[f"p-{saved['id']}"]
    assert cron["status"]["lastScheduledTime"] == "2027-01-15T08:10:00Z"


class SimClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def runs_of(stack: Stack, pipeline_id: str) -> list[dict[str, Any]]:
    store = stack.world.host.store
    items, _ = store.list(
        store.resolve("argoproj.io", "v1alpha1", "workflows"),
        NS,
        label_selector=f"kubeopera.io/pipeline-id={pipeline_id}",
    )
    return sorted(items, key=lambda item: item["metadata"]["name"])
