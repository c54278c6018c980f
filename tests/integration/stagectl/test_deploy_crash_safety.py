"""The deploy stage and the deployment reconciler are safe to resume after a crash: the real
``wm-stagectl`` process (as in test_crash_safety.py, with model serving configured) is killed
with SIGKILL at every step of a deploy, with runs of several models in flight, and started
again each time:

1. the deploy stage wrote staging's wanted version (and its history entry) and has not stored
   its progress (``stage_progress``);
2. the reconciler applied the InferenceService and its route and has not registered the
   endpoint with the token store;
3. the reconciler issued the first token and has not kept it (``model_deployments``'
   ``token_sealed``);
4. the stage waits for readiness (objects applied, the KServe stand-in not serving yet);
5. the reconciler observed the deployment ready and the stage has not recorded its outcome;
6. the three points around the deploy node's ``set`` and ``resume``.

A kill waits for an observable fact: a statement of the process waiting on a table lock the
test holds (``holding.TableHold``), a call held by the sim Argo server, or the stored state of
the deploy; never a sleep. A statement held at a kill never happens. The round's seed picks
whether the KServe stand-in makes the deploy ready while the process is down or after it is
back (and seeds the stand-in). One round runs by default; ``WM_KILL_ROUNDS=N`` runs N, with
seeds 0..N-1, each round its own models and runs.

In the end every run has one version and one deployment history entry, its deployment is
ready with its URL, each model has one InferenceService (with one revision: a re-apply never
changed its spec), and every stage node was completed exactly once with the recorded outputs.
"""

from __future__ import annotations

import os
import random
from collections.abc import Awaitable
from typing import Any

from shared.db.inference_tokens import TokenStore
from shared.inference_tokens import hash_matches, parse_token
from shared.token_sealing import parse_key, unseal
from sim.serving.controller import REVISIONS, ServingConfig, ServingSimulator
from sim.serving.credentials import S3Config
from tests.integration.stagectl.holding import HoldingS3, StageHolds, TableHold
from tests.integration.stagectl.release_stack import DEPLOYMENT_TOKEN_KEY, ReleaseStack, eventually
from tests.integration.stagectl.test_crash_safety import Stagectl, s3_proxy, stagectl
from tests.integration.stagectl.test_deploy import DOMAIN, MODEL, SERVE_NS, serving_settings

__all__ = ["s3_proxy", "stagectl"]  # fixtures, used by name

ROUNDS = int(os.environ.get("WM_KILL_ROUNDS", "1"))
RUNS = 2
STAGES = ("register", "gate", "deploy", "cleanup")
# Deadline far beyond the test: a deploy here ends ready, never by the clock.
SERVING = {"model_format": {"name": "sklearn"}, "readiness_deadline_seconds": 3600}
AROUND_NODE = (("before", "set"), ("before", "resume"), ("after", "resume"))


def models_of(round_: int) -> list[str]:
    return [f"churn-r{round_}-{i}" for i in range(RUNS)]


def isvcs(stack: ReleaseStack) -> list[dict[str, Any]]:
    store = stack.stack.world.host.store
    items, _ = store.list(store.resolve("serving.kserve.io", "v1beta1", "inferenceservices"), None)
    return list(items)


class Round:
    """One seeded pass over every kill point."""

    def __init__(
        self,
        stack: ReleaseStack,
        process: Stagectl,
        *,
        database_url: str,
        seed: int,
        round_: int,
    ) -> None:
        self.stack = stack
        self.process = process
        self.database_url = database_url
        self.rng = random.Random(seed)
        self.seed = seed
        self.models = models_of(round_)
        self.names: list[str] = []
        self.kills = 0

    def hold(self, table: str, statement: str) -> Awaitable[TableHold]:
        return TableHold(self.database_url, table, statement).start()

    async def kill(self) -> None:
        assert self.process.alive(), f"seed {self.seed}: the process died on its own"
        await self.process.kill()
        self.kills += 1

    async def deployments(self) -> dict[str, Any]:
        rows = await self.stack.pool.fetch(
            "SELECT m.name, d.* FROM model_deployments d JOIN models m ON m.id = d.model_id "
            "WHERE m.name = ANY($1::text[])",
            self.models,
        )
        return {row["name"]: row for row in rows}

    async def run(self) -> None:
        """Every kill point in turn (the module docstring); the process runs at the end."""
        stack, process = self.stack, self.process
        pipelines = [
            await stack.save(model_name, release_model=model_name, serving=SERVING, model=MODEL)
            for model_name in self.models
        ]
        # 1 (and 2 armed, so the reconciler cannot pass it while the stage is held at 1).
        progress = await self.hold("stage_progress", "INSERT INTO stage_progress")
        endpoint = await self.hold("inference_deployments", "INSERT INTO inference_deployments")
        if not process.alive():
            await process.start()
        self.names = [await stack.run(pipeline) for pipeline in pipelines]
        await progress.wait_held()
        wanted = await stack.pool.fetch(
            "SELECT h.run_uid FROM model_deployment_history h JOIN models m ON m.id = h.model_id "
            "WHERE m.name = ANY($1::text[])",
            self.models,
        )
        assert wanted, f"seed {self.seed}: progress stored before the wanted version"
        await self.kill()
        await progress.release()
        await process.start()

        # 2: the objects are there, the endpoint not registered, nothing marked applied.
        await endpoint.wait_held()
        served = {i["metadata"]["name"] for i in isvcs(stack)}
        pending = {
            name: row
            for name, row in (await self.deployments()).items()
            if f"{name}-staging" in served and row["observed_generation"] < row["generation"]
        }
        assert pending, f"seed {self.seed}: no deployment applied and unmarked"
        await self.kill()
        sealed = await self.hold("model_deployments", "UPDATE model_deployments SET")
        await endpoint.release()
        await process.start()

        # 3: the token issued (or kept), then held at the reconciler's next write.
        await sealed.wait_held()
        await self.kill()
        await sealed.release()
        await process.start()

        # 4: applied, and the stage waiting (the KServe stand-in is not running yet).
        async def waiting() -> bool:
            rows = await self.deployments()
            stored = await stack.pool.fetch(
                "SELECT step FROM stage_progress WHERE stage = 'deploy' AND run_uid = ANY($1)",
                [stack.uid(name) for name in self.names],
            )
            return (
                len(rows) == RUNS
                and all(
                    r["observed_generation"] == r["generation"] and r["state"] == "deploying"
                    for r in rows.values()
                )
                and [s["step"] for s in stored] == ["ready"] * RUNS
            )

        await eventually(waiting, within=60, what=f"seed {self.seed}: deploys not waiting")
        await self.kill()
        recorded = await self.hold("stage_outcomes", "WITH o AS (INSERT INTO stage_outcomes")
        simulator = ServingSimulator(
            stack.stack.world.host.store,
            config=ServingConfig(s3=S3Config(endpoint=stack.moto)),
            tick=0.02,
            seed=self.seed,
        )
        serve_first = self.rng.random() < 0.5  # ready while the process is down, or after
        if serve_first:
            await simulator.start()
        await process.start()
        try:
            if not serve_first:
                await simulator.start()

            # 5: observed ready; the stage's outcome not recorded.
            await recorded.wait_held()
            ready = [r for r in (await self.deployments()).values() if r["state"] == "ready"]
            assert ready, f"seed {self.seed}: an outcome recorded before the deploy was ready"
            await self.kill()
            holds = StageHolds()
            stack.data_server.interceptor = holds
            holds.arm(*AROUND_NODE[0], "deploy")
            await recorded.release()
            await process.start()

            # 6: around the deploy node's set and resume.
            for index in range(len(AROUND_NODE)):
                await holds.wait_held()
                await self.kill()
                holds.release()
                holds.disarm()
                if index + 1 < len(AROUND_NODE):
                    holds.arm(*AROUND_NODE[index + 1], "deploy")
                await process.start()
            stack.data_server.interceptor = None

            async def all_finished() -> bool:
                return all(
                    stack.phase(name) in ("Succeeded", "Failed", "Error") for name in self.names
                )

            await eventually(all_finished, within=120, what=f"seed {self.seed}: runs unfinished")
            await self.check()
        finally:
            await simulator.stop()

    async def check(self) -> None:
        stack, seed = self.stack, self.seed
        assert [stack.phase(name) for name in self.names] == ["Succeeded"] * RUNS, seed
        uids = {name: stack.uid(name) for name in self.names}

        async def all_completed() -> bool:
            rows = await stack.pool.fetch(
                "SELECT completed_at FROM stage_outcomes WHERE run_uid = ANY($1)",
                list(uids.values()),
            )
            return len(rows) == RUNS * len(STAGES) and all(r["completed_at"] for r in rows)

        await eventually(all_completed, within=60, what=f"seed {seed}: outcomes open")

        # One version per run; one history entry per deploy, of this run's attempt.
        versions = await stack.pool.fetch(
            "SELECT v.run_name, v.number, m.name FROM model_versions v "
            "JOIN models m ON m.id = v.model_id WHERE m.name = ANY($1::text[])",
            self.models,
        )
        assert sorted((v["run_name"], v["number"]) for v in versions) == sorted(
            (name, 1) for name in self.names
        ), seed
        history = await stack.pool.fetch(
            "SELECT h.run_uid, h.environment, h.version, h.action FROM model_deployment_history "
            "h JOIN models m ON m.id = h.model_id WHERE m.name = ANY($1::text[])",
            self.models,
        )
        assert sorted(tuple(h) for h in history) == sorted(
            (uid, "staging", 1, "deploy") for uid in uids.values()
        ), (seed, history)

        # Each deployment ready with its URL, applied once per generation; its token checks.
        deployments = await self.deployments()
        assert sorted(deployments) == sorted(self.models), seed
        key = parse_key(DEPLOYMENT_TOKEN_KEY)
        for name, row in deployments.items():
            url = f"https://{name}-staging.acme.{DOMAIN}"
            assert (row["state"], row["url"], row["version"]) == ("ready", url, 1), (seed, name)
            assert (row["generation"], row["observed_generation"]) == (1, 1), (seed, name)
            token = unseal(
                bytes(row["token_sealed"]),
                key=key,
                model_id=row["model_id"],
                environment="staging",
            )
            parsed = parse_token(token)
            assert parsed is not None
            record = await TokenStore(stack.pool).lookup(parsed[0])
            assert record is not None
            assert hash_matches(parsed[0], parsed[1], record.secret_hash)
            assert record.deployment.model == name

        # One InferenceService per model, never re-specified (one revision each).
        store = stack.stack.world.host.store
        mine = [i for i in isvcs(stack) if i["metadata"]["name"].startswith(tuple(self.models))]
        assert sorted((i["metadata"]["namespace"], i["metadata"]["name"]) for i in mine) == [
            (SERVE_NS, f"{name}-staging") for name in sorted(self.models)
        ], seed
        revisions, _ = store.list(REVISIONS, SERVE_NS)
        for name in self.models:
            owned = [
                r
                for r in revisions
                if any(o["name"] == f"{name}-staging" for o in r["metadata"]["ownerReferences"])
            ]
            assert len(owned) == 1, (seed, name, [r["metadata"]["name"] for r in owned])

        # Every stage node completed exactly once, its outputs set exactly once.
        for name, model in zip(self.names, self.models, strict=True):
            completed = stack.completions(name)
            outputs_set: dict[str, int] = {}
            for action in stack.data_server.node_actions:
                if action.name == name:
                    for nid in action.outputs_set:
                        outputs_set[nid] = outputs_set.get(nid, 0) + 1
            for stage in STAGES:
                node = stack.node(name, f"wm-{stage}")
                assert node is not None, (seed, name, stage)
                assert node["phase"] == "Succeeded", (seed, name, stage)
                assert completed.get(node["id"]) == 1, (seed, name, stage, completed)
                assert outputs_set.get(node["id"]) == 1, (seed, name, stage, outputs_set)
            deploy = stack.node(name, "wm-deploy")
            assert deploy is not None
            outputs = {p["name"]: p["value"] for p in deploy["outputs"]["parameters"]}
            assert outputs == {"url": f"https://{model}-staging.acme.{DOMAIN}"}, seed
        audited = await stack.pool.fetch(
            "SELECT run_uid, action, count(*) AS n FROM run_actions WHERE action LIKE 'stage_%' "
            "AND run_uid = ANY($1) GROUP BY run_uid, action",
            list(uids.values()),
        )
        assert len(audited) == RUNS * len(STAGES), seed
        assert {row["n"] for row in audited} == {1}, seed


async def test_the_deploy_stage_and_reconciler_survive_sigkill_at_every_step(
    release_stack: ReleaseStack,
    stagectl: Stagectl,
    s3_proxy: HoldingS3,
    database_url: str,
) -> None:
    stagectl.env.update(
        {
            **{name: str(value) for name, value in serving_settings(release_stack.moto).items()},
            "DEPLOYMENT_TOKEN_KEY": DEPLOYMENT_TOKEN_KEY,
        }
    )
    kills = 0
    for round_ in range(ROUNDS):
        done = Round(release_stack, stagectl, database_url=database_url, seed=round_, round_=round_)
        await done.run()
        kills += done.kills
    assert stagectl.starts == kills + 1
