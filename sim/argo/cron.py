"""Argo's CronWorkflow controller, simulated on the controller's clock, after workflow/cron/
(controller.go, operator.go, cron_facade.go) at f016ad8 (v4.1.2).

Each ArgoSimulator runs the CronWorkflows its instance ID selects (labelled with it; without
one, unlabelled), as Argo's cron informer does. At each fire time of ``spec.schedules`` in
``spec.timezone`` (UTC when empty: the sim's machine zone) it runs the CronWorkflow:

- ``suspend: true``: nothing (``lastScheduledTime`` stays);
- ``concurrencyPolicy``: ``Allow`` (default) starts another; ``Forbid`` skips while one of its
  workflows is unfinished; ``Replace`` terminates those (``spec.shutdown: Terminate``, as
  Argo v4's ``terminateOutstandingWorkflows``) and starts the new one;
- the workflow is ``<cron name>-<unix seconds of the scheduled time>`` (a second submission for
  the same time is refused, so two schedules firing together start one), labelled
  ``workflows.argoproj.io/cron-workflow`` plus the CronWorkflow's instance ID label and
  ``workflowMetadata`` labels, annotated with the scheduled time, owned by the CronWorkflow,
  with ``workflowSpec`` as its spec;
- status: ``lastScheduledTime``, ``active`` (its unfinished workflows), ``phase: Active``, and
  the ``last-used-schedule`` annotation.

When the controller first sees a CronWorkflow (it started, or the object was created or its
spec changed) Argo adds it to its cron again, counting from now; before that it runs at most ONE
missed run (``shouldOutstandingWorkflowsBeRun``): the latest fire time after
``lastScheduledTime`` that is already past, and only when ``startingDeadlineSeconds`` is set and
now is within it of that time, and only when the schedules are those last used. Between
steps of a running controller every fire time in between fires (the clock moved while it ran).

Fire times come from ``shared.schedules`` (robfig's rules; ``@every`` is not simulated).
Not simulated: ``when``, ``stopStrategy``, the history limits, ``@every``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import structlog

from shared.schedules import ScheduleError, fire_times_between, parse_cron, time_zone
from sim.argo.naming import LABEL_PREFIX, Obj, is_completed, iso, parse_iso
from sim.argo.restrictions import instance_selector, manages
from sim.kube.types import ApiError

if TYPE_CHECKING:
    from sim.kube.store import ClusterStore

log = structlog.get_logger("sim.argo.cron")

LABEL_CRON_WORKFLOW = LABEL_PREFIX + "cron-workflow"
ANNOTATION_SCHEDULED_TIME = LABEL_PREFIX + "scheduled-time"
ANNOTATION_LAST_USED_SCHEDULE = "cronworkflows.argoproj.io/last-used-schedule"
MERGE_PATCH = "application/merge-patch+json"


# -- the scheduling rules (pure) --------------------------------------------------------------


def schedule_string(spec: Obj) -> str:
    """Argo's ``GetScheduleWithTimezoneString``: what ``last-used-schedule`` holds."""
    zone = spec.get("timezone") or ""
    schedules = [str(item) for item in spec.get("schedules") or []]
    return ",".join(f"CRON_TZ={zone} {item}" if zone else item for item in schedules)


def missed_run(
    fire_times: Sequence[datetime],
    *,
    now: datetime,
    starting_deadline: float | None,
    new_schedule: bool,
) -> datetime | None:
    """The one missed run Argo starts when it (re)adds a CronWorkflow, or None.

    ``fire_times`` are those after ``lastScheduledTime`` (ascending; empty when it never ran).
    Only the latest that is already past counts, and only within ``startingDeadlineSeconds``
    (unset: never) of it; a schedule changed since its last run starts nothing."""
    if new_schedule or starting_deadline is None:
        return None
    past = [moment for moment in fire_times if moment < now]
    if not past:
        return None
    latest = past[-1]
    return latest if now < latest + timedelta(seconds=starting_deadline) else None


def should_start(policy: str, active: int) -> tuple[bool, bool]:
    """(start a run, terminate the active ones first) under ``concurrencyPolicy``."""
    if policy == "Forbid":
        return active == 0, False
    if policy == "Replace":
        return True, active > 0
    return True, False  # Allow, or unset


# -- the controller -----------------------------------------------------------------------------


class CronSimulator:
    """The CronWorkflows of one controller (its instance ID), stepped by its ArgoSimulator."""

    def __init__(self, store: ClusterStore, *, instance_id: str | None) -> None:
        self.store = store
        self.instance_id = instance_id
        self.crons = store.resolve("argoproj.io", "v1alpha1", "cronworkflows")
        self.workflows = store.resolve("argoproj.io", "v1alpha1", "workflows")
        # (namespace, name) -> (uid, generation, the time fire times are counted from)
        self._seen: dict[tuple[str, str], tuple[str, int, float]] = {}

    def step(self, now: float) -> None:
        items, _ = self.store.list(
            self.crons, None, label_selector=instance_selector(self.instance_id)
        )
        present = set()
        for cron in items:
            metadata = cron["metadata"]
            key = (str(metadata["namespace"]), str(metadata["name"]))
            present.add(key)
            if not manages(metadata.get("labels"), self.instance_id):
                continue
            try:
                self._step_one(cron, key, now)
            except Exception:
                log.exception("cron_sim_failed", cron=key)
        for key in set(self._seen) - present:
            del self._seen[key]

    def _step_one(self, cron: Obj, key: tuple[str, str], now: float) -> None:
        metadata, spec = cron["metadata"], cron.get("spec") or {}
        identity = (str(metadata.get("uid")), int(metadata.get("generation") or 0))
        try:
            crons = [parse_cron(str(text)) for text in spec.get("schedules") or []]
            zone = time_zone(str(spec.get("timezone") or "UTC"))
        except ScheduleError as error:
            self._condition(key, "SpecError", str(error))
            return
        moment = datetime.fromtimestamp(now, tz=UTC)
        seen = self._seen.get(key)
        if seen is None or seen[:2] != identity:
            # (Re)added to the cron: one missed run at most, then counted from now.
            status = cron.get("status") or {}
            last = parse_iso(status.get("lastScheduledTime"))
            if last is not None:
                since = datetime.fromtimestamp(last, tz=UTC)
                annotations = metadata.get("annotations") or {}
                missed = missed_run(
                    fire_times_between(crons, zone, since, moment),
                    now=moment,
                    starting_deadline=spec.get("startingDeadlineSeconds"),
                    new_schedule=annotations.get(ANNOTATION_LAST_USED_SCHEDULE)
                    != schedule_string(spec),
                )
                if missed is not None:
                    self._run(key, missed.timestamp())
            self._seen[key] = (*identity, now)
            return
        since = datetime.fromtimestamp(seen[2], tz=UTC)
        for fire in fire_times_between(crons, zone, since, moment):
            self._run(key, fire.timestamp())
        self._seen[key] = (*identity, now)  # status writes leave the generation as it is

    def _active(self, namespace: str, name: str) -> list[Obj]:
        items, _ = self.store.list(
            self.workflows, namespace, label_selector=f"{LABEL_CRON_WORKFLOW}={name}"
        )
        return [item for item in items if not is_completed(item)]

    def _run(self, key: tuple[str, str], scheduled: float) -> None:
        namespace, name = key
        cron = self.store.get(self.crons, namespace, name)
        spec = cron.get("spec") or {}
        if spec.get("suspend"):
            log.info("cron_sim_suspended", cron=key)
            return
        active = self._active(namespace, name)
        start, terminate = should_start(str(spec.get("concurrencyPolicy") or ""), len(active))
        if not start:
            log.info("cron_sim_forbidden", cron=key, active=len(active))
            return
        if terminate:
            for workflow in active:
                with contextlib.suppress(ApiError):
                    self.store.patch(
                        self.workflows,
                        namespace,
                        workflow["metadata"]["name"],
                        {"spec": {"shutdown": "Terminate"}},
                        content_type=MERGE_PATCH,
                    )
        created = self._create(cron, scheduled)
        running = self._active(namespace, name)
        if created is not None and all(w["metadata"]["uid"] != created["uid"] for w in running):
            running.append({"metadata": created})
        status_patch: Obj = {
            "status": {
                "lastScheduledTime": iso(scheduled),
                "phase": "Active",
                "active": [
                    {
                        "kind": "Workflow",
                        "apiVersion": "argoproj.io/v1alpha1",
                        "name": w["metadata"]["name"],
                        "namespace": namespace,
                        "uid": w["metadata"]["uid"],
                    }
                    for w in running
                ],
            },
            "metadata": {
                "annotations": {ANNOTATION_LAST_USED_SCHEDULE: schedule_string(spec)},
            },
        }
        self.store.patch(self.crons, namespace, name, status_patch, content_type=MERGE_PATCH)

    def _create(self, cron: Obj, scheduled: float) -> Obj | None:
        """Argo's ``ConvertCronWorkflowToWorkflowWithProperties``; the created metadata."""
        metadata, spec = cron["metadata"], cron.get("spec") or {}
        labels: dict[str, str] = {}
        cron_labels = metadata.get("labels") or {}
        instance = cron_labels.get(LABEL_PREFIX + "controller-instanceid")
        if instance is not None:
            labels[LABEL_PREFIX + "controller-instanceid"] = instance
        labels[LABEL_CRON_WORKFLOW] = metadata["name"]
        workflow_metadata = spec.get("workflowMetadata") or {}
        labels.update(workflow_metadata.get("labels") or {})
        annotations = {ANNOTATION_SCHEDULED_TIME: iso(scheduled)}
        annotations.update(workflow_metadata.get("annotations") or {})
        body = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {
                "name": f"{metadata['name']}-{int(scheduled)}",
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "argoproj.io/v1alpha1",
                        "kind": "CronWorkflow",
                        "name": metadata["name"],
                        "uid": metadata["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": copy.deepcopy(spec.get("workflowSpec") or {}),
        }
        try:
            created = self.store.create(self.workflows, metadata["namespace"], body)
        except ApiError as error:
            if error.status == 409:  # already submitted for that time
                return None
            raise
        log.info("cron_sim_submitted", workflow=created["metadata"]["name"])
        return dict(created["metadata"])

    def _condition(self, key: tuple[str, str], kind: str, message: str) -> None:
        patch = {"status": {"conditions": [{"type": kind, "status": "True", "message": message}]}}
        with contextlib.suppress(ApiError):
            self.store.patch(self.crons, *key, patch, content_type=MERGE_PATCH)
