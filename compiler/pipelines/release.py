"""An ML pipeline's release: the body's ``release`` judged against the tenant's template, and the
platform's control stages appended to it. Purely computational.

``compiler.pipelines.definitions.render`` calls, in this order:

1. with the allowlist, on the stamped tenant's template, ``violations``: what a template with a
   release may not have because the platform's stages need it (its own exit handler, template
   defaults; 422);
2. once the tenant's part passed, ``check_release``: the steps and artifacts the release names
   must be output artifacts of exactly one task or step, run once (400 naming the field);
3. ``append_stages``: a DAG ``wm-release-main`` becomes the entrypoint, running the tenant's
   entrypoint as task ``main``, then ``wm-register``, ``wm-gate``, ``wm-deploy`` (with
   ``serving``: the version to staging) and ``wm-approval`` (when asked), each after the one
   before and, past the gate, only when its verdict is ``passed``, with ``wm-cleanup`` as the
   exit handler. The stages that will touch production run only when the gate passed **and**
   the approval (when asked) approved (``production_condition``, ``stage_task``). Each stage
   is a suspend template with ``valueFrom.supplied`` outputs, annotated
   ``kubeopera.io/platform-stage``; the stage controller does its work and completes the node
   through the Argo server (``shared.stages``). Argo's schema then judges the whole;
4. ``stages_of`` on the final template: the stages it contains, which the version records.

The tenant's part never holds a stage: the allowlist refuses the reserved names, the annotation
and supplied outputs in it (docs/security.md), so whatever ``stages_of`` finds the platform put.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from compiler.pipelines.allowlist import Violation
from shared import stages as S
from shared.errors import Invalid
from shared.pipelines import OutputRef, Release
from shared.validation import invalid_fields

# A step that runs once per item produces one artifact per item: none of them is "the" model.
_LOOPS: Final = ("withItems", "withParam", "withSequence")
_RULE: Final = "platform_stage"


@dataclass(frozen=True, slots=True)
class _Step:
    """A DAG task or a step of the tenant's template, by name."""

    name: str
    template: Mapping[str, Any] | None  # what it runs, when it is in this document
    looped: bool
    external: bool  # a templateRef: another WorkflowTemplate's template


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _templates(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        t for t in _list(_mapping(document.get("spec")).get("templates")) if isinstance(t, Mapping)
    ]


def _steps(document: Mapping[str, Any]) -> Iterator[_Step]:
    """Every DAG task and step of the document's templates (inline ones included), and the
    entrypoint as the task ``main`` it becomes (a run's node ``main`` is the entrypoint's)."""
    by_name = {t.get("name"): t for t in _templates(document) if isinstance(t.get("name"), str)}
    entrypoint = by_name.get(_mapping(document.get("spec")).get("entrypoint"))
    if entrypoint is not None:
        yield _Step(name=S.MAIN_TASK, template=entrypoint, looped=False, external=False)
    pending: list[Mapping[str, Any]] = list(_templates(document))
    seen = 0
    while pending and seen < 10_000:  # inline templates nest; the allowlist bounds the depth
        template = pending.pop()
        seen += 1
        entries = list(_list(_mapping(template.get("dag")).get("tasks")))
        for group in _list(template.get("steps")):
            entries += _list(group)
        for entry in entries:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                continue
            inline = entry.get("inline")
            target = inline if isinstance(inline, Mapping) else by_name.get(entry.get("template"))
            if isinstance(inline, Mapping):
                pending.append(inline)
            yield _Step(
                name=entry["name"],
                template=target if isinstance(target, Mapping) else None,
                looped=any(key in entry for key in _LOOPS),
                external="templateRef" in entry,
            )


def _output_artifacts(template: Mapping[str, Any]) -> set[str]:
    artifacts = _list(_mapping(template.get("outputs")).get("artifacts"))
    return {
        a["name"] for a in artifacts if isinstance(a, Mapping) and isinstance(a.get("name"), str)
    }


def _reference_errors(
    document: Mapping[str, Any], reference: OutputRef, field: str
) -> list[dict[str, str]]:
    found = [step for step in _steps(document) if step.name == reference.step]
    where = f"release.{field}.step"
    if not found:
        return [{"field": where, "message": f"the template has no task or step {reference.step!r}"}]
    if len(found) > 1:
        message = f"{len(found)} tasks or steps are named {reference.step!r}: name exactly one"
        return [{"field": where, "message": message}]
    step = found[0]
    if step.looped:
        message = f"{reference.step!r} runs in a loop, once per item: name a step that runs once"
        return [{"field": where, "message": message}]
    if step.external or step.template is None:
        message = f"{reference.step!r} runs a template outside this pipeline's"
        return [{"field": where, "message": message}]
    if reference.artifact not in _output_artifacts(step.template):
        message = f"{reference.step!r} has no output artifact {reference.artifact!r}"
        return [{"field": f"release.{field}.artifact", "message": message}]
    return []


def check_release(release: Release, document: Mapping[str, Any]) -> None:
    """Invalid (400) unless the model artifact and the scorecard the release names are output
    artifacts of tasks or steps the template runs once each, by a unique name."""
    errors = _reference_errors(document, release.model_artifact, "model_artifact")
    errors += _reference_errors(document, release.scorecard, "scorecard")
    if errors:
        raise invalid_fields("the release is invalid", errors)


def violations(document: Mapping[str, Any]) -> list[Violation]:
    """What a template with a release may not have: the platform's exit handler ends every run,
    and template defaults would apply to the platform's stages as much as to the tenant's."""
    spec = _mapping(document.get("spec"))
    found = []
    if "onExit" in spec:
        message = (
            "an ML pipeline with a release ends with the platform's exit handler; "
            "give a task of yours an onExit instead"
        )
        found.append(Violation("spec.onExit", _RULE, message))
    if "exit" in _mapping(spec.get("hooks")):
        message = "an ML pipeline with a release ends with the platform's exit handler"
        found.append(Violation("spec.hooks.exit", _RULE, message))
    if "templateDefaults" in spec:
        message = (
            "template defaults would apply to the platform's stages too; "
            "set the fields on your own templates"
        )
        found.append(Violation("spec.templateDefaults", _RULE, message))
    return found


def _stage_template(stage: str) -> dict[str, Any]:
    return {
        "name": S.template_name(stage),
        "metadata": {"annotations": {S.STAGE_ANNOTATION: stage}},
        "suspend": {},
        "outputs": {
            "parameters": [
                {"name": name, "valueFrom": {"supplied": {}}} for name in S.OUTPUTS[stage]
            ]
        },
    }


def _main_task(spec: Mapping[str, Any], entrypoint: Mapping[str, Any]) -> dict[str, Any]:
    """The tenant's entrypoint as a task. Workflow parameters are global, so its templates read
    them as before; only the inputs an entrypoint declares (which Argo fills from the workflow's
    arguments of the same name) are passed on explicitly, as references to them."""
    task: dict[str, Any] = {"name": S.MAIN_TASK, "template": entrypoint["name"]}
    arguments = _mapping(spec.get("arguments"))
    workflow_parameters = {
        p.get("name") for p in _list(arguments.get("parameters")) if isinstance(p, Mapping)
    }
    workflow_artifacts = {
        a.get("name"): a for a in _list(arguments.get("artifacts")) if isinstance(a, Mapping)
    }
    inputs = _mapping(entrypoint.get("inputs"))
    parameters = [
        {"name": p["name"], "value": f"{{{{workflow.parameters.{p['name']}}}}}"}
        for p in _list(inputs.get("parameters"))
        if isinstance(p, Mapping) and p.get("name") in workflow_parameters
    ]
    artifacts = [
        dict(workflow_artifacts[a["name"]])
        for a in _list(inputs.get("artifacts"))
        if isinstance(a, Mapping) and a.get("name") in workflow_artifacts
    ]
    passed: dict[str, Any] = {}
    if parameters:
        passed["parameters"] = parameters
    if artifacts:
        passed["artifacts"] = artifacts
    if passed:
        task["arguments"] = passed
    return task


def stage_list(release: Release) -> list[str]:
    """The stages a release compiles to, in the order a run reaches them: deploy with
    ``serving``, approval when required (``production``, refused at save today, will add the
    canary's stages after them)."""
    wanted = {S.REGISTER, S.GATE, S.CLEANUP}
    if release.serving is not None:
        wanted.add(S.DEPLOY)
    if release.approval.required:
        wanted.add(S.APPROVAL)
    return [stage for stage in S.STAGES if stage in wanted]


def approved_condition() -> str:
    """The approval's decision was ``approved``."""
    return (
        f"{{{{tasks.{S.template_name(S.APPROVAL)}.outputs.parameters.{S.DECISION}}}}}"
        f" == {S.DECISION_APPROVED}"
    )


def production_condition(release: Release) -> str:
    """The ``when`` of every stage that touches production (canary, analysis, promotion): the
    gate passed **and**, when the release asks for one, the approval approved. A rejected
    approval thus ends the release before production; a skipped one (the gate failed) too:
    such a stage depends on the approval having succeeded (``stage_task``), so its condition
    is never read off a skipped node."""
    if release.approval.required:
        return f"{S.PASSED_CONDITION} && {approved_condition()}"
    return S.PASSED_CONDITION


# The stages that touch production, after approval (part three of the ML releases compiles them
# once the stage controller carries them and ``shared.pipelines.CANARY_RELEASES`` is on).
PRODUCTION_STAGES: Final = (S.CANARY, S.ANALYSIS, S.PROMOTION)


def stage_task(stage: str, previous: str, release: Release) -> dict[str, Any]:
    """The DAG task of ``stage`` after the task ``previous``.

    Up to approval: after ``previous`` has ended (Argo's bare ``depends: x`` holds when ``x``
    succeeded or was skipped) and, past the gate, only when the gate passed. A stage that
    touches production: only after ``previous`` succeeded (a skipped approval has no decision
    to read; the ``when`` is never evaluated then) and when ``production_condition`` holds.
    """
    task: dict[str, Any] = {
        "name": S.template_name(stage),
        "template": S.template_name(stage),
        "depends": previous,
    }
    if stage in PRODUCTION_STAGES:
        task["depends"] = f"{previous}.Succeeded"
        task["when"] = production_condition(release)
    elif S.STAGES.index(stage) > S.STAGES.index(S.GATE):
        task["when"] = S.PASSED_CONDITION
    return task


def append_stages(document: dict[str, Any], release: Release) -> None:
    """Make the stamped, checked ``document`` (changed in place) run the release's stages after
    the tenant's entrypoint; see the module docstring."""
    spec = document["spec"]
    entry = next((t for t in _templates(document) if t.get("name") == spec.get("entrypoint")), None)
    if entry is None:
        raise Invalid(
            "definition: the template's entrypoint names none of its templates",
            details={"errors": [{"field": "definition", "message": "no entrypoint template"}]},
        )
    stages = stage_list(release)
    tasks: list[dict[str, Any]] = [_main_task(spec, entry)]
    previous = S.MAIN_TASK
    for stage in stages:
        if stage == S.CLEANUP:
            continue
        tasks.append(stage_task(stage, previous, release))
        previous = tasks[-1]["name"]
    spec["templates"] = [
        *spec["templates"],
        {"name": S.RELEASE_ENTRYPOINT, "dag": {"tasks": tasks}},
        *(_stage_template(stage) for stage in stages),
    ]
    spec["entrypoint"] = S.RELEASE_ENTRYPOINT
    spec["onExit"] = S.template_name(S.CLEANUP)


def stages_of(document: Mapping[str, Any]) -> list[str]:
    """The stages ``document`` contains (its templates annotated as one), in run order."""
    found = set()
    for template in _templates(document):
        annotations = _mapping(_mapping(template.get("metadata")).get("annotations"))
        stage = annotations.get(S.STAGE_ANNOTATION)
        if stage in S.STAGES and template.get("name") == S.template_name(stage):
            found.add(stage)
    return [stage for stage in S.STAGES if stage in found]
