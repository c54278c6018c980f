"""What a tenant saves as a pipeline: the body of create, update and validate, and its kind.
Purely computational.

One schema for both sides: the apiserver refuses a malformed body with it before forwarding
(``apiserver.pipelines.routes``) and the compiler parses the body it renders with it
(``compiler.pipelines.definitions``, ``compiler.pipelines.service``), so both answer the
same 400 for the same body. The body (docs/api.md, "Pipelines") is ``{"name", "description",
"parameters", "definition", "schedule", "triggers", "notifications", "release"}``;
``definition`` is a wizard specification, a WorkflowTemplate in YAML, or a Git reference;
``notifications`` the channels told when a run finishes (docs/pipeline-spec.md,
"Notifications"); ``release`` (ML pipelines only) names the model the run produces, its
scorecard and the gate it must pass (docs/pipeline-spec.md, "Releases"). Whether the steps and
artifacts it names exist is judged against the rendered template by the compiler
(``compiler.pipelines.release``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
)

from shared.errors import Invalid
from shared.event_selectors import parse_selector
from shared.identifiers import (
    DATA_SECRET_KEY_PATTERN,
    DATA_SECRET_NAME_PATTERN,
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    RESERVED_SECRET_PREFIX,
    TRIGGER_NAME_PATTERN,
)
from shared.serving import Production, Serving, production_errors, serving_errors
from shared.validation import field_path, invalid_fields

PipelineKind = Literal["data", "ml"]

MAX_YAML: Final = 512 * 1024
_NAME: Final = r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,99}$"
_DNS_LABEL: Final = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
# A task or step name (Argo's own limit is wider; ours keeps it printable and bounded).
_STEP: Final = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
_METRIC: Final = r"^[^\x00-\x1f]{1,200}$"
MAX_THRESHOLDS: Final = 20
# Names a release body may reach for that are not its fields, and where that setting lives.
MISPLACED_FIELDS: Final = {
    "deploy": "release.serving",
    "staging": "release.serving",
    "canary": "release.production.canary_steps",
}
# Whether a release may carry ``production`` (a canary to production: canary, analysis and
# promotion stages). Not until the stage controller carries those stages: a compiled node
# nobody completes would hang every run. Part three of the ML releases flips it.
CANARY_RELEASES: Final[bool] = False
CANARY_REFUSAL: Final = (
    "canary releases arrive with the canary stage; until then a version reaches production "
    "through POST /models/{id}/versions/{v}/promote"
)

ParameterValue = str | int | float | bool


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WizardDefinition(_Model):
    type: Literal["wizard"]
    spec: dict[str, Any]


class YamlDefinition(_Model):
    type: Literal["yaml"]
    template: Annotated[str, Field(min_length=1, max_length=MAX_YAML)]


# Printable ASCII without space: what a repository URL, a branch or a path may hold (a
# control character or a space in any of them is a mistake or an injection, never a need).
_PLAIN: Final = re.compile(r"^[\x21-\x7e]+$")
# What git-check-ref-format refuses in a branch name, plus a leading "-" (never an option).
_BAD_BRANCH: Final = re.compile(
    r"(^[-/.])|\.\.|//|@\{|[~^:?*\[\\]|(/\.)|([/.]$)|(\.lock$)|(\.lock/)"
)


def _https_repository(value: str) -> str:
    """An ``https://host/path`` URL and nothing else: no other scheme, no credentials in it
    (they belong in ``credentials_secret``), no query or fragment."""
    if not _PLAIN.match(value):
        raise ValueError("printable characters only, no spaces")
    parts = urlsplit(value)
    if parts.scheme != "https":
        raise ValueError("only https:// repositories are accepted")
    if "@" in parts.netloc:
        raise ValueError(
            "credentials may not be written in the URL: name a data secret in credentials_secret"
        )
    if not parts.hostname or parts.query or parts.fragment or "#" in value or "?" in value:
        raise ValueError("expected https://host/path, with no query or fragment")
    try:
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        raise ValueError("the port is not a number") from None
    return value


def _branch(value: str) -> str:
    if not _PLAIN.match(value) or _BAD_BRANCH.search(value) or value == "@":
        raise ValueError("not a valid branch name (git check-ref-format)")
    return value


def _repository_path(value: str) -> str:
    """A file's path from the repository's root: no leading or trailing "/", no "." or ".."
    component, no backslash."""
    if not _PLAIN.match(value) or "\\" in value:
        raise ValueError("printable characters only, no spaces or backslashes")
    if any(part in ("", ".", "..") for part in value.split("/")):
        raise ValueError("a path from the repository's root, e.g. pipelines/nightly.yaml")
    return value


class GitDefinition(_Model):
    """A WorkflowTemplate in YAML kept in a Git repository: ``path`` on ``branch``, read with
    the ``username`` and ``password`` of the tenant's data secret ``credentials_secret`` (none:
    a public repository). Git sync (``compiler.gitsync``) fetches it; each new commit whose
    document passes becomes a version."""

    type: Literal["git"]
    repository: Annotated[
        str, Field(min_length=1, max_length=2048), AfterValidator(_https_repository)
    ]
    branch: Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_branch)] = "main"
    path: Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_repository_path)]
    credentials_secret: (
        Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)] | None
    ) = None


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
    """What an ML pipeline's run releases: registered, gated, deployed to staging when it has
    ``serving``, approved when asked; ``production`` (canary releases) is defined but refused
    at save while ``CANARY_RELEASES`` is off (``check_release``)."""

    model: Annotated[str, Field(pattern=_DNS_LABEL)]
    model_artifact: OutputRef
    scorecard: OutputRef
    gate: Gate
    approval: Approval = Approval()
    serving: Serving | None = None
    production: Production | None = None


ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace"]
MAX_CRON_EXPRESSIONS: Final = 10
MAX_STARTING_DEADLINE: Final = 24 * 3600


class Schedule(_Model):
    """When a pipeline runs by itself: one Argo CronWorkflow (docs/pipeline-spec.md,
    "Schedules"). Its shape is checked here; the expressions, the zone and how often it may
    fire are checked by the compiler (``compiler.automation.schedules``), with the same 400."""

    cron: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=100)]],
        Field(min_length=1, max_length=MAX_CRON_EXPRESSIONS),
    ]
    timezone: Annotated[str, Field(min_length=1, max_length=64)] = "UTC"
    concurrency_policy: ConcurrencyPolicy = "Allow"
    # How late a run missed while Argo's controller was down may still start (none if unset).
    starting_deadline_seconds: (
        Annotated[StrictInt, Field(ge=0, le=MAX_STARTING_DEADLINE)] | None
    ) = None
    suspended: StrictBool = False


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
SETTINGS_FIELDS: Final = ("schedule", "triggers", "notifications", "release")


class PipelineBody(_Model):
    """The body of create, update and validate."""

    name: Annotated[str, Field(pattern=_NAME)]
    description: Annotated[str, Field(max_length=2000)] = ""
    parameters: dict[str, ParameterValue] = {}
    definition: Definition
    schedule: Schedule | None = None
    triggers: Annotated[list[WebhookTrigger], Field(max_length=MAX_TRIGGERS)] | None = None
    notifications: Notifications = []
    release: Release | None = None

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


def parse_body(data: object, kind: PipelineKind | None = None) -> PipelineBody:
    """The validated body; ``Invalid`` names every offending field. With ``kind``, also what
    that kind of pipeline may not have (a release on a data pipeline)."""
    _refuse_misplaced(data)
    try:
        body = PipelineBody.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"field": field_path(error["loc"]), "message": error["msg"]} for error in exc.errors()
        ]
        raise invalid_fields("the pipeline is invalid", errors) from exc
    check_channels(body)
    check_release(body)
    if kind is not None:
        check_kind(body, kind)
    return body


def check_channels(body: PipelineBody) -> None:
    """Invalid when a PagerDuty channel is told of successes: an incident per successful run
    pages people for nothing. PagerDuty channels page on failures and resolve the incident when
    the failed run, retried, succeeds; a Slack channel is the place for successes."""
    errors = [
        {
            "field": f"notifications[{index}].on",
            "message": "a PagerDuty channel pages on failures only ('failure'); "
            "tell successes to a Slack channel",
        }
        for index, channel in enumerate(body.notifications)
        if isinstance(channel, PagerDutyChannel) and channel.on != "failure"
    ]
    if errors:
        raise invalid_fields("the pipeline is invalid", errors)


def check_kind(body: PipelineBody, kind: PipelineKind) -> None:
    """Invalid when the body has what ``kind`` of pipeline cannot: a release on a data one."""
    if body.release is not None and kind != "ml":
        raise Invalid(
            "release: only ML pipelines have a release",
            details={"errors": [{"field": "release", "message": "only ML pipelines have one"}]},
        )


def check_release(body: PipelineBody) -> None:
    """Invalid when the release's fields disagree with each other (``shared.serving``), when
    ``production`` comes without ``serving`` (a canary is a deployment), or when it comes at
    all while canary releases are not available (``CANARY_RELEASES``)."""
    release = body.release
    if release is None:
        return
    errors = serving_errors(release.serving) if release.serving is not None else []
    if release.production is not None:
        errors += production_errors(release.production)
        if release.serving is None:
            errors.append(
                {
                    "field": "release.production",
                    "message": "a canary release needs release.serving: what to deploy",
                }
            )
    if errors:
        raise invalid_fields("the release is invalid", errors)
    if release.production is not None and not CANARY_RELEASES:
        raise Invalid(
            f"release.production: {CANARY_REFUSAL}",
            details={"errors": [{"field": "release.production", "message": CANARY_REFUSAL}]},
        )


def _refuse_misplaced(data: object) -> None:
    """A release naming a deployment setting where it does not live is told where it does,
    rather than "extra inputs are not permitted"."""
    release = data.get("release") if isinstance(data, dict) else None
    if not isinstance(release, dict):
        return
    for name, home in MISPLACED_FIELDS.items():
        if name in release:
            message = f"not a field of a release; this is set in {home}"
            raise Invalid(
                f"release.{name}: {message}",
                details={"errors": [{"field": f"release.{name}", "message": message}]},
            )
