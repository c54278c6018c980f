"""The Argo simulator over an in-process ClusterStore (no sockets), driven by `step()` with an
injected clock: steps, retries, `when`, suspend durations, actions, and the sample load."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from sim.argo import actions
from sim.argo.controller import ArgoSimulator
from sim.argo.naming import pod_name
from sim.argo.samples import install_samples, sample_workflow
from sim.kube.store import ClusterStore

Obj = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store() -> ClusterStore:
    return ClusterStore("unit")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def argo(store: ClusterStore, clock: Clock) -> Any:
    simulator = ArgoSimulator(store, clock=clock, pod_gc_delay=10)
    yield simulator
    await simulator.stop()


def leaf(name: str, script: str = "echo ok", **extra: Any) -> Obj:
    return {"name": name, "container": {"image": "busybox", "args": [script]}, **extra}


def submit(store: ClusterStore, spec: Obj, namespace: str = "default") -> str:
    workflows = store.resolve("argoproj.io", "v1alpha1", "workflows")
    body = {"metadata": {"generateName": "t-"}, "spec": spec}
    created = store.create(workflows, namespace, body)
    return str(created["metadata"]["name"])


def get(store: ClusterStore, name: str, namespace: str = "default") -> Obj:
    return store.get(store.resolve("argoproj.io", "v1alpha1", "workflows"), namespace, name)


async def settle(argo: ArgoSimulator, clock: Clock, steps: int = 60) -> None:
    for _ in range(steps):
        clock.now += 1
        await argo.step()


def nodes_by_name(wf: Obj) -> dict[str, Obj]:
    return {n["name"]: n for n in wf["status"]["nodes"].values()}


async def test_steps_run_group_by_group(
    store: ClusterStore, argo: ArgoSimulator, clock: Clock
) -> None:
    spec = {
        "entrypoint": "main",
        "templates": [
            {
                "name": "main",
                "steps": [
                    [{"name": "one", "template": "leaf"}],
                    [
                        {"name": "two", "template": "leaf"},
                        {"name": "skip", "template": "leaf", "when": "false"},
                    ],
                ],
            },
            leaf("leaf"),
        ],
    }
    name = submit(store, spec)
    await settle(argo, clock)
    wf = get(store, name)
    nodes = nodes_by_name(wf)
    assert wf["status"]["phase"] == "Succeeded"
    assert nodes[name]["type"] == "Steps"
    assert nodes[f"{name}[0]"]["type"] == "StepGroup"
    assert nodes[f"{name}[1].skip"]["phase"] == "Skipped"
    # the second group hangs off the first group's step
    assert nodes[f"{name}[1]"]["id"] in nodes[f"{name}[0].one"]["children"]
    assert nodes[f"{name}[1].two"]["startedAt"] >= nodes[f"{name}[0].one"]["finishedAt"]
    assert wf["status"]["progress"] == "2/2"
    duration = nodes[f"{name}[0].one"]["resourcesDuration"]
    assert duration == {"cpu": 1, "memory": 2}  # 2 ticks of 1 s at 100m cpu (rounded up), 100Mi


async def test_retry_strategy_attempts_then_fails(
    store: ClusterStore, argo: ArgoSimulator, clock: Clock
) -> None:
    spec = {
        "entrypoint": "flaky",
        "templates": [leaf("flaky", "exit 3", retryStrategy={"limit": "2"})],
    }
    name = submit(store, spec)
    await settle(argo, clock)
    wf = get(store, name)
    nodes = nodes_by_name(wf)
    assert nodes[name]["type"] == "Retry"
    assert [nodes[f"{name}({i})"]["message"] for i in range(3)] == ["Error (exit code 3)"] * 3
    assert f"{name}(3)" not in nodes
    assert wf["status"]["phase"] == "Failed"


async def test_suspend_duration_resumes_with_default_outputs(
    store: ClusterStore, argo: ArgoSimulator, clock: Clock
) -> None:
    gate = {
        "name": "gate",
        "suspend": {"duration": "30s"},
        "outputs": {
            "parameters": [{"name": "ok", "valueFrom": {"supplied": {}, "default": "yes"}}]
        },
    }
    name = submit(store, {"entrypoint": "gate", "templates": [gate]})
    await settle(argo, clock, steps=20)
    assert get(store, name)["status"]["phase"] == "Running"
    await settle(argo, clock, steps=20)
    wf = get(store, name)
    assert wf["status"]["phase"] == "Succeeded"
    assert wf["status"]["nodes"][name]["outputs"]["parameters"] == [{"name": "ok", "value": "yes"}]


async def test_pods_are_collected_after_the_delay(
    store: ClusterStore, argo: ArgoSimulator, clock: Clock
) -> None:
    name = submit(store, {"entrypoint": "a", "templates": [leaf("a")]})
    pods = store.resolve("", "v1", "pods")
    await settle(argo, clock, steps=5)
    assert get(store, name)["status"]["phase"] == "Succeeded"
    assert [p["metadata"]["name"] for p in store.list(pods, "default")[0]] == [name]
    lines = [line async for line in store.read_log("default", name)]
    assert any("echo ok" not in line and "ok" in line for line in lines)
    await settle(argo, clock, steps=12)
    assert store.list(pods, "default")[0] == []


async def test_retry_formulation_resets_failed_branch_only(
    store: ClusterStore, argo: ArgoSimulator, clock: Clock
) -> None:
    spec = {
        "entrypoint": "main",
        "onExit": "bye",
        "templates": [
            {
                "name": "main",
                "dag": {
                    "tasks": [
                        {"name": "ok", "template": "ok"},
                        {"name": "bad", "template": "bad", "depends": "ok"},
                        {"name": "after", "template": "ok", "depends": "bad.Failed"},
                    ]
                },
            },
            leaf("ok"),
            leaf("bad", "exit 1"),
            leaf("bye"),
        ],
    }
    name = submit(store, spec)
    await settle(argo, clock)
    wf = get(store, name)
    assert wf["status"]["phase"] == "Succeeded"  # the failure was handled by `after`
    retried, pods = actions.formulate_retry(
        {**wf, "status": {**wf["status"], "phase": "Failed"}},
        restart_successful=False,
        node_field_selector="",
        parameters=None,
        now=clock.now,
    )
    remaining = nodes_by_name(retried)
    assert set(remaining) == {name, f"{name}.ok"}
    assert remaining[name]["phase"] == "Running"
    assert sorted(pods) == sorted(
        [
            pod_name(name, f"{name}.bad", "bad"),
            pod_name(name, f"{name}.after", "ok"),
            pod_name(name, f"{name}.onExit", "bye"),
        ]
    )


def test_resubmit_and_set_validation() -> None:
    old = {
        "metadata": {
            "name": "nightly",
            "namespace": "ns",
            "labels": {"workflows.argoproj.io/phase": "Failed", "team": "data"},
        },
        "spec": {"shutdown": "Stop", "arguments": {"parameters": [{"name": "a", "value": "1"}]}},
        "status": {"phase": "Succeeded"},
    }
    new = actions.formulate_resubmit(old, memoized=False, parameters=["a=2"])
    assert new["metadata"]["generateName"] == "nightly-"
    assert new["metadata"]["labels"] == {
        "team": "data",
        "workflows.argoproj.io/resubmitted-from-workflow": "nightly",
    }
    assert "shutdown" not in new["spec"]
    assert new["spec"]["arguments"]["parameters"] == [{"name": "a", "value": "2"}]
    with pytest.raises(actions.ActionError, match="memoized"):
        actions.formulate_resubmit(old, memoized=True, parameters=None)
    with pytest.raises(actions.ActionError) as invalid:
        actions.parse_set_request("Running", "")
    assert invalid.value.http_status == 400
    with pytest.raises(actions.ActionError, match="unable to parse"):
        actions.parse_set_request("", "{not json")


async def test_sample_runs_all_finish(
    store: ClusterStore, argo: ArgoSimulator, clock: Clock
) -> None:
    install_samples(store, bucket="b")
    workflows = store.resolve("argoproj.io", "v1alpha1", "workflows")
    rng = random.Random(7)
    for _ in range(12):
        namespace, body = sample_workflow(rng)
        store.create(workflows, namespace, body)
    await settle(argo, clock, steps=200)
    items, _ = store.list(workflows, None)
    phases = {wf["status"]["phase"] for wf in items}
    assert phases <= {"Succeeded", "Failed"}
    assert "Succeeded" in phases
    tenant = [wf for wf in items if wf["metadata"]["namespace"] == "kubeopera-data-acme"]
    assert all(
        wf["status"]["artifactRepositoryRef"]["configMap"] == "artifact-repositories"
        for wf in tenant
    )
    await asyncio.sleep(0)
