"""The checked WorkflowTemplate a tenant's pipeline becomes. Purely computational.

A save, an update and a validate all carry the same body, parsed by ``shared.pipelines``
(``parse_body``; the apiserver checks it with the same model before forwarding).
``render`` turns it into the stamped template that will be applied:

1. the definition gives an unstamped WorkflowTemplate: a wizard specification is compiled
   (``compiler.pipelines.compile``), YAML is parsed with hard limits
   (``compiler.pipelines.yamldoc``); a Git definition is rendered exactly like YAML, from the
   document Git sync (``compiler.gitsync``) read at a commit and passes in (``Fetched``);
2. the body's ``parameters`` (``{name: default}``) replace the defaults of parameters the
   template declares; naming one it does not declare is an error, not a silent no-op;
3. ``compiler.pipelines.stamping`` gives it our identity, namespace, labels and service
   accounts;
4. the allowlist (``compiler.pipelines.allowlist``) judges the stamped document, which is still
   only the tenant's part, against the target: the tenant, the kind, the largest step and the
   tenant's data secrets; with a release, ``release.violations`` adds what the platform's stages
   need the template not to have (its own exit handler, template defaults);
5. only when the tenant's part passed: an ML pipeline's ``release`` is checked against it, the
   steps and artifacts it names must exist (``release.check_release``, 400), and the platform's
   part is added, which a tenant may not write: the control stages
   (``release.append_stages``: a new entrypoint ``wm-release-main``, suspend templates
   ``wm-*``, the exit handler ``wm-cleanup``) and, when experiment tracking is on, the tenant's
   MLflow account (``envFrom`` the Secret ``kubeopera-mlflow``) and the experiment's name
   (``MLFLOW_EXPERIMENT_NAME``) in every container of an ML pipeline
   (``compiler.pipelines.stamping.with_tracking_credentials``; a tenant who writes that
   Secret's reference itself is refused in step 4). Argo's schema
   (``compiler.pipelines.argo_schema``) then judges the whole document, and a refusal lists
   every violation at once (422). Nothing else is added: the executor's token and the
   artifact repository's credentials are found by Argo at run time, through the executor's
   service account and the namespace's repository ConfigMap;
6. the stages the final template contains (``release.stages_of``) are what the version records.

The body's ``schedule`` is checked first (``shared.schedules.check``: expressions, zone, how
often it fires); the CronWorkflow it becomes (``compiler.automation``) follows the current
version once saved.
7. each trigger's parameters must be parameters the template declares, and every declared
   parameter without a default must be mapped (400 naming ``triggers[i].parameters.<name>``).
4. the allowlist (``compiler.pipelines.allowlist``) and Argo's schema
   (``compiler.pipelines.argo_schema``) judge the stamped document together, so a refusal lists
   every violation of both at once (422). The allowlist judges it against the target: the tenant,
   the kind, the largest step and the tenant's data secrets. Whatever the platform must add that a
   tenant may not write (a reference to one of its own Secrets) would come after this step; nothing
   does today: the executor's token and the artifact repository's credentials are found by Argo at
   run time, through the executor's service account and the namespace's repository ConfigMap;
5. each trigger's parameters must be parameters the template declares, and every declared
   parameter without a default must be mapped (400 naming ``triggers[i].parameters.<name>``).

Argo's own lint, the third opinion, needs the Argo server and is called by the service
(``compiler.pipelines.service``). ``run_arguments`` checks a run's parameter overrides against
what the version declares.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from compiler.pipelines import allowlist, argo_schema, release
from compiler.pipelines.compile import StepLimits, compile_wizard
from compiler.pipelines.spec import parameter_value
from compiler.pipelines.stamping import stamp, with_tracking_credentials
from compiler.pipelines.yamldoc import parse_template_yaml
from compiler.tracking import accounts as tracking
from shared import labels as L
from shared import schedules
from shared.errors import Invalid
from shared.pipelines import (
    GitDefinition,
    ParameterValue,
    PipelineBody,
    PipelineKind,
    WebhookTrigger,
    WizardDefinition,
    YamlDefinition,
    check_kind,
)
from shared.validation import invalid_fields


@dataclass(frozen=True, slots=True)
class Limits:
    """What the settings fix for every render."""

    data: StepLimits
    ml: StepLimits
    artifact_bucket: str
    templates_kept: int = 10
    schedule_min_interval: float = 300.0
    # Experiment tracking is configured: ML pipelines' containers get the MLflow account.
    tracking: bool = False

    def step_limits(self, kind: PipelineKind) -> StepLimits:
        return self.ml if kind == L.PIPELINE_KIND_ML else self.data


@dataclass(frozen=True, slots=True)
class Target:
    """Where and as what a version is rendered."""

    tenant: str
    pipeline_id: str
    version: int
    kind: PipelineKind
    limits: StepLimits
    artifact_bucket: str
    # The tenant's data secrets (created through ``/data-secrets``), the only Secrets a template
    # may reference; the service reads them from the tenant's namespace.
    data_secrets: frozenset[str] = frozenset()
    # A schedule may not fire more often than this (SCHEDULE_MIN_INTERVAL); its zone's
    # daylight-saving transitions are looked at from this year on.
    schedule_min_interval: float = 300.0
    year: int = 2026
    # Experiment tracking is configured: an ML pipeline's containers get the tenant's MLflow
    # account and their experiment's name, after the allowlist (``compiler.tracking``).
    tracking: bool = False

    @property
    def namespace(self) -> str:
        return f"{L.DATA_NAMESPACE_PREFIX}{self.tenant}"


@dataclass(frozen=True, slots=True)
class Fetched:
    """A Git definition's document, as read at ``commit`` of its branch (``blob``: the
    document's Git object id, the same for the same content)."""

    commit: str
    text: str
    blob: str | None = None


@dataclass(frozen=True, slots=True)
class Rendered:
    template: dict[str, Any]  # stamped and checked
    parameters: list[dict[str, Any]]  # declared: name, default?, description?, type?, enum?
    warnings: list[str]
    stages: list[str]  # the ML control stages the template contains (shared.stages)


def render(body: PipelineBody, target: Target, *, fetched: Fetched | None = None) -> Rendered:
    """The stamped, checked template of ``body`` (of ``fetched``, the document its Git
    definition was read as); Invalid (400) or Refused (422) otherwise."""
    check_kind(body, target.kind)
    if body.schedule is not None:  # before the template: a wrong schedule is a 400, not a 422
        schedules.check(
            body.schedule.cron,
            body.schedule.timezone,
            min_interval=target.schedule_min_interval,
            from_year=target.year,
        )
    definition = body.definition
    warnings: list[str] = []
    types: dict[str, str] = {}
    if isinstance(definition, WizardDefinition):
        document = compile_wizard(
            definition.spec,
            tenant=target.tenant,
            pipeline_id=target.pipeline_id,
            version=target.version,
            kind=target.kind,
            limits=target.limits,
        )
        for parameter in definition.spec.get("parameters") or []:
            if isinstance(parameter, Mapping) and isinstance(parameter.get("name"), str):
                types[parameter["name"]] = str(parameter.get("type") or "string")
    elif isinstance(definition, YamlDefinition):
        document = parse_template_yaml(definition.template)
        warnings += _overridden(document)
    else:
        assert isinstance(definition, GitDefinition)
        if fetched is None:  # the service reads the document before it renders
            raise Invalid(
                "definition: a Git definition is rendered from the document read at a commit",
                details={"errors": [{"field": "definition", "message": "nothing was read"}]},
            )
        document = parse_template_yaml(fetched.text)
        warnings += _overridden(document)
    _set_defaults(document, body.parameters)
    stamped = stamp(
        document,
        tenant=target.tenant,
        namespace=target.namespace,
        pipeline_id=target.pipeline_id,
        version=target.version,
        kind=target.kind,
    )
    violations = _kind_violations(stamped)
    violations += allowlist.check(
        stamped,
        namespace=target.namespace,
        tenant=target.tenant,
        artifact_bucket=target.artifact_bucket,
        kind=target.kind,
        limits=target.limits,
        data_secrets=target.data_secrets,
    )
    if body.release is not None:
        violations += release.violations(stamped)
    if not violations:  # a refused document is not worth a schema opinion
        if body.release is not None:
            release.check_release(body.release, stamped)
            release.append_stages(stamped, body.release)
        if target.tracking and target.kind == L.PIPELINE_KIND_ML:
            stamped = with_tracking_credentials(
                stamped,
                secret=tracking.SECRET_NAME,
                experiment=tracking.experiment_name(target.tenant, target.pipeline_id),
            )
        violations += argo_schema.schema_violations(stamped)
    allowlist.raise_if_refused(violations)
    declared = declared_parameters(stamped, types)
    _check_trigger_parameters(body.triggers or [], declared)
    _check_channel_secrets(body, target.data_secrets)
    return Rendered(stamped, declared, warnings, release.stages_of(stamped))


def _check_channel_secrets(body: PipelineBody, data_secrets: frozenset[str]) -> None:
    """A notification channel names one of the tenant's data secrets, as a template's Secret
    reference must: a channel naming anything else would fail every delivery, found out only
    when a run fails."""
    errors = [
        {
            "field": f"notifications[{index}].secret",
            "message": f"{channel.secret!r} is not one of the tenant's data secrets",
        }
        for index, channel in enumerate(body.notifications)
        if channel.secret not in data_secrets
    ]
    if errors:
        raise invalid_fields("the pipeline's notifications are invalid", errors)


def _check_trigger_parameters(
    triggers: Sequence[WebhookTrigger], declared: Sequence[Mapping[str, Any]]
) -> None:
    """Event fields map onto declared parameters only, and every parameter without a default is
    mapped: an event can then never start a run Argo would refuse for a missing value. (Values
    arrive as text: a declared type or enum is Argo's to enforce when the run starts.)"""
    by_name = {str(item["name"]): item for item in declared}
    errors = []
    for index, trigger in enumerate(triggers):
        where = f"triggers[{index}].parameters"
        for name in trigger.parameters:
            if name not in by_name:
                errors.append(
                    {"field": f"{where}.{name}", "message": "not declared by the pipeline"}
                )
        for name, item in by_name.items():
            if "default" not in item and name not in trigger.parameters:
                errors.append(
                    {"field": f"{where}.{name}", "message": "required (no default): map it"}
                )
    if errors:
        raise invalid_fields("the pipeline's triggers are invalid", errors)


def _kind_violations(document: Mapping[str, Any]) -> list[allowlist.Violation]:
    found = []
    if document.get("apiVersion") != "argoproj.io/v1alpha1":
        found.append(allowlist.Violation("apiVersion", "kind", "expected argoproj.io/v1alpha1"))
    if document.get("kind") != "WorkflowTemplate":
        found.append(allowlist.Violation("kind", "kind", "a pipeline is a WorkflowTemplate"))
    return found


def _overridden(document: Mapping[str, Any]) -> list[str]:
    """Warnings for what the tenant wrote that stamping replaces."""
    warnings = []
    metadata = document.get("metadata")
    if isinstance(metadata, Mapping):
        for key in ("name", "generateName", "namespace"):
            if key in metadata:
                warnings.append(f"metadata.{key} is set by workflow-manager; yours is ignored")
    spec = document.get("spec")
    if isinstance(spec, Mapping):
        for key in ("serviceAccountName", "executor"):
            if key in spec:
                warnings.append(f"spec.{key} is set by workflow-manager; yours is ignored")
    return warnings


def _declared(document: Mapping[str, Any]) -> list[Any]:
    spec = document.get("spec")
    arguments = spec.get("arguments") if isinstance(spec, Mapping) else None
    parameters = arguments.get("parameters") if isinstance(arguments, Mapping) else None
    return parameters if isinstance(parameters, list) else []


def _set_defaults(document: dict[str, Any], defaults: Mapping[str, ParameterValue]) -> None:
    if not defaults:
        return
    by_name = {entry.get("name"): entry for entry in _declared(document) if isinstance(entry, dict)}
    unknown = sorted(set(defaults) - set(by_name))
    if unknown:
        raise Invalid(
            f"parameters.{unknown[0]}: the pipeline declares no such parameter",
            details={
                "errors": [
                    {"field": f"parameters.{name}", "message": "not declared by the pipeline"}
                    for name in unknown
                ]
            },
        )
    for name, value in defaults.items():
        by_name[name]["value"] = parameter_value(value)


def declared_parameters(
    document: Mapping[str, Any], types: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The parameters a run may set: name, default (absent: required), description, enum."""
    declared = []
    for entry in _declared(document):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        item: dict[str, Any] = {"name": entry["name"]}
        if "value" in entry:
            item["default"] = str(entry["value"])
        if isinstance(entry.get("description"), str):
            item["description"] = entry["description"]
        if isinstance(entry.get("enum"), list):
            item["enum"] = [str(value) for value in entry["enum"]]
        if types and entry["name"] in types:
            item["type"] = types[entry["name"]]
        declared.append(item)
    return declared


_TYPE_CHECKS: Final = {
    "integer": re.compile(r"^[+-]?\d+$"),
    "number": re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$"),
    "boolean": re.compile(r"^(true|false)$"),
}


def run_arguments(
    declared: Sequence[Mapping[str, Any]], overrides: Mapping[str, Any]
) -> list[dict[str, str]]:
    """The ``arguments.parameters`` of a run: overrides checked against the declaration.

    Unknown names, wrong types, values outside an enum and required parameters left unset are
    each reported (400), all at once.
    """
    by_name = {str(item["name"]): item for item in declared}
    errors = []
    for name in sorted(set(overrides) - set(by_name)):
        errors.append({"field": f"parameters.{name}", "message": "not declared by the pipeline"})
    arguments = []
    for name, item in by_name.items():
        if name in overrides:
            raw = overrides[name]
            if raw is None or isinstance(raw, dict | list):
                errors.append({"field": f"parameters.{name}", "message": "expected a value"})
                continue
            value = parameter_value(raw)
        elif "default" in item:
            continue  # the template's default applies
        else:
            errors.append({"field": f"parameters.{name}", "message": "required: no default"})
            continue
        check = _TYPE_CHECKS.get(str(item.get("type") or "string"))
        if check is not None and not check.match(value):
            message = f"expected {'a' if item['type'] != 'integer' else 'an'} {item['type']}"
            errors.append({"field": f"parameters.{name}", "message": message})
        elif item.get("enum") and value not in item["enum"]:
            allowed = ", ".join(item["enum"])
            errors.append({"field": f"parameters.{name}", "message": f"expected one of {allowed}"})
        else:
            arguments.append({"name": name, "value": value})
    if errors:
        raise invalid_fields("the run's parameters are invalid", errors)
    return arguments
