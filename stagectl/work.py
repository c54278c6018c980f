"""The work of each control stage, and the one way a stage's node is completed.

``StageWork.handle`` takes a waiting stage node of a workflow:

1. admission (``stagectl.admission``): the pipeline version in our database must contain the
   stage, for that run's pipeline, version, namespace and template; otherwise the attempt is
   logged and audited once and nothing else happens;
2. the recorded outcome (``stage_outcomes``) when there is one: a stage is done at most once
   per run, whatever happens to the process. Register looks before its work (which copies
   files); the others' work only reads, and their commit point answers the outcome recorded
   before instead of theirs;
3. otherwise the stage's work, ending with its commit point (``stagectl.recording``);
4. the node completed with the recorded outcome (``stagectl.argo_nodes``), then the outcome
   marked completed.

A crash between any two of these leaves a state the next attempt continues from (see
docs/operations.md, "stagectl"). Approvals also arrive from the other side: a decision
(``finish_approval``) records the stage's outcome and completes its node without waiting for
the workflow to change.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

import asyncpg
from pydantic import ValidationError

from shared import stages as S
from shared.argo import ArgoServer
from shared.db.pipelines import PipelineReader, PipelineRow, VersionRow
from shared.db.registry import RunRef, StageOutcome
from shared.db.registry_store import RegistryStore
from shared.errors import NotFound
from shared.logging import get_logger
from shared.pipelines import Release as ReleaseSettings
from stagectl import admission, metrics
from stagectl.argo_nodes import TAMPERED_MESSAGE, complete
from stagectl.outcomes import (
    Later,
    Outcome,
)
from stagectl.s3_registry import RegistryObjects, storage_time
from stagectl.stages.approval import approval, decided
from stagectl.stages.cleanup import cleanup
from stagectl.stages.context import ReleaseRun
from stagectl.stages.deploy import deploy
from stagectl.stages.gate import gate
from stagectl.stages.register import register
from stagectl.workflow import RunFacts, WaitingStage, read_run

log = get_logger(__name__)

ACTOR: Final = "stagectl"
_CACHED: Final = 1024  # pipeline versions kept in memory (immutable rows)
_CLUSTER_ID_TTL: Final = 30.0


class StageWork:
    """Does the stages' work for the workflows the controller hands it."""

    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        argo: ArgoServer,
        objects: RegistryObjects,
        approval_timeout: float,
        deploy_poll: float = 1.0,
    ) -> None:
        self._pool = pool
        self._argo = argo
        self._objects = objects
        self._approval_timeout = approval_timeout
        self._deploy_poll = deploy_poll
        self._pipelines = PipelineReader(pool)
        self._versions: OrderedDict[tuple[str, int], tuple[PipelineRow, VersionRow]] = OrderedDict()
        self._refused: set[tuple[str, str]] = set()
        self._cluster: tuple[str, float] | None = None
        # (run uid, attempt started, stage) -> the resourceVersion our completion produced: an
        # older copy of the workflow still shows the node waiting and needs nothing more.
        self._completed: OrderedDict[tuple[str, str, str], int] = OrderedDict()

    async def fetch(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The workflow as the Argo server shows it (its offloaded nodes hydrated); None when
        it is gone."""
        try:
            return await self._argo.get(namespace, name)
        except NotFound:
            return None

    # --- one waiting node -------------------------------------------------------------------
    async def handle(
        self, workflow: Mapping[str, Any], waiting: WaitingStage, *, seen_at: float
    ) -> float | None:
        """Do ``waiting``'s stage (once per run) and complete its node. ``seen_at`` is when
        the node was seen waiting (``time.monotonic``): a stage's time is measured from it.
        A long stage that is not done yet stores its progress and answers the seconds after
        which to look again (None: nothing more to do now)."""
        picked_at = time.monotonic()
        run = read_run(workflow)
        if run is None:
            return None
        done = self._completed.get((run.uid, run.attempt, waiting.stage))
        if done is not None and run.resource_version < done:
            return None  # a copy from before our own completion
        attempt, stored = await self._attempt(run, waiting)
        run = dataclasses.replace(run, attempt=attempt)
        if stored is not None and stored.completed_at is not None and not waiting.node_id:
            return None  # done, and there is no node to complete
        release = await self._admit(run, workflow, waiting)
        if release is None:
            return None
        admitted_at = time.monotonic()
        with storage_time() as waited:
            outcome: Outcome | Later | None = Outcome.from_json(stored.outcome) if stored else None
            if outcome is None:
                outcome = await self._work(waiting, release)
            if outcome is None:
                return None  # waiting for a person
            if isinstance(outcome, Later):
                await RegistryStore(self._pool).save_progress(
                    run.uid, waiting.stage, run.attempt, step=outcome.step, state=outcome.state
                )
                return outcome.seconds
        worked_at = time.monotonic()
        if not waiting.node_id:  # nothing waits: the outcome is the whole of it
            await RegistryStore(self._pool).mark_completed(
                run.uid, waiting.stage, run.attempt, resource_version=run.resource_version
            )
            log.info("stage_done_without_node", workflow=run.name, stage=waiting.stage)
            return None
        changed = await self._complete(release.ref, waiting.stage, outcome)
        if changed:
            self._measure(
                release.ref,
                waiting.stage,
                outcome,
                seen_at=seen_at,
                waited=waited[0],
                steps={
                    "queued": picked_at - seen_at,
                    "admission": admitted_at - picked_at,
                    "work": worked_at - admitted_at - waited[0],
                    "argo": changed,
                },
            )
        return None

    async def _attempt(
        self, run: RunFacts, waiting: WaitingStage
    ) -> tuple[str, StageOutcome | None]:
        """Which attempt of the run's ``waiting`` stage this is, and the outcome it recorded.
        An attempt is the run's ``status.startedAt`` (an in-place retry sets it anew); a node
        that waits again in a copy newer than our completion of it, within the same second,
        is the next attempt (``<startedAt>#2``, ...: migration 0016)."""
        recorded = await RegistryStore(self._pool).outcomes(run.uid, waiting.stage, run.attempt)
        attempt, stored = run.attempt, None
        by_attempt = {row.attempt: row for row in recorded}
        for n in range(1, len(recorded) + 2):
            attempt = run.attempt if n == 1 else f"{run.attempt}#{n}"
            stored = by_attempt.get(attempt)
            waits_again = (
                stored is not None
                and waiting.node_id != ""
                and stored.completed_rv is not None
                and run.resource_version > stored.completed_rv
            )
            if not waits_again:
                break
        return attempt, stored

    async def _admit(
        self, run: RunFacts, workflow: Mapping[str, Any], waiting: WaitingStage
    ) -> ReleaseRun | None:
        pipeline, version = await self._version(run)
        reason = admission.refusal(run, waiting, pipeline, version)
        release = None
        if reason is None and version is not None:
            try:
                release = ReleaseSettings.model_validate(version.settings.get("release") or {})
            except ValidationError as exc:
                reason = f"the pipeline version's release no longer reads: {str(exc)[:300]}"
        ref = RunRef(await self._host_cluster_id(), run.namespace, run.name, run.uid, run.attempt)
        if reason is not None or release is None:
            async with RegistryStore.transaction(self._pool) as store:
                await self._refuse(store, ref, run, waiting, reason or "no release")
            return None
        assert pipeline is not None  # admitted
        assert version is not None
        return ReleaseRun(
            run=run,
            ref=ref,
            workflow=workflow,
            tenant=pipeline.tenant,
            pipeline_id=pipeline.id,
            pipeline_version=version.version,
            release=release,
            definition=version.definition,
            version_settings=version.settings,
        )

    async def _host_cluster_id(self) -> str:
        """The host's id in ``clusters``, read again every ``_CLUSTER_ID_TTL`` seconds (it
        changes once, when the registry lists the host and the watcher adopts its id)."""
        now = time.monotonic()
        if self._cluster is None or now - self._cluster[1] > _CLUSTER_ID_TTL:
            self._cluster = (await RegistryStore(self._pool).host_cluster_id(), now)
        return self._cluster[0]

    async def _version(self, run: RunFacts) -> tuple[PipelineRow | None, VersionRow | None]:
        if run.pipeline_id is None or run.pipeline_version is None:
            return None, None
        key = (run.pipeline_id, run.pipeline_version)
        cached = self._versions.get(key)
        if cached is not None:
            self._versions.move_to_end(key)
            return cached
        pipeline = await self._pipelines.find("ml", run.pipeline_id, tenant=None)
        if pipeline is None:
            return None, None
        version = await self._pipelines.version(run.pipeline_id, run.pipeline_version)
        if version is not None:
            self._versions[key] = (pipeline, version)
            if len(self._versions) > _CACHED:
                self._versions.popitem(last=False)
        return pipeline, version

    async def _refuse(
        self,
        store: RegistryStore,
        ref: RunRef,
        run: RunFacts,
        waiting: WaitingStage,
        reason: str,
    ) -> None:
        """Log and audit a refused stage once (per process, and per run in the audit)."""
        key = (run.uid, waiting.stage)
        if key in self._refused:
            return
        self._refused.add(key)
        if await store.refusal_audited(run.uid, waiting.stage):
            return
        metrics.REFUSED.labels(stage=waiting.stage).inc()
        log.warning(
            "stage_refused",
            namespace=run.namespace,
            workflow=run.name,
            stage=waiting.stage,
            node=waiting.node_name,
            reason=reason,
        )
        await store.audit(
            ref,
            tenant=admission.tenant_of(run.namespace),
            action="stage_refused",
            outcome="refused",
            detail={"stage": waiting.stage, "node": waiting.node_name, "reason": reason},
        )

    async def _work(self, waiting: WaitingStage, release: ReleaseRun) -> Outcome | Later | None:
        """The stage's own work, in its module (``stagectl.stages``)."""
        stage = waiting.stage
        if stage == S.REGISTER:
            return await register(release, pool=self._pool, objects=self._objects)
        if stage == S.GATE:
            return await gate(release, pool=self._pool)
        if stage == S.DEPLOY:
            return await deploy(release, pool=self._pool, poll=self._deploy_poll)
        if stage == S.APPROVAL:
            return await approval(release, pool=self._pool, expires_in=self._approval_timeout)
        return await cleanup(release, pool=self._pool, objects=self._objects, deleted=waiting.gone)

    async def finish_approval(self, run_uid: str) -> None:
        """Act on the run's approval decision: record the stage's outcome, complete its node."""
        started = time.monotonic()
        async with RegistryStore.transaction(self._pool) as store:
            approval = await store.approval(run_uid)
            stored = (
                await store.outcome(run_uid, S.APPROVAL, approval.attempt) if approval else None
            )
            model = await store.model(approval.model_id) if approval else None
        if approval is None or model is None or approval.state == "pending":
            return
        if stored is not None and stored.completed_at is not None:
            return
        ref = RunRef(
            approval.cluster_id,
            approval.run_namespace,
            approval.run_name,
            run_uid,
            approval.attempt,
        )
        outcome = (
            Outcome.from_json(stored.outcome)
            if stored
            else await decided(self._pool, ref, approval, tenant=model.tenant)
        )
        if outcome is None:
            return
        answered = await self._complete(ref, S.APPROVAL, outcome)
        if answered:
            self._measure(
                ref, S.APPROVAL, outcome, seen_at=started, waited=0.0, steps={"argo": answered}
            )

    async def finish_recorded(self, stored: StageOutcome) -> None:
        """Complete the node of an outcome recorded earlier and never marked completed, unless
        the run has moved on to another attempt (a retry): that attempt's node gets its own
        outcome, so this one is only marked completed."""
        ref = stored.run
        try:
            current = read_run(await self._argo.get(ref.namespace, ref.name))
        except NotFound:
            current = None
        if current is None or current.uid != ref.uid:
            await RegistryStore(self._pool).mark_completed(ref.uid, stored.stage, ref.attempt)
            return
        if ref.attempt and current.attempt != ref.attempt.partition("#")[0]:
            await RegistryStore(self._pool).mark_completed(ref.uid, stored.stage, ref.attempt)
            log.info("stage_outcome_superseded", workflow=ref.name, stage=stored.stage)
            return
        await self._complete(ref, stored.stage, Outcome.from_json(stored.outcome))

    # --- completion -----------------------------------------------------------------------
    async def _complete(self, ref: RunRef, stage: str, outcome: Outcome) -> float:
        """Complete the node with the recorded outcome, then mark the outcome completed.
        The seconds the Argo server's calls took when this attempt changed the node; 0.0
        when an earlier attempt had. A node whose outputs someone else set is failed and
        audited (``stagectl.argo_nodes``)."""
        started = time.monotonic()
        done = await complete(self._argo, ref.namespace, ref.name, stage, outcome)
        answered = time.monotonic() - started
        if done.tampered is not None:
            await self._tampered(ref, stage, outcome, done.tampered)
        await RegistryStore(self._pool).mark_completed(
            ref.uid, stage, ref.attempt, resource_version=done.resource_version
        )
        key = (ref.uid, ref.attempt.partition("#")[0], stage)
        self._completed[key] = max(done.resource_version, self._completed.get(key, 0))
        if len(self._completed) > 10 * _CACHED:
            self._completed.popitem(last=False)
        return max(answered, 1e-9) if done.resource_version > 0 else 0.0

    async def _tampered(
        self, ref: RunRef, stage: str, outcome: Outcome, found: dict[str, str]
    ) -> None:
        metrics.REFUSED.labels(stage=stage).inc()
        log.warning(
            "stage_outputs_tampered",
            namespace=ref.namespace,
            workflow=ref.name,
            stage=stage,
            recorded=json.dumps(outcome.outputs, sort_keys=True),
            found=json.dumps(found, sort_keys=True)[:500],
        )
        await RegistryStore(self._pool).audit(
            ref,
            tenant=admission.tenant_of(ref.namespace),
            action="stage_tampered",
            outcome="refused",
            detail={
                "stage": stage,
                "reason": TAMPERED_MESSAGE,
                "recorded": outcome.outputs,
                "found": found,
            },
        )

    def _measure(
        self,
        ref: RunRef,
        stage: str,
        outcome: Outcome,
        *,
        seen_at: float,
        waited: float,
        steps: dict[str, float] | None = None,
    ) -> None:
        """Count and log a completed stage: its time from ``seen_at``, less ``waited`` for
        object storage; ``steps`` break it down (waiting for a worker, the Argo calls)."""
        total = time.monotonic() - seen_at
        own = max(0.0, total - waited)
        metrics.STAGES.labels(stage=stage, phase=outcome.phase).inc()
        metrics.STAGE_SECONDS.labels(stage=stage).observe(own)
        if waited:
            metrics.STORAGE_SECONDS.labels(stage=stage).observe(waited)
        log.info(
            "stage_completed",
            namespace=ref.namespace,
            workflow=ref.name,
            stage=stage,
            phase=outcome.phase,
            outputs=json.dumps(outcome.outputs, sort_keys=True),
            seconds=round(total, 6),
            storage_seconds=round(waited, 6),
            own_seconds=round(own, 6),
            **{f"{name}_seconds": round(value, 6) for name, value in (steps or {}).items()},
        )
