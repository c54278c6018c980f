"""Two Argo simulators over one in-process ClusterStore (no sockets), as the host runs them: the
CI/CD controller (no instance ID) and the data controller (instance ID, Strict template
referencing). Each runs only what its instance ID selects; Strict errors non-references."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from sim.argo.controller import ArgoSimulator
from sim.argo.restrictions import REFERENCE_MODE_MESSAGE
from sim.kube.store import ClusterStore

Obj = dict[str, Any]
LABEL = "workflows.argoproj.io/controller-instanceid"
DATA = "kubeopera-data"
NS = "kubeopera-data-acme"
INLINE = {
    "entrypoint": "main",
    "templates": [{"name": "main", "container": {"image": "busybox", "args": ["echo ok"]}}],
}
REF = {"workflowTemplateRef": {"name": "etl"}}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store() -> ClusterStore:
    store = ClusterStore("unit")
    store.create(store.resolve("", "v1", "namespaces"), None, {"metadata": {"name": NS}})
    templates = store.resolve("argoproj.io", "v1alpha1", "workflowtemplates")
    store.create(templates, NS, {"metadata": {"name": "etl"}, "spec": INLINE})
    return store


@pytest.fixture
async def cicd(store: ClusterStore, clock: Clock) -> AsyncIterator[ArgoSimulator]:
    simulator = ArgoSimulator(store, clock=clock, pod_gc_delay=3600)
    yield simulator
    await simulator.stop()


@pytest.fixture
async def data(store: ClusterStore, clock: Clock) -> AsyncIterator[ArgoSimulator]:
    simulator = ArgoSimulator(
        store, clock=clock, pod_gc_delay=3600, instance_id=DATA, template_referencing="Strict"
    )
    yield simulator
    await simulator.stop()


def submit(store: ClusterStore, spec: Obj, *, instance_id: str | None = None) -> str:
    metadata: Obj = {"generateName": "t-"}
    if instance_id is not None:
        metadata["labels"] = {LABEL: instance_id}
    created = store.create(_workflows(store), NS, {"metadata": metadata, "spec": spec})
    return str(created["metadata"]["name"])


def _workflows(store: ClusterStore) -> Any:
    return store.resolve("argoproj.io", "v1alpha1", "workflows")


def get(store: ClusterStore, name: str) -> Obj:
    return store.get(_workflows(store), NS, name)


def pods_of(store: ClusterStore, name: str) -> list[Obj]:
    items, _ = store.list(
        store.resolve("", "v1", "pods"), NS, label_selector=f"workflows.argoproj.io/workflow={name}"
    )
    return items


async def settle(argo: ArgoSimulator, clock: Clock, steps: int = 30) -> None:
    for _ in range(steps):
        clock.now += 1
        await argo.step()


async def test_each_controller_runs_only_what_its_instance_id_selects(
    store: ClusterStore, cicd: ArgoSimulator, data: ArgoSimulator, clock: Clock
) -> None:
    unlabelled = submit(store, REF)
    other = submit(store, REF, instance_id="cicd")
    mine = submit(store, REF, instance_id=DATA)

    await settle(data, clock)
    assert get(store, mine)["status"]["phase"] == "Succeeded"
    assert [p["metadata"]["labels"][LABEL] for p in pods_of(store, mine)] == [DATA]
    for name in (unlabelled, other):
        assert "status" not in get(store, name)
        assert pods_of(store, name) == []

    await settle(cicd, clock)
    assert get(store, unlabelled)["status"]["phase"] == "Succeeded"
    assert LABEL not in pods_of(store, unlabelled)[0]["metadata"]["labels"]
    # Labelled for a controller that is not running: neither of these two takes it.
    assert "status" not in get(store, other)
    assert pods_of(store, other) == []


async def test_a_controller_started_later_finds_only_its_own_workflows(
    store: ClusterStore, clock: Clock
) -> None:
    mine = submit(store, REF, instance_id=DATA)
    unlabelled = submit(store, REF)
    late = ArgoSimulator(store, clock=clock, instance_id=DATA, template_referencing="Strict")
    try:
        await settle(late, clock)
    finally:
        await late.stop()
    assert get(store, mine)["status"]["phase"] == "Succeeded"
    assert "status" not in get(store, unlabelled)


async def test_strict_errors_a_workflow_without_a_template_reference_before_any_pod(
    store: ClusterStore, data: ArgoSimulator, clock: Clock
) -> None:
    inline = submit(store, INLINE, instance_id=DATA)
    await settle(data, clock)
    workflow = get(store, inline)
    assert workflow["status"]["phase"] == "Error"
    assert workflow["status"]["message"] == REFERENCE_MODE_MESSAGE
    assert workflow["metadata"]["labels"]["workflows.argoproj.io/completed"] == "true"
    assert not workflow["status"].get("nodes")
    assert pods_of(store, inline) == []


async def test_strict_errors_overrides_argo_does_not_allow_and_runs_allowed_ones(
    store: ClusterStore, data: ArgoSimulator, clock: Clock
) -> None:
    escaping = submit(
        store, {**REF, "serviceAccountName": "admin", "podSpecPatch": "{}"}, instance_id=DATA
    )
    allowed = submit(store, {**REF, "entrypoint": "main", "archiveLogs": False}, instance_id=DATA)
    await settle(data, clock)
    refused = get(store, escaping)["status"]
    assert (refused["phase"], refused["message"]) == (
        "Error",
        "fields [PodSpecPatch ServiceAccountName] are not permitted when using "
        "workflowTemplateRef with templateReferencing restriction",
    )
    assert pods_of(store, escaping) == []
    assert get(store, allowed)["status"]["phase"] == "Succeeded"


async def test_without_strict_a_workflow_without_a_reference_runs(
    store: ClusterStore, cicd: ArgoSimulator, clock: Clock
) -> None:
    inline = submit(store, INLINE)
    await settle(cicd, clock)
    assert get(store, inline)["status"]["phase"] == "Succeeded"


async def test_a_workflow_relabelled_away_mid_run_is_left_alone(
    store: ClusterStore, data: ArgoSimulator, clock: Clock
) -> None:
    name = submit(store, REF, instance_id=DATA)
    clock.now += 1
    await data.step()
    assert get(store, name)["status"]["phase"] == "Pending"
    store.patch(
        _workflows(store),
        NS,
        name,
        {"metadata": {"labels": {LABEL: "cicd"}}},
        content_type="application/merge-patch+json",
    )
    before = get(store, name)["metadata"]["resourceVersion"]
    await settle(data, clock)
    assert get(store, name)["metadata"]["resourceVersion"] == before
