"""Structural checks of a workflow spec, worded as Argo's validator words them.

Purely computational, no side effects. Not Argo's full validation: entrypoint and onExit exist,
template names are unique, every template has exactly one type, referenced templates and DAG
dependencies exist, and no DAG has a cycle.
"""

from __future__ import annotations

from sim.argo.naming import Obj
from sim.argo.templates import dependency_expression, depends_terms, template_kind


class LintError(ValueError):
    """The first structural error found, as Argo reports it (one message)."""


def lint_spec(spec: Obj) -> None:
    """Raise LintError on the first structural error of a workflow or template spec."""
    templates: list[Obj] = spec.get("templates") or []
    names: set[str] = set()
    for index, template in enumerate(templates):
        name = template.get("name")
        if not name:
            raise LintError(f"spec.templates[{index}].name is required")
        if name in names:
            raise LintError(f"spec.templates[{index}].name '{name}' is not unique")
        names.add(name)
    entrypoint = spec.get("entrypoint")
    if not entrypoint:
        raise LintError("spec.entrypoint is required")
    if entrypoint not in names:
        raise LintError(f"spec.entrypoint template '{entrypoint}' undefined")
    on_exit = spec.get("onExit")
    if on_exit and on_exit not in names:
        raise LintError(f"spec.onExit template '{on_exit}' undefined")
    for template in templates:
        _lint_template(template, names)


def _lint_template(template: Obj, names: set[str]) -> None:
    name = template["name"]
    kind = template_kind(template)
    if kind is None:
        raise LintError(
            f"templates.{name} template type unspecified or multiple. choose one of: "
            "container, script, resource, steps, dag, suspend"
        )
    if kind == "steps":
        seen: set[str] = set()
        for index, group in enumerate(template.get("steps") or []):
            for step in group or []:
                step_name = step.get("name")
                if not step_name:
                    raise LintError(f"templates.{name}.steps[{index}].name is required")
                if step_name in seen:
                    raise LintError(
                        f"templates.{name}.steps[{index}].name '{step_name}' is not unique"
                    )
                seen.add(step_name)
                target = step.get("template")
                if target not in names:
                    raise LintError(
                        f"templates.{name}.steps[{index}].{step_name}.template '{target}' undefined"
                    )
    if kind == "dag":
        _lint_dag(name, template.get("dag") or {}, names)


def _lint_dag(name: str, dag: Obj, names: set[str]) -> None:
    tasks: list[Obj] = dag.get("tasks") or []
    task_names: set[str] = set()
    for task in tasks:
        task_name = task.get("name")
        if not task_name:
            raise LintError(f"templates.{name}.tasks.name is required")
        if task_name in task_names:
            raise LintError(f"templates.{name}.tasks.{task_name} name is not unique")
        task_names.add(task_name)
    graph: dict[str, list[str]] = {}
    for task in tasks:
        task_name = task["name"]
        target = task.get("template")
        if target not in names:
            raise LintError(f"templates.{name}.tasks.{task_name}.template '{target}' undefined")
        if task.get("depends") and task.get("dependencies"):
            raise LintError(
                f"templates.{name}.tasks.{task_name} cannot use both 'depends' and "
                "'dependencies' in the same DAG template"
            )
        try:
            terms = depends_terms(dependency_expression(task))
        except ValueError as error:
            raise LintError(f"templates.{name}.tasks.{task_name} {error}") from error
        for term in terms:
            if term.task not in task_names:
                raise LintError(
                    f"templates.{name}.tasks.{task_name} dependency '{term.task}' not defined"
                )
        graph[task_name] = [t.task for t in terms]
    _check_acyclic(name, graph)


def _check_acyclic(name: str, graph: dict[str, list[str]]) -> None:
    state: dict[str, int] = {}

    def visit(task: str) -> None:
        state[task] = 1
        for dep in graph.get(task, []):
            if state.get(dep) == 1:
                raise LintError(f"templates.{name}.tasks dependency cycle detected: {task}->{dep}")
            if state.get(dep) is None:
                visit(dep)
        state[task] = 2

    for task in graph:
        if task not in state:
            visit(task)
