"""The stage controller's decisions that need no I/O: a stage's outcome and how it is stored, a
scorecard read from a tenant's bytes, a version's lineage, and how a release ended.

Purely computational, no side effects, no clock. ``stagectl.work`` and ``stagectl.stages`` do
the I/O around them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from shared import stages as S
from shared import storage
from stagectl.workflow import RunFacts

SCORECARD_FILE: Final = "eval_scorecard.json"
LINEAGE_FILE: Final = "lineage.json"
MAX_SCORECARD_BYTES: Final = 1024 * 1024
DIGEST_PREFIX: Final = "sha256:"  # a registered model's digest: sha256:<hex> of its bytes
Phase = Literal["Succeeded", "Failed"]

# How a release ended (model_versions.release_outcome, the cleanup stage's ``outcome``).
COMPLETED: Final = "completed"  # every stage the version has passed
GATE_FAILED: Final = "gate_failed"
REJECTED: Final = "rejected"
EXPIRED: Final = "expired"
STOPPED: Final = "stopped"  # someone stopped or terminated the run
DELETED: Final = "deleted"  # the workflow was deleted before its release ended
FAILED: Final = "failed"  # the run's own work (or a stage) failed
ABANDONED: Final = "abandoned"  # registration began and never finished: its files are removed
NOT_REGISTERED: Final = "not_registered"  # the run ended before any version was allocated
_SHOWN_KEY: Final = 200  # characters of an artifact's key a refusal repeats
EXPIRED_REASON: Final = "expired"
RUN_ENDED_REASON: Final = "the run ended before a decision"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a stage's node is completed with: its phase, output parameters and message."""

    phase: Phase
    outputs: dict[str, str] = field(default_factory=dict)
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "outputs": dict(self.outputs), "message": self.message}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Outcome:
        phase: Phase = "Failed" if doc.get("phase") == "Failed" else "Succeeded"
        outputs = doc.get("outputs")
        return cls(
            phase=phase,
            outputs={str(k): str(v) for k, v in outputs.items()}
            if isinstance(outputs, Mapping)
            else {},
            message=str(doc.get("message") or ""),
        )

    @classmethod
    def failed(cls, stage: str, message: str) -> Outcome:
        """A failed stage: its outputs still set (Argo refuses to leave supplied ones unset
        when the workflow goes on), with values that say nothing happened."""
        empty = {name: "" for name in S.OUTPUTS.get(stage, ())}
        if stage == S.GATE:
            empty = {S.VERDICT: S.VERDICT_FAILED, S.REASONS: json.dumps([message])}
        elif stage == S.APPROVAL:
            empty = {S.DECISION: S.DECISION_REJECTED}
        return cls(phase="Failed", outputs=empty, message=message)


@dataclass(frozen=True, slots=True)
class Later:
    """A long stage not done yet: its progress (``step`` and ``state``, stored in
    ``stage_progress`` so a restart or a new leader continues from it) and when to look
    again."""

    step: str
    state: dict[str, Any] = field(default_factory=dict)
    seconds: float = 1.0


class ScorecardError(ValueError):
    """The scorecard cannot be registered; the message tells the tenant what to fix."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is too large")
    return value


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _nul_free(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, Mapping):
        return all(_nul_free(k) and _nul_free(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_nul_free(v) for v in value)
    return True


def parse_scorecard(data: bytes, *, where: str) -> dict[str, Any]:
    """The scorecard in ``data`` (``where`` names it for the tenant: the step and artifact):
    a JSON object of at most ``MAX_SCORECARD_BYTES``. ScorecardError says what is wrong."""
    if len(data) > MAX_SCORECARD_BYTES:
        raise ScorecardError(
            f"{where} is {len(data)} bytes; a scorecard is at most {MAX_SCORECARD_BYTES} bytes"
        )
    try:
        doc = json.loads(data.decode("utf-8"), parse_float=_finite, parse_constant=_refuse_constant)
    except UnicodeDecodeError as exc:
        raise ScorecardError(f"{where} is not UTF-8 text") from exc
    except (ValueError, RecursionError) as exc:
        raise ScorecardError(
            f"{where} is not valid JSON ({str(exc)[:200]}): write a JSON object such as "
            '{"auc": 0.91}'
        ) from exc
    if not isinstance(doc, dict):
        raise ScorecardError(
            f'{where} is not a JSON object: write one such as {{"auc": 0.91}} '
            '(or {"metrics": {"auc": 0.91}})'
        )
    if not _nul_free(doc):
        raise ScorecardError(f"{where} contains a NUL character")
    return doc


def artifact_refusal(
    key: str, *, stored_in: str, bucket: str, tenant: str, what: str
) -> str | None:
    """Why the register stage will not copy the artifact at ``key`` of bucket ``stored_in``
    into the registry (None: it will). ``what`` names it for the tenant (its step and artifact).
    Only what the run wrote to its own artifact repository is registered: ``bucket``
    (ARTIFACT_BUCKET), under ``tenants/<tenant>/artifacts/``, with a key that names its object
    as written (``storage.is_tenant_artifact``). The location comes from the workflow's status,
    which the tenant can shape: anything else could copy another tenant's object, or a
    registered version, into this tenant's registry."""
    if stored_in != bucket:
        return (
            f"{what} is stored in bucket {stored_in[:_SHOWN_KEY]!r}, not in the platform's "
            "artifact bucket: a release registers only what the run wrote to its artifact "
            "repository (give the artifact no bucket of its own)"
        )
    if storage.is_tenant_artifact(tenant, key):
        return None
    shown = key if len(key) <= _SHOWN_KEY else key[:_SHOWN_KEY] + "..."
    artifacts = storage.tenant_artifacts(tenant)
    if key.startswith(artifacts):
        return (
            f"{what} has the key {shown!r}, with an empty, '.' or '..' segment: a release "
            "registers only a key that names its object as written"
        )
    if key.startswith(storage.tenant_models(tenant)):
        return (
            f"{what} is stored at {shown!r}, in the model registry, which only the register "
            "stage writes: a release registers what its run produced, not a registered version"
        )
    return (
        f"{what} is stored at {shown!r}, outside the tenant's artifacts ({artifacts}): a "
        "release registers only what the run wrote to its artifact repository, under the key "
        "Argo gives it (do not set the artifact's key)"
    )


def lineage(
    run: RunFacts,
    *,
    cluster_id: str,
    tenant: str,
    model: str,
    version: int,
    pipeline_id: str,
    pipeline_version: int,
    commit: str | None,
    model_source: str,
    scorecard_source: str,
    digest: str,
    mlflow_run_id: str | None,
) -> dict[str, Any]:
    """``lineage.json``: where a version came from, for a person and for an audit, and the
    model's ``digest`` (``sha256:<hex>`` of the bytes registered)."""
    return {
        "model": model,
        "version": version,
        "tenant": tenant,
        "run": {
            "cluster": cluster_id,
            "namespace": run.namespace,
            "name": run.name,
            "uid": run.uid,
            "started_by": run.creator,
        },
        "pipeline": {"id": pipeline_id, "version": pipeline_version, "commit": commit},
        "parameters": dict(sorted(run.parameters.items())),
        "input_artifacts": list(run.input_artifacts),
        "sources": {"model": model_source, "scorecard": scorecard_source},
        "digest": digest,
        "mlflow_run_id": mlflow_run_id,
    }


def commit_of(definition: Mapping[str, Any], settings: Mapping[str, Any]) -> str | None:
    """The Git commit a version was built from, when its definition or settings record one."""
    for doc in (definition, settings):
        value = doc.get("commit")
        if isinstance(value, str) and value:
            return value
    return None


def release_ending(
    *,
    version_state: str | None,
    root_phase: str | None,
    shutdown: str | None,
    deleted: bool = False,
) -> str:
    """How a run's release ended, as its cleanup stage records it: from the state its version
    reached (None: no version was allocated), whether someone stopped or deleted the run, and
    how the run's own work ended (the root node's phase)."""
    if version_state is None:
        return DELETED if deleted else STOPPED if shutdown else NOT_REGISTERED
    if version_state in ("registering", "abandoned"):
        return ABANDONED
    if deleted and version_state not in ("failed", REJECTED, EXPIRED):
        return DELETED
    if version_state == "failed":
        return GATE_FAILED
    if version_state in (REJECTED, EXPIRED):
        return version_state
    if shutdown:
        return STOPPED
    if root_phase != "Succeeded":
        return FAILED
    return COMPLETED


def approval_outcome(state: str, reason: str | None) -> Outcome | None:
    """The approval stage's outcome for a decision (None while pending). The node succeeds
    either way: ``decision`` says which, so the stages after it can depend on it."""
    if state == "pending":
        return None
    if state == "approved":
        return Outcome("Succeeded", {S.DECISION: S.DECISION_APPROVED}, reason or "")
    message = reason or ("expired" if state == EXPIRED else "rejected")
    return Outcome("Succeeded", {S.DECISION: S.DECISION_REJECTED}, message)
