"""One reconciliation pass of a workflow: Argo's operator in miniature.

Purely computational, no side effects: the pass mutates the workflow dict it is given and
returns the pods to launch and to stop; the controller applies them. Node graph as Argo draws
it: a DAG's root tasks are its children and each task's dependents are the task's children; a
Steps node's first StepGroup is its child and each later group hangs off the previous group's
steps; retries are `<name>(<attempt>)` children of a Retry node.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from shared import quantity
from sim.argo.groups import NodeSpec, execute_dag, execute_steps, stopped_message
from sim.argo.naming import (
    FAILED,
    FULFILLED,
    Obj,
    iso,
    node_id,
    parse_duration,
    parse_iso,
    pod_name,
)
from sim.argo.templates import (
    input_scope,
    parameter_value,
    render_key_format,
    resolve_inputs,
    substitute,
    template_kind,
)

MAX_RETRIES_WITHOUT_LIMIT = 10
CPU_BASE = 1.0
MEMORY_BASE = 100 * 1024 * 1024
DEFAULT_CPU = 0.1
DEFAULT_MEMORY = 100 * 1024 * 1024


@dataclass(frozen=True)
class PodState:
    """What the pod runtime reports about a pod."""

    phase: str
    exit_code: int | None = None
    started: float | None = None
    finished: float | None = None


@dataclass(frozen=True)
class PodLaunch:
    pod_name: str
    node_id: str
    node_name: str
    template: Obj
    on_exit: bool


@dataclass
class PassOutcome:
    phase: str
    message: str = ""
    launches: list[PodLaunch] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)
    finished_pods: list[tuple[str, str]] = field(default_factory=list)
    """(pod name, node id) of the pod nodes that completed during this pass."""


def resources_duration(template: Obj, seconds: float) -> dict[str, int]:
    """Argo's resourcesDuration for one pod: seconds * request / base unit, rounded up."""
    requests = (
        (template.get("container") or template.get("script") or {}).get("resources") or {}
    ).get("requests") or {}
    cpu_request = quantity.parse_or_none(requests.get("cpu"))
    memory_request = quantity.parse_or_none(requests.get("memory"))
    cpu = DEFAULT_CPU if cpu_request is None else float(cpu_request)
    memory = DEFAULT_MEMORY if memory_request is None else float(memory_request)
    return {
        "cpu": max(1, math.ceil(seconds * cpu / CPU_BASE)),
        "memory": max(1, math.ceil(seconds * memory / MEMORY_BASE)),
    }


class WorkflowPass:
    """Reconcile a started workflow against its pods' states; see the module docstring."""

    def __init__(
        self,
        workflow: Obj,
        spec: Obj,
        *,
        pods: Mapping[str, PodState],
        now: float,
        key_format: str,
        archive_logs: bool = False,
    ) -> None:
        self.workflow = workflow
        self.name: str = workflow["metadata"]["name"]
        self.spec = spec
        self.templates: dict[str, Obj] = {t["name"]: t for t in spec.get("templates") or []}
        self.status: Obj = workflow.setdefault("status", {})
        self.nodes: dict[str, Obj] = self.status.setdefault("nodes", {})
        self.pods = pods
        self.now = now
        self.key_format = key_format
        self.archive_logs = archive_logs
        own_spec = workflow.get("spec") or {}
        self.shutdown: str = own_spec.get("shutdown") or ""
        self.suspended = bool(own_spec.get("suspend"))
        metadata = workflow["metadata"]
        self.globals: dict[str, str] = {
            "workflow.name": self.name,
            "workflow.namespace": str(metadata.get("namespace", "")),
            "workflow.uid": str(metadata.get("uid", "")),
            "workflow.serviceAccountName": str(spec.get("serviceAccountName", "default")),
        }
        for param in (spec.get("arguments") or {}).get("parameters") or []:
            value = parameter_value(param)
            if value is not None:
                self.globals[f"workflow.parameters.{param['name']}"] = value
        self.outcome = PassOutcome(phase="Running")
        self._advanced: set[str] = set()

    # -- the workflow -------------------------------------------------------------------------

    def run(self) -> PassOutcome:
        """Advance the workflow one step; the outcome's phase is the workflow's new phase."""
        entrypoint = str(self.spec.get("entrypoint", ""))
        root_id = node_id(self.name, self.name)
        if root_id not in self.nodes and self.shutdown:
            return self._finish("Failed", stopped_message(self.shutdown))
        root = self.execute(
            node_name=self.name,
            template_name=entrypoint,
            arguments=[],
            parents=[],
            boundary_id="",
            scope={},
            on_exit=False,
        )
        if root["phase"] not in FULFILLED:
            self._summarise()
            return self.outcome
        on_exit = self.spec.get("onExit")
        if on_exit and self.shutdown != "Terminate":
            status = "Succeeded" if root["phase"] in ("Succeeded", "Skipped") else root["phase"]
            exit_node = self.execute(
                node_name=f"{self.name}.onExit",
                template_name=str(on_exit),
                arguments=[],
                parents=[],
                boundary_id="",
                scope={"workflow.status": status},
                on_exit=True,
            )
            if exit_node["phase"] not in FULFILLED:
                self._summarise()
                return self.outcome
            if exit_node["phase"] in FAILED and root["phase"] not in FAILED:
                return self._finish("Failed", exit_node.get("message", ""))
        if self.shutdown:
            return self._finish("Failed", stopped_message(self.shutdown))
        if root["phase"] in FAILED:
            return self._finish(root["phase"], root.get("message", ""))
        return self._finish("Succeeded", "")

    def _finish(self, phase: str, message: str) -> PassOutcome:
        self.outcome.phase = phase
        self.outcome.message = message
        self._summarise()
        return self.outcome

    def _summarise(self) -> None:
        pods = [n for n in self.nodes.values() if n.get("type") == "Pod"]
        done = sum(1 for n in pods if n.get("phase") == "Succeeded")
        self.status["progress"] = f"{done}/{len(pods)}"
        totals: dict[str, int] = {}
        for node in pods:
            for resource, amount in (node.get("resourcesDuration") or {}).items():
                totals[resource] = totals.get(resource, 0) + int(amount)
        if totals:
            self.status["resourcesDuration"] = totals

    # -- nodes ----------------------------------------------------------------------------------

    def shut(self, on_exit: bool) -> bool:
        """Does the shutdown strategy stop nodes of this kind (exit handler or not)?"""
        return self.shutdown == "Terminate" or (self.shutdown == "Stop" and not on_exit)

    def blocked(self, on_exit: bool) -> bool:
        return self.shut(on_exit) or self.suspended

    def new_node(
        self,
        where: NodeSpec,
        *,
        kind: str,
        phase: str,
        inputs: list[Obj] | None = None,
        message: str = "",
    ) -> Obj:
        node_name, boundary_id, parents = where.node_name, where.boundary_id, where.parents
        nid = node_id(self.name, node_name)
        node: Obj = {
            "id": nid,
            "name": node_name,
            "displayName": where.display,
            "type": kind,
            "templateName": where.template_name,
            "phase": phase,
            "startedAt": iso(self.now),
        }
        if boundary_id:
            node["boundaryID"] = boundary_id
        if inputs:
            node["inputs"] = {"parameters": inputs}
        if message:
            node["message"] = message
        if phase in FULFILLED:
            node["finishedAt"] = iso(self.now)
        self.nodes[nid] = node
        for parent in parents:
            children = self.nodes[parent].setdefault("children", [])
            if nid not in children:
                children.append(nid)
        return node

    def complete(self, node: Obj, phase: str, message: str = "") -> Obj:
        node["phase"] = phase
        node["finishedAt"] = iso(self.now)
        if message:
            node["message"] = message
        return node

    def execute(
        self,
        *,
        node_name: str,
        template_name: str,
        arguments: list[Obj],
        parents: list[str],
        boundary_id: str,
        scope: dict[str, str],
        on_exit: bool,
        retry_ok: bool = True,
        display: str | None = None,
    ) -> Obj:
        nid = node_id(self.name, node_name)
        node = self.nodes.get(nid)
        if node is not None and (node["phase"] in FULFILLED or nid in self._advanced):
            return node
        self._advanced.add(nid)
        display = display or node_name.rsplit(".", 1)[-1]
        if not boundary_id:
            # Argo's initializeNode: a node outside any boundary (the root, the exit handler
            # `<wf>.onExit` and its retries) is displayed under its full name.
            display = node_name
        template = self.templates.get(template_name)
        common = NodeSpec(node_name, display, template_name, parents, boundary_id)
        if template is None or template_kind(template) is None:
            message = f"template '{template_name}' undefined or of no single type"
            if node is not None:
                return self.complete(node, "Error", message)
            return self.new_node(common, kind="Pod", phase="Error", message=message)
        resolved = resolve_inputs(template, arguments)
        if resolved.missing is not None:
            message = f"inputs.parameters.{resolved.missing} was not supplied"
            if node is not None:
                return self.complete(node, "Error", message)
            return self.new_node(common, kind="Pod", phase="Error", message=message)
        local = {**self.globals, **scope, **input_scope(resolved.parameters)}
        rendered: Obj = substitute(copy.deepcopy(template), local)
        kind = template_kind(rendered)
        if (
            retry_ok
            and rendered.get("retryStrategy") is not None
            and kind in ("container", "script")
        ):
            return self._execute_retry(
                node, rendered, arguments, scope, on_exit, resolved.parameters, common
            )
        if kind in ("container", "script", "resource"):
            return self._execute_pod(node, rendered, on_exit, resolved.parameters, common)
        if kind == "suspend":
            return self._execute_suspend(node, rendered, on_exit, resolved.parameters, common)
        if kind == "steps":
            return execute_steps(self, node, rendered, scope, on_exit, resolved.parameters, common)
        return execute_dag(self, node, rendered, scope, on_exit, resolved.parameters, common)

    def _execute_retry(
        self,
        node: Obj | None,
        template: Obj,
        arguments: list[Obj],
        scope: dict[str, str],
        on_exit: bool,
        inputs: list[Obj],
        common: NodeSpec,
    ) -> Obj:
        node_name = common.node_name
        if node is None:
            node = self.new_node(common, kind="Retry", phase="Running", inputs=inputs)
        raw_limit = (template.get("retryStrategy") or {}).get("limit")
        try:
            limit = int(raw_limit) if raw_limit is not None else MAX_RETRIES_WITHOUT_LIMIT
        except ValueError:
            limit = 0
        retry_node = node

        def run_attempt(number: int) -> Obj:
            return self.execute(
                node_name=f"{node_name}({number})",
                display=f"{common.display}({number})",
                template_name=common.template_name,
                arguments=arguments,
                parents=[retry_node["id"]],
                boundary_id=common.boundary_id,
                scope=scope,
                on_exit=on_exit,
                retry_ok=False,
            )

        children: list[str] = node.get("children") or []
        attempt = len(children) - 1 if children else 0
        last = run_attempt(attempt)
        if last["phase"] not in FULFILLED:
            node["phase"] = "Running"
            return node
        if last["phase"] in ("Succeeded", "Skipped"):
            if "outputs" in last:
                node["outputs"] = copy.deepcopy(last["outputs"])
            return self.complete(node, "Succeeded")
        if attempt < limit and not self.shut(on_exit):
            run_attempt(attempt + 1)
            return node
        message = last.get("message", "")
        if attempt >= limit:
            message = f"No more retries left; last attempt: {message}".rstrip("; ")
        return self.complete(node, last["phase"], message)

    def _execute_pod(
        self,
        node: Obj | None,
        template: Obj,
        on_exit: bool,
        inputs: list[Obj],
        common: NodeSpec,
    ) -> Obj:
        node_name = common.node_name
        name = pod_name(self.name, node_name, common.template_name)
        if node is None:
            node = self.new_node(common, kind="Pod", phase="Pending", inputs=inputs)
            self.outcome.launches.append(PodLaunch(name, node["id"], node_name, template, on_exit))
            return node
        state = self.pods.get(name)
        if self.shut(on_exit):
            self.outcome.stops.append(name)
            self._record_duration(node, template, state)
            return self.complete(node, "Failed", stopped_message(self.shutdown))
        if state is None:
            return self.complete(node, "Error", "pod deleted")
        if state.phase not in ("Succeeded", "Failed"):
            node["phase"] = state.phase
            return node
        self._record_duration(node, template, state)
        node["outputs"] = self._pod_outputs(template, name, state)
        self.outcome.finished_pods.append((name, node["id"]))
        if state.phase == "Succeeded":
            return self.complete(node, "Succeeded")
        return self.complete(node, "Failed", f"Error (exit code {state.exit_code})")

    def _record_duration(self, node: Obj, template: Obj, state: PodState | None) -> None:
        if state is None or state.started is None:
            return
        seconds = (state.finished or self.now) - state.started
        node["resourcesDuration"] = resources_duration(template, max(seconds, 0.0))

    def _pod_outputs(self, template: Obj, name: str, state: PodState) -> Obj:
        outputs: Obj = {}
        declared = template.get("outputs") or {}
        params = []
        for param in declared.get("parameters") or []:
            value = parameter_value(param)
            params.append({"name": param["name"], "value": value or f"{param['name']}-value"})
        if params and state.phase == "Succeeded":
            outputs["parameters"] = params
        artifacts = []
        prefix = render_key_format(self.key_format, self.workflow, name)
        for artifact in declared.get("artifacts") or []:
            key = (artifact.get("s3") or {}).get("key") or f"{prefix}/{artifact['name']}.tgz"
            entry: Obj = {"name": artifact["name"], "s3": {"key": key}}
            if artifact.get("path"):
                entry["path"] = artifact["path"]
            artifacts.append(entry)
        if state.phase != "Succeeded":
            artifacts = []
        archive = (template.get("archiveLocation") or {}).get("archiveLogs")
        if archive is True or (archive is None and self.archive_logs):
            artifacts.append({"name": "main-logs", "s3": {"key": f"{prefix}/main.log"}})
        if artifacts:
            outputs["artifacts"] = artifacts
        outputs["exitCode"] = str(state.exit_code if state.exit_code is not None else 0)
        return outputs

    def _execute_suspend(
        self,
        node: Obj | None,
        template: Obj,
        on_exit: bool,
        inputs: list[Obj],
        common: NodeSpec,
    ) -> Obj:
        if node is None:
            node = self.new_node(common, kind="Suspend", phase="Running", inputs=inputs)
            params = (template.get("outputs") or {}).get("parameters")
            if params:
                node["outputs"] = {"parameters": copy.deepcopy(params)}
            return node
        if self.shut(on_exit):
            return self.complete(node, "Failed", stopped_message(self.shutdown))
        duration = parse_duration((template.get("suspend") or {}).get("duration", ""))
        started = parse_iso(node.get("startedAt"))
        if duration is not None and started is not None and self.now - started >= duration:
            for param in (node.get("outputs") or {}).get("parameters") or []:
                default = (param.get("valueFrom") or {}).get("default")
                if default is not None and param.get("value") is None:
                    param["value"] = str(default)
                    param.pop("valueFrom", None)
            return self.complete(node, "Succeeded")
        return node
