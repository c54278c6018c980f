"""What a tenant saves as a pipeline: the body of create, update and validate, and its kind.
Purely computational.

One schema for both sides: the apiserver refuses a malformed body with it before forwarding
(``apiserver.pipelines.routes``) and the compiler parses the body it renders with it
(``compiler.pipelines.definitions``, ``compiler.pipelines.service``), so both answer the
same 400 for the same body. The body (docs/api.md, "Pipelines") is ``{"name", "description",
"parameters", "definition", "schedule", "triggers", "notifications"}``; ``definition`` is a
wizard specification, a WorkflowTemplate in YAML, or a Git reference.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from shared.errors import Invalid
from shared.event_selectors import parse_selector
from shared.identifiers import TRIGGER_NAME_PATTERN
from shared.validation import field_path

PipelineKind = Literal["data", "ml"]

MAX_YAML: Final = 512 * 1024
_NAME: Final = r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,99}$"

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


MAX_TRIGGERS: Final = 10
MAX_TRIGGER_PARAMETERS: Final = 32
# Argo's rule for a parameter's name.
_PARAMETER_NAME: Final = r"^[-A-Za-z0-9_]{1,128}$"


def _selector(text: str) -> str:
    parse_selector(text)  # ValueError: pydantic names the field, triggers[0].parameters.<name>
    return text


class WebhookTrigger(_Model):
    """A webhook trigger: an HTTP endpoint that starts a run of the current version when POSTed
    with its token, each ``parameters`` entry (a declared parameter -> a selector,
    ``shared.event_selectors``) taking its value from the event."""

    name: Annotated[str, Field(pattern=TRIGGER_NAME_PATTERN)]
    type: Literal["webhook"]
    parameters: Annotated[
        dict[
            Annotated[str, Field(pattern=_PARAMETER_NAME)],
            Annotated[str, AfterValidator(_selector)],
        ],
        Field(max_length=MAX_TRIGGER_PARAMETERS),
    ] = {}


# The parts of a body besides its definition that a version keeps (``pipeline_versions.settings``)
# and that a pipeline's attachments (``compiler.pipelines.service.Attachment``) follow.
SETTINGS_FIELDS: Final = ("schedule", "triggers", "notifications")


class PipelineBody(_Model):
    """The body of create, update and validate."""

    name: Annotated[str, Field(pattern=_NAME)]
    description: Annotated[str, Field(max_length=2000)] = ""
    parameters: dict[str, ParameterValue] = {}
    definition: Definition
    schedule: Any = None
    triggers: Annotated[list[WebhookTrigger], Field(max_length=MAX_TRIGGERS)] | None = None
    notifications: Any = None

    @field_validator("triggers")
    @classmethod
    def _unique_trigger_names(cls, triggers: list[WebhookTrigger] | None) -> Any:
        names = [trigger.name for trigger in triggers or []]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"trigger names must be unique: {', '.join(repeated)}")
        return triggers

    def settings(self) -> dict[str, Any]:
        """What a version records of the body besides its definition, JSON-shaped."""
        return self.model_dump(mode="json", include=set(SETTINGS_FIELDS))


def parse_body(data: object) -> PipelineBody:
    """The validated body; ``Invalid`` names every offending field."""
    try:
        body = PipelineBody.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"field": field_path(error["loc"]), "message": error["msg"]} for error in exc.errors()
        ]
        summary = "; ".join(f"{error['field']}: {error['message']}" for error in errors[:5])
        raise Invalid(f"the pipeline is invalid: {summary}", details={"errors": errors}) from exc
    # Schedules and notifications become CronWorkflows and deliveries with their own issues;
    # accepting them now would promise runs that never happen.
    for name in ("schedule", "notifications"):
        if getattr(body, name) not in (None, [], {}):
            raise Invalid(
                f"{name}: not available yet on this installation",
                details={"errors": [{"field": name, "message": "not available yet"}]},
            )
    return body
