"""The Argo workflow controller, simulated: watches Workflows in a ClusterStore and drives them
through phases, nodes and pods; archives step logs; garbage-collects pods.

Several controllers can share one store, as on a cluster running more than one: each manages
only the workflows its instance ID selects (`restrictions.manages`), and one configured with
`templateReferencing: Strict` errors any workflow that does not reference a template."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog
import yaml

from sim.argo import pods as podsim
from sim.argo.archive import S3Archive
from sim.argo.cron import CronSimulator
from sim.argo.engine import PassOutcome, PodLaunch, PodState, WorkflowPass
from sim.argo.lint import LintError, lint_spec
from sim.argo.naming import (
    FULFILLED,
    LABEL_COMPLETED,
    LABEL_CONTROLLER_INSTANCE_ID,
    LABEL_PHASE,
    LABEL_WORKFLOW,
    LABEL_WORKFLOW_TEMPLATE,
    Obj,
    is_completed,
    iso,
    parse_iso,
)
from sim.argo.node_status import NodeStatusStorage
from sim.argo.restrictions import (
    TemplateReferencing,
    instance_selector,
    manages,
    reference_mode_error,
    sanitize_user_spec,
)
from sim.argo.templates import DEFAULT_KEY_FORMAT, effective_spec
from sim.kube.types import ApiError, ResourceType, WatchEvent

if TYPE_CHECKING:
    from sim.kube.store import ClusterStore

log = structlog.get_logger("sim.argo")

ARTIFACT_REPOSITORIES = "artifact-repositories"
DEFAULT_REPOSITORY_ANNOTATION = "workflows.argoproj.io/default-artifact-repository"
MERGE_PATCH = "application/merge-patch+json"
Key = tuple[str, str]


class ArgoSimulator:
    """Drives the Workflows of one cluster that its `instance_id` selects (labelled with it;
    without one, unlabelled). Call `step()` to advance time by one tick, or `start()` to tick
    every `tick` seconds in the background until `stop()`."""

    def __init__(
        self,
        store: ClusterStore,
        *,
        tick: float = 1.0,
        clock: Callable[[], float] = time.time,
        archive: S3Archive | None = None,
        pod_gc_delay: float = 5.0,
        key_format: str = DEFAULT_KEY_FORMAT,
        instance_id: str | None = None,
        template_referencing: TemplateReferencing | None = None,
        node_status: NodeStatusStorage | None = None,
    ) -> None:
        self.store = store
        self.node_status = node_status or NodeStatusStorage()
        self.instance_id = instance_id or None
        self.template_referencing = template_referencing
        self.tick = tick
        self.clock = clock
        self.archive = archive
        self.pod_gc_delay = pod_gc_delay
        self.key_format = key_format
        self.workflows = store.resolve("argoproj.io", "v1alpha1", "workflows")
        self.templates = store.resolve("argoproj.io", "v1alpha1", "workflowtemplates")
        self.cluster_templates = store.resolve(
            "argoproj.io", "v1alpha1", "clusterworkflowtemplates"
        )
        self.pods = store.resolve("", "v1", "pods")
        self.configmaps = store.resolve("", "v1", "configmaps")
        self._active: set[Key] = set()
        self._adopted: set[Key] = set()
        self._gc_due: dict[Key, float] = {}
        self._runs: dict[Key, podsim.PodRun] = {}
        self._task: asyncio.Task[None] | None = None
        self.crons = CronSimulator(store, instance_id=self.instance_id)
        self._unsubscribe = store.subscribe(self._on_event)
        items, _ = store.list(self.workflows, None, label_selector=instance_selector(instance_id))
        for workflow in items:
            self._track(workflow)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Tick in the background (idempotent)."""
        if self._task is None:
            name = f"argo-sim-{self.store.name}-{self.instance_id or 'default'}"
            self._task = asyncio.create_task(self.run(), name=name)

    async def stop(self) -> None:
        """Stop ticking and stop watching the store."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._unsubscribe()

    async def run(self) -> None:
        """Tick forever; a failing tick is logged and the next one runs."""
        while True:
            try:
                await self.step()
            except Exception:
                log.exception(
                    "argo_sim_tick_failed", cluster=self.store.name, instance_id=self.instance_id
                )
            await asyncio.sleep(self.tick)

    async def run_until_settled(self, *, max_steps: int = 200) -> None:
        """Step until no workflow is active, or `max_steps` (a suspended run stays active)."""
        for _ in range(max_steps):
            await self.step()
            if not self._active:
                return

    # -- watching -----------------------------------------------------------------------------

    def _on_event(self, event: WatchEvent, rtype: ResourceType) -> None:
        obj = event["object"]
        metadata = obj.get("metadata") or {}
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        if rtype.key == self.workflows.key:
            if not manages(metadata.get("labels"), self.instance_id):
                # Another controller's, or relabelled away: out of this one's informer.
                self._active.discard(key)
                self._adopted.discard(key)
            elif event["type"] == "DELETED":
                self._active.discard(key)
                self._adopted.discard(key)
                self._gc_due[key] = self.clock()
            elif event["type"] in ("ADDED", "MODIFIED"):
                self._track(obj)
        elif rtype.key == self.pods.key and event["type"] == "DELETED":
            self._runs.pop(key, None)

    def _track(self, workflow: Obj) -> None:
        metadata = workflow.get("metadata") or {}
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        if is_completed(workflow):
            self._active.discard(key)
            self._gc_due.setdefault(key, self.clock() + self.pod_gc_delay)
        else:
            self._active.add(key)
            self._gc_due.pop(key, None)

    # -- one tick -----------------------------------------------------------------------------

    async def step(self) -> None:
        """Run the CronWorkflows due, advance every pod and every active workflow by one tick,
        then collect pods."""
        now = self.clock()
        self.crons.step(now)
        for run in list(self._runs.values()):
            self._advance_pod(run, now)
        for key in sorted(self._active):
            await self._reconcile(key, now)
        self._collect_pods(now)

    def _advance_pod(self, run: podsim.PodRun, now: float) -> None:
        before = run.phase
        for line in podsim.advance(run, now):
            self.store.append_log(run.namespace, run.name, line)
        if run.phase != before:
            self._write_pod_status(run)

    def _write_pod_status(self, run: podsim.PodRun) -> None:
        patch: Obj = {"status": podsim.pod_status(run)}
        if run.done:
            self.store.close_log(run.namespace, run.name)
            patch["metadata"] = {"labels": {LABEL_COMPLETED: "true"}}
        try:
            self.store.patch(self.pods, run.namespace, run.name, patch, content_type=MERGE_PATCH)
        except ApiError as error:
            if error.status != 404:
                raise

    async def _reconcile(self, key: Key, now: float) -> None:
        namespace, name = key
        try:
            workflow = self.node_status.unpack(self.store.get(self.workflows, namespace, name))
        except ApiError as error:
            if error.status == 404:
                self._active.discard(key)
                return
            raise
        if is_completed(workflow) or not manages(
            workflow["metadata"].get("labels"), self.instance_id
        ):
            self._active.discard(key)
            return
        if key not in self._adopted:
            self._adopt_pods(namespace, name)
            self._adopted.add(key)
        status: Obj = workflow.setdefault("status", {})
        if not status.get("phase"):
            self._begin(workflow, now)
            self._write(workflow)
            return
        spec = status.get("storedWorkflowTemplateSpec") or workflow.get("spec") or {}
        states: dict[str, PodState] = {
            run.name: run.state()
            for (ns, _), run in self._runs.items()
            if ns == namespace and run.workflow == name
        }
        repository = (status.get("artifactRepositoryRef") or {}).get("artifactRepository") or {}
        s3 = repository.get("s3") or {}
        outcome = WorkflowPass(
            workflow,
            spec,
            pods=states,
            now=now,
            key_format=str(s3.get("keyFormat") or self.key_format),
            archive_logs=self.archive is not None,
        ).run()
        self._record_phase(workflow, outcome, now)
        await self._upload_outputs(workflow, outcome, bucket=s3.get("bucket"))
        if not self._write(workflow):
            return
        for launch in outcome.launches:
            self._launch(workflow, launch)
        for pod in outcome.stops:
            run = self._runs.get((namespace, pod))
            if run is not None and not run.done:
                podsim.kill(run, now)
                self._write_pod_status(run)

    def _write(self, workflow: Obj) -> bool:
        metadata = workflow["metadata"]
        try:
            self.store.replace(
                self.workflows,
                metadata["namespace"],
                metadata["name"],
                self.node_status.pack(workflow),
            )
        except ApiError as error:
            if error.status in (404, 409):
                return False  # changed or deleted meanwhile: the next tick re-reads it
            raise
        return True

    # -- starting a workflow ------------------------------------------------------------------

    def _begin(self, workflow: Obj, now: float) -> None:
        metadata = workflow["metadata"]
        labels = metadata.setdefault("labels", {})
        annotations = metadata.setdefault("annotations", {})
        annotations.setdefault("workflows.argoproj.io/pod-name-format", "v2")
        status: Obj = workflow["status"]
        status["startedAt"] = iso(now)
        own_spec: Obj = workflow.get("spec") or {}
        submitted = workflow
        if self.template_referencing:
            refused = reference_mode_error(own_spec)
            if refused is not None:
                self._fail_to_start(workflow, refused, now)
                return
            # What a Strict controller merges over the template: the overridable fields only.
            submitted = {"spec": sanitize_user_spec(own_spec)}
        ref = own_spec.get("workflowTemplateRef")
        template: Obj | None = None
        if ref:
            try:
                if ref.get("clusterScope"):
                    template = self.store.get(self.cluster_templates, None, str(ref.get("name")))
                else:
                    template = self.store.get(
                        self.templates, metadata["namespace"], str(ref.get("name"))
                    )
            except ApiError as error:
                if error.status != 404:
                    raise
                self._fail_to_start(workflow, error.message, now)
                return
            labels[LABEL_WORKFLOW_TEMPLATE] = str(ref.get("name"))
        spec = effective_spec(submitted, template)
        try:
            lint_spec(spec)
        except LintError as error:
            self._fail_to_start(workflow, f"invalid spec: {error}", now)
            return
        if template is not None:
            status["storedWorkflowTemplateSpec"] = spec
        status["phase"] = "Pending"
        labels[LABEL_PHASE] = "Pending"
        status["progress"] = "0/0"
        status.setdefault("nodes", {})
        estimate = self._estimated_duration(workflow)
        if estimate is not None:
            status["estimatedDuration"] = estimate
        repository = self._artifact_repository(metadata["namespace"])
        if repository is not None:
            status["artifactRepositoryRef"] = repository

    def _fail_to_start(self, workflow: Obj, message: str, now: float) -> None:
        status = workflow["status"]
        status.update(phase="Error", message=message, finishedAt=iso(now), progress="0/0")
        status["conditions"] = [{"type": "Completed", "status": "True"}]
        labels = workflow["metadata"].setdefault("labels", {})
        labels[LABEL_PHASE] = "Error"
        labels[LABEL_COMPLETED] = "true"

    def _estimated_duration(self, workflow: Obj) -> int | None:
        """Seconds taken by the last successful run of the same WorkflowTemplate."""
        ref = (workflow.get("spec") or {}).get("workflowTemplateRef") or {}
        if not ref.get("name"):
            return None
        items, _ = self.store.list(self.workflows, workflow["metadata"]["namespace"])
        best: tuple[float, int] | None = None
        for other in items:
            labels = other.get("metadata", {}).get("labels") or {}
            status = other.get("status") or {}
            if labels.get(LABEL_WORKFLOW_TEMPLATE) != ref["name"]:
                continue
            if status.get("phase") != "Succeeded":
                continue
            started = parse_iso(status.get("startedAt"))
            finished = parse_iso(status.get("finishedAt"))
            if started is None or finished is None:
                continue
            if best is None or finished > best[0]:
                best = (finished, max(1, round(finished - started)))
        return best[1] if best else None

    def _artifact_repository(self, namespace: str) -> Obj | None:
        """The namespace's default artifact repository, else the controller's, as a ref status."""
        try:
            config = self.store.get(self.configmaps, namespace, ARTIFACT_REPOSITORIES)
        except ApiError as error:
            if error.status != 404:
                raise
            config = None
        if config is not None:
            annotations = config.get("metadata", {}).get("annotations") or {}
            key = str(annotations.get(DEFAULT_REPOSITORY_ANNOTATION) or "default-v1")
            raw = (config.get("data") or {}).get(key)
            try:
                parsed = yaml.safe_load(raw) if raw else None
            except yaml.YAMLError:
                parsed = None
            if isinstance(parsed, dict):
                return {
                    "configMap": ARTIFACT_REPOSITORIES,
                    "key": key,
                    "namespace": namespace,
                    "artifactRepository": parsed,
                }
        if self.archive is None:
            return None
        return {
            "default": True,
            "artifactRepository": {
                "archiveLogs": True,
                "s3": {
                    "bucket": self.archive.bucket,
                    "endpoint": self.archive.settings.endpoint,
                    "keyFormat": self.key_format,
                },
            },
        }

    # -- progressing --------------------------------------------------------------------------

    def _record_phase(self, workflow: Obj, outcome: PassOutcome, now: float) -> None:
        status: Obj = workflow["status"]
        labels = workflow["metadata"].setdefault("labels", {})
        status["phase"] = outcome.phase
        labels[LABEL_PHASE] = outcome.phase
        if outcome.message:
            status["message"] = outcome.message
        else:
            status.pop("message", None)
        if outcome.phase in FULFILLED:
            status["finishedAt"] = iso(now)
            labels[LABEL_COMPLETED] = "true"
            status["conditions"] = [
                {"type": "PodRunning", "status": "False"},
                {"type": "Completed", "status": "True"},
            ]
        else:
            status["conditions"] = [{"type": "PodRunning", "status": "True"}]

    async def _upload_outputs(self, workflow: Obj, outcome: PassOutcome, *, bucket: object) -> None:
        if self.archive is None:
            return
        namespace = workflow["metadata"]["namespace"]
        nodes = workflow["status"].get("nodes") or {}
        for pod, nid in outcome.finished_pods:
            run = self._runs.get((namespace, pod))
            for artifact in (nodes.get(nid, {}).get("outputs") or {}).get("artifacts") or []:
                key = (artifact.get("s3") or {}).get("key")
                if not key:
                    continue
                name = str(artifact.get("name"))
                scripted = run.artifacts.get(podsim.artifact_env(name)) if run else None
                if name == "main-logs":
                    body = (run.log_text() if run else "").encode()
                elif scripted is not None:
                    body = scripted.encode()
                else:
                    body = f"simulated artifact {name} of {pod}\n".encode()
                try:
                    await self.archive.put(str(key), body, bucket=str(bucket) if bucket else None)
                except Exception:
                    log.exception("argo_sim_upload_failed", key=key, pod=pod)

    def _launch(self, workflow: Obj, launch: PodLaunch) -> None:
        pod, nid, node_name = launch.pod_name, launch.node_id, launch.node_name
        metadata = workflow["metadata"]
        namespace = metadata["namespace"]
        spec = workflow["status"].get("storedWorkflowTemplateSpec") or workflow.get("spec") or {}
        manifest = podsim.pod_manifest(
            workflow=workflow,
            name=pod,
            node_id=nid,
            node_name=node_name,
            template=launch.template,
            on_exit=launch.on_exit,
            service_account=str(spec.get("serviceAccountName") or "default"),
        )
        if self.instance_id:  # as Argo labels its pods (and its pod informer selects them)
            manifest["metadata"].setdefault("labels", {})[LABEL_CONTROLLER_INSTANCE_ID] = (
                self.instance_id
            )
        try:
            self.store.create(self.pods, namespace, manifest)
        except ApiError as error:
            if error.status != 409:
                raise
            # A pod left from an earlier attempt of the same node: replace it.
            self.store.delete(self.pods, namespace, pod)
            self.store.create(self.pods, namespace, manifest)
        self._runs[(namespace, pod)] = podsim.new_run(
            namespace, pod, metadata["name"], launch.template
        )

    def _adopt_pods(self, namespace: str, workflow: str) -> None:
        """Pods this simulator did not start (it restarted): take them over as they are."""
        items, _ = self.store.list(self.pods, namespace)
        for pod in items:
            metadata = pod.get("metadata") or {}
            labels = metadata.get("labels") or {}
            if labels.get(LABEL_WORKFLOW) != workflow or not manages(labels, self.instance_id):
                continue
            key = (namespace, str(metadata.get("name")))
            if key in self._runs:
                continue
            containers = (pod.get("spec") or {}).get("containers") or [{}]
            run = podsim.new_run(namespace, key[1], workflow, {"container": containers[0]})
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            if phase in ("Succeeded", "Failed"):
                run.phase = phase
                run.started = run.finished = self.clock()
            self._runs[key] = run

    # -- pod garbage collection ---------------------------------------------------------------

    def _collect_pods(self, now: float) -> None:
        for key, due in list(self._gc_due.items()):
            if now < due or key in self._active:
                continue
            del self._gc_due[key]
            namespace, workflow = key
            items, _ = self.store.list(self.pods, namespace)
            for pod in items:
                metadata = pod.get("metadata") or {}
                if (metadata.get("labels") or {}).get(LABEL_WORKFLOW) != workflow:
                    continue
                with contextlib.suppress(ApiError):
                    self.store.delete(self.pods, namespace, str(metadata.get("name")))
