"""What a tenant saves as a pipeline: the body of create, update and validate, and its kind.
Purely computational.

One schema for both sides: the apiserver refuses a malformed body with it before forwarding
(``apiserver.pipelines.routes``) and the compiler parses the body it renders with it
(``compiler.pipelines.definitions``, ``compiler.pipelines.service``), so both answer the
same 400 for the same body. The body (docs/api.md, "Pipelines") is ``{"name", "description",
"parameters", "definition", "schedule", "triggers", "notifications", "release"}``;
``definition`` is a wizard specification, a WorkflowTemplate in YAML, or a Git reference;
``release`` (ML pipelines only) names the model the run produces, its scorecard and the gate it
must pass (docs/pipeline-spec.md, "Releases"). Whether the steps and artifacts it names exist is
judged against the rendered template by the compiler (``compiler.pipelines.release``).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.errors import Invalid
from shared.validation import field_path

PipelineKind = Literal["data", "ml"]

MAX_YAML: Final = 512 * 1024
_NAME: Final = r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,99}$"
_DNS_LABEL: Final = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
# A task or step name (Argo's own limit is wider; ours keeps it printable and bounded).
_STEP: Final = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
_METRIC: Final = r"^[^\x00-\x1f]{1,200}$"
MAX_THRESHOLDS: Final = 20
# The serving fields a release will take (deployment stages); refused until they exist.
SERVING_FIELDS: Final = ("deploy", "staging", "production", "canary")

ParameterValue = str | int | float | bool


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WizardDefinition(_Model):
    type: Literal["wizard"]
    spec: dict[str, Any]


class YamlDefinition(_Model):
    type: Literal["yaml"]
    template: Annotated[str, Field(min_length=1, max_length=MAX_YAML)]


class GitDefinition(_Model):
    type: Literal["git"]
    repository: Annotated[str, Field(min_length=1, max_length=2048)]
    branch: Annotated[str, Field(min_length=1, max_length=255)] = "main"
    path: Annotated[str, Field(min_length=1, max_length=1024)]
    credentials_secret: str | None = None


Definition = Annotated[
    WizardDefinition | YamlDefinition | GitDefinition, Field(discriminator="type")
]


class OutputRef(_Model):
    """An output artifact of one task or step of the tenant's template."""

    step: Annotated[str, Field(pattern=_STEP)]
    artifact: Annotated[str, Field(pattern=_STEP)]


# A number as JSON carries it: never a boolean, a string, NaN or an infinity.
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class Threshold(_Model):
    metric: Annotated[str, Field(pattern=_METRIC)]
    op: Literal[">=", ">", "<=", "<", "=="]
    value: Number


class Comparison(_Model):
    """Against the production version's scorecard: how much worse the metric may be."""

    metric: Annotated[str, Field(pattern=_METRIC)]
    max_regression: Annotated[Number, Field(ge=0)]
    higher_is_better: Annotated[bool, Field(strict=True)] = True


class Gate(_Model):
    thresholds: Annotated[list[Threshold], Field(min_length=1, max_length=MAX_THRESHOLDS)]
    compare_to_production: Comparison | None = None


class Approval(_Model):
    required: Annotated[bool, Field(strict=True)] = False


class Release(_Model):
    """What an ML pipeline's run releases: registered, gated, approved when asked."""

    model: Annotated[str, Field(pattern=_DNS_LABEL)]
    model_artifact: OutputRef
    scorecard: OutputRef
    gate: Gate
    approval: Approval = Approval()


# The parts of a body besides its definition that a version keeps (``pipeline_versions.settings``)
# and that a pipeline's attachments (``compiler.pipelines.service.Attachment``) follow.
SETTINGS_FIELDS: Final = ("schedule", "triggers", "notifications", "release")


class PipelineBody(_Model):
    """The body of create, update and validate."""

    name: Annotated[str, Field(pattern=_NAME)]
    description: Annotated[str, Field(max_length=2000)] = ""
    parameters: dict[str, ParameterValue] = {}
    definition: Definition
    schedule: Any = None
    triggers: Any = None
    notifications: Any = None
    release: Release | None = None

    def settings(self) -> dict[str, Any]:
        """What a version records of the body besides its definition, JSON-shaped."""
        return self.model_dump(mode="json", include=set(SETTINGS_FIELDS))


def parse_body(data: object, kind: PipelineKind | None = None) -> PipelineBody:
    """The validated body; ``Invalid`` names every offending field. With ``kind``, also what
    that kind of pipeline may not have (a release on a data pipeline)."""
    _refuse_serving(data)
    try:
        body = PipelineBody.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"field": field_path(error["loc"]), "message": error["msg"]} for error in exc.errors()
        ]
        summary = "; ".join(f"{error['field']}: {error['message']}" for error in errors[:5])
        raise Invalid(f"the pipeline is invalid: {summary}", details={"errors": errors}) from exc
    # Schedules, event triggers and notifications become CronWorkflows, sensors and deliveries
    # with their own issues; accepting them now would promise runs that never happen.
    for name in ("schedule", "triggers", "notifications"):
        if getattr(body, name) not in (None, [], {}):
            raise Invalid(
                f"{name}: not available yet on this installation",
                details={"errors": [{"field": name, "message": "not available yet"}]},
            )
    if kind is not None:
        check_kind(body, kind)
    return body


def check_kind(body: PipelineBody, kind: PipelineKind) -> None:
    """Invalid when the body has what ``kind`` of pipeline cannot: a release on a data one."""
    if body.release is not None and kind != "ml":
        raise Invalid(
            "release: only ML pipelines have a release",
            details={"errors": [{"field": "release", "message": "only ML pipelines have one"}]},
        )


def _refuse_serving(data: object) -> None:
    """Deployment fields of a release belong to stages that do not exist yet: a body that asks
    for them is told so, rather than "extra inputs are not permitted"."""
    release = data.get("release") if isinstance(data, dict) else None
    if not isinstance(release, dict):
        return
    for name in SERVING_FIELDS:
        if name in release:
            raise Invalid(
                f"release.{name}: not available yet on this installation",
                details={"errors": [{"field": f"release.{name}", "message": "not available yet"}]},
            )
