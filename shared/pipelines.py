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

import re
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from shared.errors import Invalid
from shared.identifiers import DNS_SUBDOMAIN_PATTERN
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
    notifications: Any = None

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
    # Schedules, event triggers and notifications become CronWorkflows, sensors and deliveries
    # with their own issues; accepting them now would promise runs that never happen.
    for name in ("schedule", "triggers", "notifications"):
        if getattr(body, name) not in (None, [], {}):
            raise Invalid(
                f"{name}: not available yet on this installation",
                details={"errors": [{"field": name, "message": "not available yet"}]},
            )
    return body
