"""The wizard's pipeline specification (``apiVersion: pipelines.kubeopera.io/v1``).

Purely computational, no side effects. ``parse_spec`` turns the wizard's JSON into a validated,
immutable ``PipelineSpec`` or raises ``shared.errors.Invalid`` whose ``details.errors`` name
every offending field as a path (``steps[2].retries.limit``). Shape is checked by pydantic;
cross-field rules (unique names, references between steps, the dependency DAG, placeholders
naming declared parameters) are checked here afterwards, so that each error keeps its path.
The schema is documented in docs/pipeline-spec.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from compiler.pipelines import expressions
from shared import stages
from shared.config import parse_duration
from shared.errors import Invalid
from shared.identifiers import (
    DATA_SECRET_KEY_PATTERN,
    DATA_SECRET_NAME_PATTERN,
    RESERVED_SECRET_PREFIX,
)
from shared.quantity import cpu_millis, memory_bytes
from shared.validation import field_path, invalid_fields

API_VERSION: Final = "pipelines.kubeopera.io/v1"
MAX_STEPS: Final = 300
MAX_FILTER: Final = 4096
RESERVED_STEP_NAMES: Final = frozenset({"and", "or", "not", "pipeline"})

_STEP_NAME: Final = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
_PARAM_NAME: Final = r"^[A-Za-z_][A-Za-z0-9_-]{0,62}$"
_ENV_NAME: Final = r"^[A-Za-z_][A-Za-z0-9_.-]{0,254}$"
_SECRET_NAME: Final = DATA_SECRET_NAME_PATTERN
_SECRET_KEY: Final = DATA_SECRET_KEY_PATTERN
_REFERENCE: Final = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.[A-Za-z_][A-Za-z0-9_-]{0,62}$"
_PLACEHOLDER: Final = re.compile(r"\{\{\s*(workflow|inputs)\.parameters\.([A-Za-z0-9_-]+)\s*\}\}")
MAX_TIMEOUT_SECONDS: Final = 7 * 86400


def _cpu(value: str) -> str:
    cpu_millis(value)
    return value


def _memory(value: str) -> str:
    memory_bytes(value)
    return value


def _seconds(value: object) -> int:
    seconds = round(parse_duration(value))
    if not 1 <= seconds <= MAX_TIMEOUT_SECONDS:
        raise ValueError("expected a duration between 1s and 7d")
    return seconds


def _activation(value: str) -> str:
    try:
        expressions.parse(value)
    except expressions.ExpressionError as exc:
        raise ValueError(str(exc)) from exc
    return value


def _jq(value: str) -> str:
    if not value.strip():
        raise ValueError("an empty jq filter; leave the field out instead")
    if "{{" in value:
        raise ValueError("'{{' is Argo's placeholder syntax and cannot appear in a jq filter")
    return value


def _not_reserved(value: str) -> str:
    if value.startswith(RESERVED_SECRET_PREFIX):
        raise ValueError(f"secrets named {RESERVED_SECRET_PREFIX}* belong to the platform")
    return value


StepName = Annotated[str, Field(pattern=_STEP_NAME)]
ParamName = Annotated[str, Field(pattern=_PARAM_NAME)]
Cpu = Annotated[str, AfterValidator(_cpu)]
Memory = Annotated[str, AfterValidator(_memory)]
Seconds = Annotated[int, BeforeValidator(_seconds)]
Text = Annotated[str, Field(max_length=8192)]
JqFilter = Annotated[str, Field(max_length=MAX_FILTER), AfterValidator(_jq)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Parameter(_Model):
    """A pipeline parameter: set per run, referenced as ``{{workflow.parameters.<name>}}``."""

    name: ParamName
    type: Literal["string", "integer", "number", "boolean"] = "string"
    default: str | int | float | bool | None = None
    description: Annotated[str, Field(max_length=1024)] = ""

    @model_validator(mode="after")
    def _default_has_type(self) -> Parameter:
        expected = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}
        value = self.default
        if value is None:
            return self
        wrong_bool = isinstance(value, bool) and self.type != "boolean"
        if wrong_bool or not isinstance(value, expected[self.type]):
            raise ValueError(f"default {value!r} is not of type {self.type}")
        return self


class SecretRef(_Model):
    """One key of one of the tenant's data secrets (a Secret in the tenant namespace)."""

    name: Annotated[str, Field(pattern=_SECRET_NAME), AfterValidator(_not_reserved)]
    key: Annotated[str, Field(pattern=_SECRET_KEY)]


class EnvVar(_Model):
    name: Annotated[str, Field(pattern=_ENV_NAME)]
    value: Text | None = None
    from_secret: SecretRef | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if (self.value is None) == (self.from_secret is None):
            raise ValueError("set exactly one of value and from_secret")
        return self


class Amounts(_Model):
    cpu: Cpu | None = None
    memory: Memory | None = None
    gpu: Annotated[int, Field(ge=0, le=64)] = 0


class Resources(_Model):
    requests: Amounts = Amounts()
    limits: Amounts = Amounts()

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Resources:
        requests, limits = self.requests, self.limits
        if requests.cpu and limits.cpu and cpu_millis(requests.cpu) > cpu_millis(limits.cpu):
            raise ValueError("requests.cpu is above limits.cpu")
        if (
            requests.memory
            and limits.memory
            and memory_bytes(requests.memory) > memory_bytes(limits.memory)
        ):
            raise ValueError("requests.memory is above limits.memory")
        if requests.gpu:
            raise ValueError("GPUs are set in limits only (Kubernetes requests them as limits)")
        return self


class InputParameter(_Model):
    """A step input: a literal (which may use placeholders) or another step's output."""

    name: ParamName
    value: Text | None = None
    from_: Annotated[str | None, Field(alias="from", pattern=_REFERENCE)] = None

    @model_validator(mode="after")
    def _one_source(self) -> InputParameter:
        if (self.value is None) == (self.from_ is None):
            raise ValueError("set exactly one of value and from (<step>.<output>)")
        return self


class InputArtifact(_Model):
    name: ParamName
    path: Annotated[str, Field(pattern=r"^/")]
    from_: Annotated[str, Field(alias="from", pattern=_REFERENCE)]


class OutputParameter(_Model):
    name: ParamName
    path: Annotated[str, Field(pattern=r"^/")]


class OutputArtifact(_Model):
    name: ParamName
    path: Annotated[str, Field(pattern=r"^/")]


class Inputs(_Model):
    parameters: list[InputParameter] = []
    artifacts: list[InputArtifact] = []


class Outputs(_Model):
    parameters: list[OutputParameter] = []
    artifacts: list[OutputArtifact] = []


class Backoff(_Model):
    duration: Seconds = 10
    factor: Annotated[int, Field(ge=1, le=10)] = 2
    max_duration: Seconds | None = None


class Retries(_Model):
    limit: Annotated[int, Field(ge=0, le=20)]
    policy: Literal["Always", "OnFailure", "OnError", "OnTransientError"] = "OnFailure"
    backoff: Backoff | None = None


class Step(_Model):
    name: StepName
    description: Annotated[str, Field(max_length=1024)] = ""
    image: Annotated[str, Field(min_length=1, max_length=512, pattern=r"^\S+$")]
    command: list[Text] = []
    args: list[Text] = []
    env: list[EnvVar] = []
    resources: Resources | None = None
    inputs: Inputs = Inputs()
    outputs: Outputs = Outputs()
    retries: Retries | None = None
    timeout: Seconds | None = None
    depends_on: list[StepName] = []
    when: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    activation: Annotated[str, AfterValidator(_activation)] | None = None
    input_filter: JqFilter | None = None
    output_filter: JqFilter | None = None
    # spark and pytorch steps run as the namespace's Spark or training account (stamping).
    runtime: Literal["container", "spark", "pytorch"] = "container"

    @model_validator(mode="after")
    def _filters_need_a_command(self) -> Step:
        if (self.input_filter or self.output_filter) and not self.command:
            raise ValueError("a step with a jq filter runs in a container set and needs a command")
        return self


class PipelineSpec(_Model):
    api_version: Annotated[Literal["pipelines.kubeopera.io/v1"], Field(alias="apiVersion")]
    parameters: list[Parameter] = []
    steps: Annotated[list[Step], Field(min_length=1, max_length=MAX_STEPS)]


# --- parsing and cross-field rules --------------------------------------------------------------


def _invalid(errors: list[dict[str, str]]) -> Invalid:
    return invalid_fields("the pipeline specification is invalid", errors)


def parse_spec(data: object) -> PipelineSpec:
    """Validate the wizard's specification; ``Invalid`` names every offending field."""
    if isinstance(data, PipelineSpec):
        spec = data
    else:
        try:
            spec = PipelineSpec.model_validate(data)
        except ValidationError as exc:
            errors = [
                {"field": field_path(error["loc"]), "message": error["msg"]}
                for error in exc.errors()
            ]
            raise _invalid(errors) from exc
    errors = list(semantic_errors(spec))
    if errors:
        raise _invalid(errors)
    return spec


def upstream(step: Step) -> list[str]:
    """The steps ``step`` waits for: depends_on, activation and ``from`` references, in order."""
    names = list(step.depends_on)
    if step.activation:
        names += sorted(expressions.references(expressions.parse(step.activation)))
    names += [item.from_.split(".")[0] for item in step.inputs.parameters if item.from_]
    names += [item.from_.split(".")[0] for item in step.inputs.artifacts]
    return list(dict.fromkeys(names))


def semantic_errors(spec: PipelineSpec) -> Iterator[dict[str, str]]:
    """Cross-field rules, each error with the path of the field it is about."""
    parameters = {parameter.name for parameter in spec.parameters}
    steps: dict[str, Step] = {}
    for index, parameter in enumerate(spec.parameters):
        if list(p.name for p in spec.parameters).index(parameter.name) != index:
            yield {"field": f"parameters[{index}].name", "message": "duplicate parameter name"}
    for index, step in enumerate(spec.steps):
        if step.name in steps:
            yield {"field": f"steps[{index}].name", "message": f"duplicate step {step.name!r}"}
        elif step.name in RESERVED_STEP_NAMES:
            yield {"field": f"steps[{index}].name", "message": f"{step.name!r} is reserved"}
        elif stages.reserved_name(step.name):
            message = f"{step.name!r} is reserved: wm- names are the platform's control stages"
            yield {"field": f"steps[{index}].name", "message": message}
        steps.setdefault(step.name, step)
    reference_errors = [
        error
        for index, step in enumerate(spec.steps)
        for error in _step_references(index, step, steps, parameters)
    ]
    yield from reference_errors
    if not reference_errors:
        cycle = find_cycle({step.name: upstream(step) for step in steps.values()})
        if cycle:
            first = next(i for i, step in enumerate(spec.steps) if step.name == cycle[0])
            yield {"field": f"steps[{first}]", "message": f"dependency cycle: {' -> '.join(cycle)}"}


def _outputs_of(step: Step, kind: Literal["parameters", "artifacts"]) -> set[str]:
    if kind == "artifacts":
        return {artifact.name for artifact in step.outputs.artifacts}
    names = {parameter.name for parameter in step.outputs.parameters}
    return names | ({"result"} if step.output_filter else set())


def _step_references(
    index: int, step: Step, steps: Mapping[str, Step], parameters: set[str]
) -> Iterator[dict[str, str]]:
    where = f"steps[{index}]"
    for position, name in enumerate(step.depends_on):
        if name not in steps or name == step.name:
            yield {"field": f"{where}.depends_on[{position}]", "message": f"no step {name!r}"}
    if step.activation:
        for name in sorted(expressions.references(expressions.parse(step.activation))):
            if name not in steps or name == step.name:
                yield {"field": f"{where}.activation", "message": f"no other step {name!r}"}
    references: list[tuple[str, str | None, Literal["parameters", "artifacts"]]] = [
        (f"{where}.inputs.parameters[{position}].from", item.from_, "parameters")
        for position, item in enumerate(step.inputs.parameters)
    ] + [
        (f"{where}.inputs.artifacts[{position}].from", item.from_, "artifacts")
        for position, item in enumerate(step.inputs.artifacts)
    ]
    for field, reference, kind in references:
        if reference is None:
            continue
        source, _, output = reference.partition(".")
        if source not in steps or source == step.name:
            yield {"field": field, "message": f"no other step {source!r}"}
        elif output not in _outputs_of(steps[source], kind):
            yield {"field": field, "message": f"step {source!r} has no output {output!r}"}
    inputs = {parameter.name for parameter in step.inputs.parameters}
    for field, text, in_template in _texts(step, where):
        for scope, name in _PLACEHOLDER.findall(text):
            # Task arguments are evaluated in the DAG, where only workflow parameters exist.
            known = parameters if scope == "workflow" else (inputs if in_template else set())
            if name not in known:
                yield {
                    "field": field,
                    "message": f"{{{{{scope}.parameters.{name}}}}} is undeclared",
                }


def _texts(step: Step, where: str) -> Iterator[tuple[str, str, bool]]:
    """(field, text, evaluated in the step's own template) for every text with placeholders."""
    for position, text in enumerate(step.command):
        yield f"{where}.command[{position}]", text, True
    for position, text in enumerate(step.args):
        yield f"{where}.args[{position}]", text, True
    for position, env in enumerate(step.env):
        if env.value is not None:
            yield f"{where}.env[{position}].value", env.value, True
    for position, parameter in enumerate(step.inputs.parameters):
        if parameter.value is not None:
            yield f"{where}.inputs.parameters[{position}].value", parameter.value, False
    if step.when:
        yield f"{where}.when", step.when, False


def find_cycle(graph: Mapping[str, list[str]]) -> list[str] | None:
    """A cycle in ``graph`` (node -> nodes it depends on) as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in graph:
        if state.get(root):
            continue
        path: list[str] = [root]
        stack: list[Iterator[str]] = [iter(graph.get(root, ()))]
        state[root] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(child) == 1:
                return [*path[path.index(child) :], child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append(iter(graph.get(child, ())))
    return None


def parameter_value(value: Any) -> str:
    """A default as Argo's string value: booleans as true/false, numbers as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
