"""The simulated CronWorkflow controller: Argo's rules as pure functions (the one missed run,
concurrency policies), then driven over an in-process store with an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sim.argo.controller import ArgoSimulator
from sim.argo.cron import missed_run, schedule_string, should_start
from sim.kube.store import ClusterStore

T0 = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)
NS = "kubeopera-data-acme"


def minutes(*values: int) -> list[datetime]:
    return [T0 + timedelta(minutes=value) for value in values]


@pytest.mark.parametrize(
    ("fires", "now", "deadline", "new", "expected"),
    [
        (minutes(10, 20, 30), 35, 600, False, 30),  # only the latest missed one
        (minutes(10, 20, 30), 41, 600, False, None),  # past its deadline
        (minutes(10, 20, 30), 35, None, False, None),  # no deadline: none
        (minutes(10, 20, 30), 35, 0, False, None),
        (minutes(10, 20, 30), 35, 600, True, None),  # the schedule changed
        ([], 35, 600, False, None),
        (minutes(40), 35, 600, False, None),  # not past yet
    ],
)
def test_one_missed_run_at_most(
    fires: list[datetime], now: int, deadline: float | None, new: bool, expected: int | None
) -> None:
    found = missed_run(
        fires, now=T0 + timedelta(minutes=now), starting_deadline=deadline, new_schedule=new
    )
    assert found == (None if expected is None else T0 + timedelta(minutes=expected))


@pytest.mark.parametrize(
    ("policy", "active", "expected"),
    [
        ("Allow", 2, (True, False)),
        ("", 1, (True, False)),
        ("Forbid", 1, (False, False)),
        ("Forbid", 0, (True, False)),
        ("Replace", 1, (True, True)),
        ("Replace", 0, (True, False)),
    ],
)
def test_concurrency_policies(policy: str, active: int, expected: tuple[bool, bool]) -> None:
    assert should_start(policy, active) == expected


def test_the_last_used_schedule_carries_the_zone() -> None:
    spec = {"schedules": ["0 2 * * *", "@hourly"], "timezone": "Europe/Helsinki"}
    assert schedule_string(spec) == (
        "CRON_TZ=Europe/Helsinki 0 2 * * *,CRON_TZ=Europe/Helsinki @hourly"
    )
    assert schedule_string({"schedules": ["@daily"]}) == "@daily"


class Clock:
    def __init__(self) -> None:
        self.now = T0.timestamp()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store() -> ClusterStore:
    store = ClusterStore("unit")
    store.create(store.resolve("", "v1", "namespaces"), None, {"metadata": {"name": NS}})
    return store


def cron(store: ClusterStore, **spec: Any) -> None:
    body = {
        "metadata": {"name": "nightly", "labels": {}},
        "spec": {
            "schedules": ["*/10 * * * *"],
            "workflowSpec": {
                "entrypoint": "main",
                "templates": [{"name": "main", "container": {"image": "busybox"}}],
            },
            **spec,
        },
    }
    store.create(store.resolve("argoproj.io", "v1alpha1", "cronworkflows"), NS, body)


def runs(store: ClusterStore) -> list[dict[str, Any]]:
    items, _ = store.list(store.resolve("argoproj.io", "v1alpha1", "workflows"), NS)
    return sorted(items, key=lambda item: item["metadata"]["name"])


def status(store: ClusterStore) -> dict[str, Any]:
    rtype = store.resolve("argoproj.io", "v1alpha1", "cronworkflows")
    return dict(store.get(rtype, NS, "nightly").get("status") or {})


async def test_fires_at_each_time_and_records_it(store: ClusterStore) -> None:
    clock = Clock()
    argo = ArgoSimulator(store, clock=clock)
    cron(store)
    await argo.step()
    assert runs(store) == []
    clock.now += 600
    await argo.step()
    clock.now += 1200  # two more fire times while it ran
    await argo.step()
    names = [run["metadata"]["name"] for run in runs(store)]
    start = int(T0.timestamp())
    assert names == [f"nightly-{start + 600}", f"nightly-{start + 1200}", f"nightly-{start + 1800}"]
    first = runs(store)[0]["metadata"]
    assert first["labels"]["workflows.argoproj.io/cron-workflow"] == "nightly"
    assert first["ownerReferences"][0]["kind"] == "CronWorkflow"
    assert status(store)["lastScheduledTime"] == "2027-01-15T08:30:00Z"
    await argo.stop()


async def test_forbid_skips_while_one_runs_and_replace_terminates_it(
    store: ClusterStore,
) -> None:
    clock = Clock()
    argo = ArgoSimulator(store, clock=clock)
    cron(store, concurrencyPolicy="Forbid", suspend=False)
    await argo.step()
    clock.now += 600
    argo.crons.step(clock.now)
    clock.now += 600
    argo.crons.step(clock.now)  # the first is still unfinished: skipped
    assert len(runs(store)) == 1
    rtype = store.resolve("argoproj.io", "v1alpha1", "cronworkflows")
    store.patch(
        rtype,
        NS,
        "nightly",
        {"spec": {"concurrencyPolicy": "Replace"}},
        content_type="application/merge-patch+json",
    )
    argo.crons.step(clock.now)  # changed: re-added, counted from now
    clock.now += 600
    argo.crons.step(clock.now)
    first, second = runs(store)
    assert first["spec"]["shutdown"] == "Terminate"
    assert "shutdown" not in second["spec"]
    await argo.stop()


async def test_suspend_skips_without_recording(store: ClusterStore) -> None:
    clock = Clock()
    argo = ArgoSimulator(store, clock=clock)
    cron(store, suspend=True)
    argo.crons.step(clock.now)
    clock.now += 3600
    argo.crons.step(clock.now)
    assert runs(store) == []
    assert "lastScheduledTime" not in status(store)
    await argo.stop()


async def test_after_downtime_one_missed_run_within_the_deadline(store: ClusterStore) -> None:
    clock = Clock()
    argo = ArgoSimulator(store, clock=clock)
    cron(store, startingDeadlineSeconds=300)
    argo.crons.step(clock.now)
    clock.now += 600
    argo.crons.step(clock.now)
    assert len(runs(store)) == 1
    await argo.stop()
    clock.now += 3 * 600 + 120  # down over three fire times; back 2 minutes after the last
    restarted = ArgoSimulator(store, clock=clock)
    restarted.crons.step(clock.now)
    names = [run["metadata"]["name"] for run in runs(store)]
    assert names[-1] == f"nightly-{int(T0.timestamp()) + 4 * 600}"  # only the latest
    assert len(names) == 2
    await restarted.stop()
    clock.now += 600 + 400  # down again; back 400 s after a fire time, past the deadline
    again = ArgoSimulator(store, clock=clock)
    again.crons.step(clock.now)
    assert len(runs(store)) == 2
    await again.stop()


async def test_a_controller_runs_only_the_cron_workflows_of_its_instance(
    store: ClusterStore,
) -> None:
    clock = Clock()
    data = ArgoSimulator(store, clock=clock, instance_id="kubeopera-data")
    cicd = ArgoSimulator(store, clock=clock)
    cron(store)  # unlabelled: the CI/CD controller's
    for controller in (data, cicd):
        controller.crons.step(clock.now)
    clock.now += 600
    data.crons.step(clock.now)
    assert runs(store) == []
    cicd.crons.step(clock.now)
    assert len(runs(store)) == 1
    await data.stop()
    await cicd.stop()
