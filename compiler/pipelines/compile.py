"""Compile a wizard pipeline specification into an Argo WorkflowTemplate.

Purely computational, no side effects. The result is an unstamped document: ``stamp`` gives it
its namespace and identity, and ``allowlist.check`` then judges it like any tenant YAML (a
compiled template must always pass; the tests hold it to that).

The shape (docs/pipeline-spec.md has the full mapping):

- one DAG template ``pipeline`` (the entrypoint) with a task per step, and a template
  ``step-<name>`` per step;
- ``depends_on`` and ``from`` references become Argo ``depends`` with Argo's default meaning of
  a bare name (succeeded, skipped or daemoned); an ``activation`` is parsed
  (``compiler.pipelines.expressions``) and rendered as the task's ``depends`` expression, ANDed
  with any dependency it does not already mention;
- ``retries`` become ``retryStrategy``, ``timeout`` the template's ``activeDeadlineSeconds``,
  ``from_secret`` a ``secretKeyRef`` (a Pod can only read Secrets of its own namespace, so it is
  always the tenant's), ``runtime: spark|pytorch`` the ``kubeopera.io/runs-as`` annotation that
  stamping turns into the platform's Spark or training account;
- jq filters: a step with an ``input_filter`` or ``output_filter`` becomes a ``containerSet``
  of up to three containers sharing an emptyDir at ``/kubeopera/io``. ``input-filter`` (the
  platform's jq image) runs first and writes ``input.json``: the step's input parameters as a
  JSON object, passed through the filter. ``main`` (the tenant's image) reads it (path in
  ``$KUBEOPERA_INPUT``) and, with an output filter, writes its JSON result to
  ``$KUBEOPERA_OUTPUT`` (``output.json``); ``output-filter`` then runs the filter over it and
  the filtered document becomes the step's output parameter ``result``. Values reach jq as
  environment variables (``$ENV``), never spliced into a shell or the filter text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from compiler.pipelines import expressions
from compiler.pipelines.spec import PipelineSpec, Step, parameter_value, parse_spec, upstream
from compiler.pipelines.stamping import RUNS_AS_ANNOTATION, identity_labels, template_name
from shared.pipelines import PipelineKind
from shared.quantity import cpu_millis, memory_bytes
from shared.validation import invalid_fields

if TYPE_CHECKING:
    from shared.config import Settings

API_VERSION: Final = "argoproj.io/v1alpha1"
ENTRYPOINT: Final = "pipeline"
# The platform's jq image: fixed, pinned, with /bin/sh; tenants cannot choose it.
JQ_IMAGE: Final = "ghcr.io/kubeopera/jq:1.7.1"
IO_VOLUME: Final = "kubeopera-io"
IO_DIR: Final = "/kubeopera/io"
FILTER_RESULT: Final = "result"
_FILTER_RESOURCES: Final = {
    "requests": {"cpu": "50m", "memory": "32Mi"},
    "limits": {"cpu": "200m", "memory": "64Mi"},
}
_RUNS_AS: Final = {"spark": "spark", "pytorch": "training"}
GPU_RESOURCE: Final = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class StepLimits:
    """The largest single step (DATA_MAX_CPU, DATA_MAX_MEMORY, and ML_MAX_GPU for ML)."""

    max_cpu: str
    max_memory: str
    max_gpu: int = 0

    @classmethod
    def from_settings(cls, settings: Settings, kind: PipelineKind) -> StepLimits:
        gpu = settings.ML_MAX_GPU if kind == "ml" else 0
        return cls(settings.DATA_MAX_CPU, settings.DATA_MAX_MEMORY, gpu)


def template_for_step(name: str) -> str:
    return f"step-{name}"


def compile_wizard(
    spec: PipelineSpec | Mapping[str, Any],
    *,
    tenant: str,
    pipeline_id: str,
    version: int,
    kind: PipelineKind,
    limits: StepLimits,
    jq_image: str = JQ_IMAGE,
) -> dict[str, Any]:
    """The WorkflowTemplate of a wizard pipeline; ``Invalid`` names each offending field."""
    pipeline = parse_spec(spec)
    errors = list(_limit_errors(pipeline, limits, kind))
    if errors:
        raise invalid_fields("the pipeline exceeds its limits", errors)
    arguments = []
    for parameter in pipeline.parameters:
        argument: dict[str, Any] = {"name": parameter.name}
        if parameter.default is not None:
            argument["value"] = parameter_value(parameter.default)
        if parameter.description:
            argument["description"] = parameter.description
        arguments.append(argument)
    templates: list[dict[str, Any]] = [
        {"name": ENTRYPOINT, "dag": {"tasks": [_task(step) for step in pipeline.steps]}}
    ]
    templates += [_step_template(step, jq_image) for step in pipeline.steps]
    spec_out: dict[str, Any] = {"entrypoint": ENTRYPOINT, "templates": templates}
    if arguments:
        spec_out["arguments"] = {"parameters": arguments}
    return {
        "apiVersion": API_VERSION,
        "kind": "WorkflowTemplate",
        "metadata": {
            "name": template_name(pipeline_id, version),
            "labels": identity_labels(pipeline_id=pipeline_id, version=version, kind=kind),
        },
        "spec": spec_out,
    }


def _limit_errors(
    pipeline: PipelineSpec, limits: StepLimits, kind: PipelineKind
) -> list[dict[str, str]]:
    errors: list[dict[str, str]] = []
    max_cpu, max_memory = cpu_millis(limits.max_cpu), memory_bytes(limits.max_memory)
    max_gpu = limits.max_gpu if kind == "ml" else 0
    for index, step in enumerate(pipeline.steps):
        if step.resources is None:
            continue
        for side in ("requests", "limits"):
            amounts = getattr(step.resources, side)
            where = f"steps[{index}].resources.{side}"
            if amounts.cpu and cpu_millis(amounts.cpu) > max_cpu:
                message = f"{amounts.cpu} is above the largest step's {limits.max_cpu} CPU"
                errors.append({"field": f"{where}.cpu", "message": message})
            if amounts.memory and memory_bytes(amounts.memory) > max_memory:
                message = f"{amounts.memory} is above the largest step's {limits.max_memory}"
                errors.append({"field": f"{where}.memory", "message": message})
            if amounts.gpu > max_gpu:
                message = (
                    f"{amounts.gpu} GPUs is above the {max_gpu} a step may use"
                    if kind == "ml"
                    else "data pipelines have no GPUs; use an ML pipeline"
                )
                errors.append({"field": f"{where}.gpu", "message": message})
    return errors


def _depends(step: Step) -> str | None:
    if not step.activation:
        names = upstream(step)
        return " && ".join(names) if names else None
    activation = expressions.parse(step.activation)
    mentioned = expressions.references(activation)
    extra = [name for name in upstream(step) if name not in mentioned]
    rendered = expressions.render_depends(activation)
    if not extra:
        return rendered
    if isinstance(activation, expressions.Or):
        rendered = f"({rendered})"
    return " && ".join([*extra, rendered])


def _task(step: Step) -> dict[str, Any]:
    task: dict[str, Any] = {"name": step.name, "template": template_for_step(step.name)}
    depends = _depends(step)
    if depends:
        task["depends"] = depends
    if step.when:
        task["when"] = step.when
    parameters = []
    for parameter in step.inputs.parameters:
        if parameter.from_:
            source, _, output = parameter.from_.partition(".")
            value = f"{{{{tasks.{source}.outputs.parameters.{output}}}}}"
        else:
            value = parameter.value or ""
        parameters.append({"name": parameter.name, "value": value})
    artifacts = []
    for artifact in step.inputs.artifacts:
        source, _, output = artifact.from_.partition(".")
        artifacts.append(
            {"name": artifact.name, "from": f"{{{{tasks.{source}.outputs.artifacts.{output}}}}}"}
        )
    arguments: dict[str, Any] = {}
    if parameters:
        arguments["parameters"] = parameters
    if artifacts:
        arguments["artifacts"] = artifacts
    if arguments:
        task["arguments"] = arguments
    return task


def _resources(step: Step) -> dict[str, Any] | None:
    if step.resources is None:
        return None
    out: dict[str, Any] = {}
    for side in ("requests", "limits"):
        amounts = getattr(step.resources, side)
        values: dict[str, Any] = {}
        if amounts.cpu:
            values["cpu"] = amounts.cpu
        if amounts.memory:
            values["memory"] = amounts.memory
        if amounts.gpu:
            values[GPU_RESOURCE] = amounts.gpu
        if values:
            out[side] = values
    return out or None


def _main_container(step: Step, *, filtered: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"image": step.image}
    if step.command:
        container["command"] = list(step.command)
    if step.args:
        container["args"] = list(step.args)
    env: list[dict[str, Any]] = []
    for variable in step.env:
        if variable.from_secret is not None:
            reference = {"name": variable.from_secret.name, "key": variable.from_secret.key}
            env.append({"name": variable.name, "valueFrom": {"secretKeyRef": reference}})
        else:
            env.append({"name": variable.name, "value": variable.value})
    if filtered:
        if step.input_filter:
            env.append({"name": "KUBEOPERA_INPUT", "value": f"{IO_DIR}/input.json"})
        if step.output_filter:
            env.append({"name": "KUBEOPERA_OUTPUT", "value": f"{IO_DIR}/output.json"})
    if env:
        container["env"] = env
    resources = _resources(step)
    if resources:
        container["resources"] = resources
    return container


def _jq_container(name: str, image: str, program: str, script: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "command": ["sh", "-c", script],
        "env": [{"name": "KUBEOPERA_JQ_PROGRAM", "value": program}],
        "resources": {side: dict(amounts) for side, amounts in _FILTER_RESOURCES.items()},
    }


def _filter_containers(step: Step, image: str) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = []
    main = {"name": "main", **_main_container(step, filtered=True)}
    if step.input_filter:
        fields = ", ".join(
            f"{json.dumps(parameter.name)}: $ENV.KUBEOPERA_P{index}"
            for index, parameter in enumerate(step.inputs.parameters)
        )
        program = f"{{{fields}}} | ({step.input_filter}\n)"
        script = f'jq -n -c "$KUBEOPERA_JQ_PROGRAM" > {IO_DIR}/input.json'
        container = _jq_container("input-filter", image, program, script)
        container["env"] += [
            {"name": f"KUBEOPERA_P{index}", "value": f"{{{{inputs.parameters.{parameter.name}}}}}"}
            for index, parameter in enumerate(step.inputs.parameters)
        ]
        containers.append(container)
        main["dependencies"] = ["input-filter"]
    containers.append(main)
    if step.output_filter:
        script = (
            f'jq -c "$KUBEOPERA_JQ_PROGRAM" {IO_DIR}/output.json > {IO_DIR}/{FILTER_RESULT}.json'
        )
        container = _jq_container("output-filter", image, step.output_filter, script)
        container["dependencies"] = ["main"]
        containers.append(container)
    return containers


def _step_template(step: Step, jq_image: str) -> dict[str, Any]:
    template: dict[str, Any] = {"name": template_for_step(step.name)}
    inputs: dict[str, Any] = {}
    if step.inputs.parameters:
        inputs["parameters"] = [{"name": parameter.name} for parameter in step.inputs.parameters]
    if step.inputs.artifacts:
        inputs["artifacts"] = [
            {"name": artifact.name, "path": artifact.path} for artifact in step.inputs.artifacts
        ]
    if inputs:
        template["inputs"] = inputs
    outputs: dict[str, Any] = {}
    parameters = [
        {"name": parameter.name, "valueFrom": {"path": parameter.path}}
        for parameter in step.outputs.parameters
    ]
    if step.output_filter:
        path = f"{IO_DIR}/{FILTER_RESULT}.json"
        parameters.append({"name": FILTER_RESULT, "valueFrom": {"path": path}})
    if parameters:
        outputs["parameters"] = parameters
    if step.outputs.artifacts:
        outputs["artifacts"] = [
            {"name": artifact.name, "path": artifact.path} for artifact in step.outputs.artifacts
        ]
    if outputs:
        template["outputs"] = outputs
    if step.runtime in _RUNS_AS:
        template["metadata"] = {"annotations": {RUNS_AS_ANNOTATION: _RUNS_AS[step.runtime]}}
    if step.input_filter or step.output_filter:
        template["containerSet"] = {
            "volumeMounts": [{"name": IO_VOLUME, "mountPath": IO_DIR}],
            "containers": _filter_containers(step, jq_image),
        }
        template["volumes"] = [{"name": IO_VOLUME, "emptyDir": {}}]
    else:
        template["container"] = _main_container(step, filtered=False)
    if step.retries is not None:
        strategy: dict[str, Any] = {
            "limit": step.retries.limit,
            "retryPolicy": step.retries.policy,
        }
        if step.retries.backoff is not None:
            backoff: dict[str, Any] = {
                "duration": f"{step.retries.backoff.duration}s",
                "factor": step.retries.backoff.factor,
            }
            if step.retries.backoff.max_duration is not None:
                backoff["maxDuration"] = f"{step.retries.backoff.max_duration}s"
            strategy["backoff"] = backoff
        template["retryStrategy"] = strategy
    if step.timeout is not None:
        template["activeDeadlineSeconds"] = step.timeout
    return template
