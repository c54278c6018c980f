"""What a tenant saves as a pipeline: the body of create, update and validate, and its kind.
Purely computational.

One schema for both sides: the apiserver refuses a malformed body with it before forwarding
(``apiserver.pipelines.routes``) and the compiler parses the body it renders with it
(``compiler.pipelines.definitions``, ``compiler.pipelines.service``), so both answer the
same 400 for the same body. The body (docs/api.md, "Pipelines") is ``{"name", "description",
"parameters", "definition", "schedule", "triggers", "notifications"}``; ``definition`` is a
wizard specification, a WorkflowTemplate in YAML, or a Git reference; ``notifications`` the
channels told when a run finishes (docs/pipeline-spec.md, "Notifications").
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from shared.errors import Invalid
from shared.identifiers import (
    DATA_SECRET_KEY_PATTERN,
    DATA_SECRET_NAME_PATTERN,
    DNS_LABEL_PATTERN,
    RESERVED_SECRET_PREFIX,
)
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


def _data_secret(value: str) -> str:
    if value.startswith(RESERVED_SECRET_PREFIX):
        raise ValueError(f"secrets named {RESERVED_SECRET_PREFIX}* belong to the platform")
    return value


SecretName = Annotated[str, Field(pattern=DATA_SECRET_NAME_PATTERN), AfterValidator(_data_secret)]
SecretKey = Annotated[str, Field(pattern=DATA_SECRET_KEY_PATTERN)]
ChannelName = Annotated[str, Field(pattern=DNS_LABEL_PATTERN)]
# When a channel is told: failure (Failed or Error), success (Succeeded) or always (either).
NotifyOn = Literal["failure", "success", "always"]
MAX_CHANNELS: Final = 10


class SlackChannel(_Model):
    """A Slack incoming webhook; its URL is the value of ``key`` in the data secret ``secret``
    (read when a message is sent, never stored with the pipeline)."""

    name: ChannelName
    type: Literal["slack"]
    secret: SecretName
    key: SecretKey = "url"
    on: NotifyOn = "failure"


class PagerDutyChannel(_Model):
    """A PagerDuty service through Events API v2; its routing (integration) key is the value of
    ``key`` in the data secret ``secret``."""

    name: ChannelName
    type: Literal["pagerduty"]
    secret: SecretName
    key: SecretKey = "routing_key"
    on: NotifyOn = "failure"
    severity: Literal["critical", "error", "warning", "info"] = "error"


NotificationChannel = Annotated[SlackChannel | PagerDutyChannel, Field(discriminator="type")]


def _unique_names(channels: list[SlackChannel | PagerDutyChannel]) -> list[Any]:
    seen: set[str] = set()
    for channel in channels:
        if channel.name in seen:
            raise ValueError(f"two channels are named {channel.name!r}; names must be unique")
        seen.add(channel.name)
    return channels


def _none_is_empty(value: object) -> object:
    return [] if value is None else value


# ``null`` reads as no channels, as it did before channels existed.
Notifications = Annotated[
    list[NotificationChannel],
    BeforeValidator(_none_is_empty),
    Field(max_length=MAX_CHANNELS),
    AfterValidator(_unique_names),
]


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
    triggers: Any = None
    notifications: Notifications = []

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
    # Schedules and event triggers become CronWorkflows and sensors with their own issues;
    # accepting them now would promise runs that never happen.
    for name in ("schedule", "triggers"):
        if getattr(body, name) not in (None, [], {}):
            raise Invalid(
                f"{name}: not available yet on this installation",
                details={"errors": [{"field": name, "message": "not available yet"}]},
            )
    return body
