"""Steps and DAG templates: how group nodes schedule their children. Part of one
reconciliation pass (`sim.argo.engine`); purely computational, no side effects."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.argo.naming import FAILED, FULFILLED, Obj, node_id
from sim.argo.templates import (
    HANDLING_RESULTS,
    dependency_expression,
    depends_terms,
    evaluate_depends,
    substitute,
    when_is_false,
)

if TYPE_CHECKING:
    from sim.argo.engine import WorkflowPass


def stopped_message(strategy: str) -> str:
    return f"Stopped with strategy '{strategy}'"


@dataclass(frozen=True)
class NodeSpec:
    """Where a node goes: its name, display name, template, parents and boundary."""

    node_name: str
    display: str
    template_name: str
    parents: list[str]
    boundary_id: str


def execute_steps(
    run: WorkflowPass,
    node: Obj | None,
    template: Obj,
    scope: dict[str, str],
    on_exit: bool,
    inputs: list[Obj],
    common: NodeSpec,
) -> Obj:
    node_name = common.node_name
    if node is None:
        node = run.new_node(common, kind="Steps", phase="Running", inputs=inputs)
    outputs_scope: dict[str, str] = {}
    previous = [node["id"]]
    for index, group in enumerate(template.get("steps") or []):
        group_name = f"{node_name}[{index}]"
        group_node = run.nodes.get(node_id(run.name, group_name))
        if group_node is None:
            if run.shut(on_exit):
                return run.complete(node, "Failed", stopped_message(run.shutdown))
            if run.suspended:
                return node
            group_node = run.new_node(
                NodeSpec(group_name, f"[{index}]", common.template_name, previous, node["id"]),
                kind="StepGroup",
                phase="Running",
            )
        step_ids: list[str] = []
        complete = True
        for step in group or []:
            step_name = f"{group_name}.{step['name']}"
            step_id = node_id(run.name, step_name)
            child = run.nodes.get(step_id)
            if child is None and run.blocked(on_exit):
                complete = False
                continue
            arguments = substitute(
                copy.deepcopy((step.get("arguments") or {}).get("parameters") or []),
                outputs_scope,
            )
            when = substitute(step.get("when"), outputs_scope)
            if child is None and when is not None and when_is_false(when):
                where = NodeSpec(
                    step_name,
                    step["name"],
                    str(step.get("template", "")),
                    [group_node["id"]],
                    node["id"],
                )
                child = run.new_node(
                    where,
                    kind="Skipped",
                    phase="Skipped",
                    message=f"when '{when}' evaluated false",
                )
            else:
                child = run.execute(
                    node_name=step_name,
                    template_name=str(step.get("template", "")),
                    arguments=arguments,
                    parents=[group_node["id"]],
                    boundary_id=node["id"],
                    scope=scope,
                    on_exit=on_exit,
                    display=step["name"],
                )
            step_ids.append(child["id"])
            complete = complete and child["phase"] in FULFILLED
            for param in (child.get("outputs") or {}).get("parameters") or []:
                key = f"steps.{step['name']}.outputs.parameters.{param['name']}"
                outputs_scope[key] = str(param.get("value", ""))
        if not complete:
            if run.shut(on_exit) and not any(
                run.nodes[i]["phase"] not in FULFILLED for i in step_ids
            ):
                run.complete(group_node, "Failed", stopped_message(run.shutdown))
                return run.complete(node, "Failed", stopped_message(run.shutdown))
            return node
        failed = [i for i in step_ids if run.nodes[i]["phase"] in FAILED]
        if failed:
            message = f"child '{failed[0]}' failed"
            run.complete(group_node, "Failed", message)
            return run.complete(node, "Failed", message)
        if group_node["phase"] not in FULFILLED:
            run.complete(group_node, "Succeeded")
        previous = step_ids or [group_node["id"]]
    return run.complete(node, "Succeeded")


def execute_dag(
    run: WorkflowPass,
    node: Obj | None,
    template: Obj,
    scope: dict[str, str],
    on_exit: bool,
    inputs: list[Obj],
    common: NodeSpec,
) -> Obj:
    node_name = common.node_name
    if node is None:
        node = run.new_node(common, kind="DAG", phase="Running", inputs=inputs)
    dag = template.get("dag") or {}
    tasks: list[Obj] = dag.get("tasks") or []
    fail_fast = dag.get("failFast", True) is not False
    handled = {
        term.task
        for task in tasks
        for term in depends_terms(dependency_expression(task))
        if term.result in HANDLING_RESULTS
    }
    phases: dict[str, str] = {}
    ids: dict[str, str] = {}
    outputs_scope: dict[str, str] = {}

    def task_node(task: Obj) -> Obj | None:
        return run.nodes.get(node_id(run.name, f"{node_name}.{task['name']}"))

    def record(task: Obj, child: Obj) -> None:
        phases[task["name"]] = child["phase"]
        ids[task["name"]] = child["id"]
        for param in (child.get("outputs") or {}).get("parameters") or []:
            key = f"tasks.{task['name']}.outputs.parameters.{param['name']}"
            outputs_scope[key] = str(param.get("value", ""))

    def unhandled_failures() -> list[str]:
        return [ids[t] for t, p in phases.items() if p in FAILED and t not in handled]

    for task in tasks:
        existing = task_node(task)
        if existing is not None:
            record(task, _advance_task(run, existing, task, node, scope, on_exit, outputs_scope))
    progressed = True
    while progressed:
        progressed = False
        for task in tasks:
            if task["name"] in phases:
                continue
            expression = dependency_expression(task)
            terms = depends_terms(expression)
            if any(phases.get(t.task) not in FULFILLED for t in terms):
                continue
            if run.blocked(on_exit) or (fail_fast and unhandled_failures()):
                continue
            parents = [ids[t.task] for t in terms] or [node["id"]]
            record(
                task,
                _start_task(
                    run, task, node, parents, expression, phases, scope, on_exit, outputs_scope
                ),
            )
            progressed = True
    active = [t for t, p in phases.items() if p not in FULFILLED]
    if active:
        return node
    failures = unhandled_failures()
    if len(phases) < len(tasks):
        if failures and fail_fast:
            return run.complete(node, "Failed", f"child '{failures[0]}' failed")
        if run.shut(on_exit):
            return run.complete(node, "Failed", stopped_message(run.shutdown))
        return node
    if failures:
        return run.complete(node, "Failed", f"child '{failures[0]}' failed")
    return run.complete(node, "Succeeded")


def _task_arguments(task: Obj, outputs_scope: dict[str, str]) -> list[Obj]:
    params = copy.deepcopy((task.get("arguments") or {}).get("parameters") or [])
    result: list[Obj] = substitute(params, outputs_scope)
    return result


def _advance_task(
    run: WorkflowPass,
    existing: Obj,
    task: Obj,
    dag_node: Obj,
    scope: dict[str, str],
    on_exit: bool,
    outputs_scope: dict[str, str],
) -> Obj:
    if existing["phase"] in FULFILLED or existing.get("type") == "Skipped":
        return existing
    return run.execute(
        node_name=existing["name"],
        template_name=str(task.get("template", "")),
        arguments=_task_arguments(task, outputs_scope),
        parents=[],
        boundary_id=dag_node["id"],
        scope=scope,
        on_exit=on_exit,
        display=task["name"],
    )


def _start_task(
    run: WorkflowPass,
    task: Obj,
    dag_node: Obj,
    parents: list[str],
    expression: str,
    phases: Mapping[str, str],
    scope: dict[str, str],
    on_exit: bool,
    outputs_scope: dict[str, str],
) -> Obj:
    name = f"{dag_node['name']}.{task['name']}"
    where = NodeSpec(name, task["name"], str(task.get("template", "")), parents, dag_node["id"])
    if not evaluate_depends(expression, phases):
        return run.new_node(
            where, kind="Skipped", phase="Omitted", message="omitted: depends condition not met"
        )
    when = substitute(task.get("when"), outputs_scope)
    if when is not None and when_is_false(when):
        return run.new_node(
            where, kind="Skipped", phase="Skipped", message=f"when '{when}' evaluated false"
        )
    return run.execute(
        node_name=name,
        template_name=str(task.get("template", "")),
        arguments=_task_arguments(task, outputs_scope),
        parents=parents,
        boundary_id=dag_node["id"],
        scope=scope,
        on_exit=on_exit,
        display=task["name"],
    )
