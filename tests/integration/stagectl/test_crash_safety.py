"""Every stage is safe to resume after a crash: the real ``wm-stagectl`` process (its console
script, settings from the environment, the sim host's kubeconfig, moto S3 behind a proxy that
can hold requests) is killed with SIGKILL between every step of every stage, with several ML
runs in flight, and started again each time:

- register: during the copy into the registry, after the outcome was recorded and before
  ``set``, after ``set`` and before ``resume``, after ``resume`` and before the outcome is
  marked completed;
- gate, approval and cleanup: the same three points around ``set`` and ``resume``.

Each kill waits for an observable fact: a call held in flight (by the sim Argo server's
interceptor or the S3 proxy), never a sleep. In the end every run has exactly one model
version, every approval one decision, and every stage node was completed exactly once (the sim
Argo server records which call moved which node out of waiting).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from shared.argo import ArgoServer
from shared.db.registry import RegistryReader
from shared.errors import Conflict
from sim.argo.server import DATA_ARGO_NAMESPACE, DATA_ARGO_SERVICE
from tests.integration.stagectl.holding import HoldingS3, StageHolds, registry_copy
from tests.integration.stagectl.release_stack import BUCKET, REGION, ReleaseStack, eventually

STAGES = ("register", "gate", "approval", "cleanup")
AROUND_NODE = (("before", "set"), ("before", "resume"), ("after", "resume"))
# (stage, where): "copy" is the register stage's copy into the registry.
KILL_POINTS: list[tuple[str, tuple[str, str] | str]] = [
    ("register", "copy"),
    *[(stage, point) for stage in STAGES for point in AROUND_NODE],
]
RUNS = 3


class Stagectl:
    """The real process, started again after every kill."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0

    async def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                str(Path(os.sys.executable).parent / "wm-stagectl"),
                env=self.env,
                stdout=out,
                stderr=out,
            )
        self.starts += 1

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                await self.kill()

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None


@pytest.fixture
async def s3_proxy(release_stack: ReleaseStack) -> AsyncIterator[HoldingS3]:
    proxy = HoldingS3(release_stack.moto)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


@pytest.fixture
async def stagectl(
    release_stack: ReleaseStack, s3_proxy: HoldingS3, tmp_path: Path, database_url: str
) -> AsyncIterator[Stagectl]:
    kubeconfig = tmp_path / "host.kubeconfig"
    kubeconfig.write_text(release_stack.stack.world.host.kubeconfig)
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "HOST_KUBECONFIG": str(kubeconfig),
        "ARTIFACT_BUCKET": BUCKET,
        "S3_ENDPOINT_URL": s3_proxy.url,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "HEALTH_PORT": "0",
        "LOG_JSON": "true",
        # A container restarted in its pod keeps its name: it takes its lease back at once.
        "POD_NAME": "stagectl-0",
        "POD_NAMESPACE": "workflow-manager",
        "LEASE_DURATION": "2s",
        "LEASE_RENEW_PERIOD": "0.5s",
        "STAGE_SWEEP_INTERVAL": "1s",
    }
    process = Stagectl(env, tmp_path / "stagectl.log")
    data = release_stack.stack.world.host.data_argo
    assert data is not None
    data.start()
    try:
        yield process
    finally:
        await process.stop()
        await data.stop()


def arm(holds: StageHolds, proxy: HoldingS3, where: tuple[str, str] | str, stage: str) -> None:
    holds.disarm()
    proxy.hold = None
    if where == "copy":
        proxy.hold = registry_copy
    else:
        assert isinstance(where, tuple)
        holds.arm(where[0], where[1], stage)


async def wait_held(holds: StageHolds, proxy: HoldingS3, where: tuple[str, str] | str) -> None:
    if where == "copy":
        await asyncio.wait_for(proxy.gate.arrived.wait(), 60)
    else:
        await asyncio.wait_for(holds.wait_held(), 60)


def release_held(holds: StageHolds, proxy: HoldingS3, where: tuple[str, str] | str) -> None:
    if where == "copy":
        proxy.gate.release(proceed=False)
    else:
        holds.release()
    holds.disarm()
    proxy.hold = None


async def test_every_stage_survives_sigkill_at_every_step(
    release_stack: ReleaseStack, stagectl: Stagectl, s3_proxy: HoldingS3
) -> None:
    stack = release_stack
    holds = StageHolds()
    stack.data_server.interceptor = holds
    pipeline = await stack.save(approval=True)
    names = [await stack.run(pipeline) for _ in range(RUNS)]
    reader = RegistryReader(stack.pool)
    decided = False
    first_stage, first_where = KILL_POINTS[0]
    arm(holds, s3_proxy, first_where, first_stage)
    await stagectl.start()
    for index, (stage, where) in enumerate(KILL_POINTS):
        if stage == "approval" and not decided:
            # Every run asks for approval; decide each through the registry, as the API does.
            async def all_pending() -> list[Any] | None:
                rows = await stack.pool.fetch(
                    "SELECT run_name, model_id FROM approvals WHERE state = 'pending'"
                )
                return rows if len(rows) == RUNS else None

            for row in await eventually(all_pending, within=60, what="approvals not requested"):
                await reader.decide(
                    row["model_id"], row["run_name"], tenant="acme", approve=True, actor="alice"
                )
            decided = True
        await wait_held(holds, s3_proxy, where)
        if where == ("before", "set"):
            # The outcome is recorded before the node is completed.
            held = holds.held_runs[-1]
            assert await stack.outcome(stack.uid(held), stage) is not None
        assert stagectl.alive()
        await stagectl.kill()
        release_held(holds, s3_proxy, where)
        if index + 1 < len(KILL_POINTS):
            arm(holds, s3_proxy, KILL_POINTS[index + 1][1], KILL_POINTS[index + 1][0])
        await stagectl.start()

    async def all_finished() -> bool:
        return all(stack.phase(name) in ("Succeeded", "Failed", "Error") for name in names)

    await eventually(all_finished, within=120, what="runs did not finish")

    async def all_completed() -> bool:
        open_ = await stack.pool.fetchval(
            "SELECT count(*) FROM stage_outcomes WHERE completed_at IS NULL"
        )
        total = await stack.pool.fetchval("SELECT count(*) FROM stage_outcomes")
        return bool(open_ == 0 and total == RUNS * len(STAGES))

    await eventually(all_completed, within=60, what="outcomes not all completed")
    assert stagectl.starts == len(KILL_POINTS) + 1
    assert [stack.phase(name) for name in names] == ["Succeeded"] * RUNS

    # One version per run, numbers never reused, each registered with its files.
    versions = await stack.versions()
    assert sorted(v["run_name"] for v in versions) == sorted(names)
    assert sorted(v["number"] for v in versions) == list(range(1, RUNS + 1))
    assert {(v["state"], v["release_outcome"]) for v in versions} == {("approved", "completed")}
    by_run = {v["run_name"]: v for v in versions}
    for version in versions:
        prefix = version["prefix"]
        assert stack.keys(prefix) == sorted(
            [prefix + "eval_scorecard.json", prefix + "lineage.json", prefix + "model.tgz"]
        )
        assert json.loads(stack.object(prefix + "lineage.json"))["version"] == version["number"]

    # One decision per approval; a second is refused.
    approvals = await stack.pool.fetch("SELECT * FROM approvals")
    assert len(approvals) == RUNS
    assert {(a["state"], a["decided_by"]) for a in approvals} == {("approved", "alice")}
    with pytest.raises(Conflict):
        await reader.decide(
            approvals[0]["model_id"],
            approvals[0]["run_uid"],
            tenant="acme",
            approve=False,
            actor="bob",
        )

    # Every stage node completed exactly once, with the recorded outputs set exactly once.
    for name in names:
        nodes = {stage: stack.node(name, f"wm-{stage}") for stage in STAGES}
        completed = stack.completions(name)
        outputs_set: dict[str, int] = {}
        for action in stack.data_server.node_actions:
            if action.name == name:
                for nid in action.outputs_set:
                    outputs_set[nid] = outputs_set.get(nid, 0) + 1
        for stage, node in nodes.items():
            assert node is not None, (name, stage)
            assert node["phase"] == "Succeeded", (name, stage)
            assert completed.get(node["id"]) == 1, (name, stage, completed)
            assert outputs_set.get(node["id"]) == 1, (name, stage, outputs_set)
        register_outputs = {
            p["name"]: p["value"] for p in nodes["register"]["outputs"]["parameters"]
        }
        assert register_outputs == {"version": str(by_run[name]["number"])}
    audited = await stack.pool.fetch(
        "SELECT run_uid, action, count(*) AS n FROM run_actions WHERE action LIKE 'stage_%' "
        "GROUP BY run_uid, action"
    )
    assert len(audited) == RUNS * len(STAGES)
    assert {row["n"] for row in audited} == {1}


async def test_a_registration_cut_short_is_abandoned_by_cleanup(
    release_stack: ReleaseStack, stagectl: Stagectl, s3_proxy: HoldingS3
) -> None:
    """Killed while copying into the registry, the run is stopped before the controller is
    back: its cleanup removes the partial copies, marks the version abandoned, and the number
    is never given to another run."""
    stack = release_stack
    pipeline = await stack.save()
    name = await stack.run(pipeline)
    s3_proxy.hold = registry_copy
    await stagectl.start()
    await asyncio.wait_for(s3_proxy.gate.arrived.wait(), 60)
    await stagectl.kill()
    s3_proxy.hold = None
    s3_proxy.gate.release(proceed=True)  # this copy lands: a partial version in the registry
    [version] = await stack.versions()
    assert version["state"] == "registering"
    assert stack.keys(version["prefix"]) != []
    argo = ArgoServer(stack.stack.kube, namespace=DATA_ARGO_NAMESPACE, service=DATA_ARGO_SERVICE)
    await argo.stop("kubeopera-data-acme", name)
    await stagectl.start()
    uid = stack.uid(name)
    cleanup = await eventually(lambda: stack.outcome(uid, "cleanup"), within=60)
    assert cleanup["outputs"] == {"outcome": "abandoned"}
    [version] = await stack.versions()
    assert (version["state"], version["release_outcome"]) == ("abandoned", "abandoned")
    assert stack.keys(version["prefix"]) == []
    assert await stack.outcome(uid, "register") is None
    again = await stack.run(pipeline)
    await eventually(lambda: stack.outcome(stack.uid(again), "register"), within=60)
    numbers = [(v["run_name"], v["number"], v["state"]) for v in await stack.versions()]
    assert numbers[0] == (name, 1, "abandoned")
    assert numbers[1][:2] == (again, 2)


async def test_a_new_leader_finishes_what_a_killed_one_started(
    release_stack: ReleaseStack, stagectl: Stagectl, s3_proxy: HoldingS3
) -> None:
    """Two replicas: the leader is killed after recording the register stage's outcome and
    before completing its node; the other replica takes the lease (after LEASE_DURATION) and
    completes the node with the recorded outcome."""
    stack = release_stack
    holds = StageHolds()
    stack.data_server.interceptor = holds
    standby = Stagectl({**stagectl.env, "POD_NAME": "stagectl-1"}, stagectl.log)
    pipeline = await stack.save()
    name = await stack.run(pipeline)
    holds.arm("before", "set", "register")
    await stagectl.start()
    await asyncio.wait_for(holds.wait_held(), 60)
    await standby.start()
    recorded = await stack.outcome(stack.uid(name), "register")
    assert recorded is not None
    await stagectl.kill()
    holds.release()
    holds.disarm()
    try:

        async def done() -> bool:
            return stack.phase(name) == "Succeeded"

        await eventually(done, within=60, what="the standby did not take over")
        [version] = await stack.versions()
        assert version["run_name"] == name
        register = stack.node(name, "wm-register")
        assert register is not None
        assert {p["name"]: p["value"] for p in register["outputs"]["parameters"]} == {
            "version": recorded["outputs"]["version"]
        }
        assert sorted(stack.completions(name).values()) == [1, 1, 1]
    finally:
        await standby.stop()
