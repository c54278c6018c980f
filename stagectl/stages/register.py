"""The register stage: a run's model and scorecard copied into the registry under a new,
immutable version number, with its lineage beside them.

Order of work, and why each step is safe to repeat after a crash at any point:

1. check what the run produced: the model artifact and the scorecard must be output artifacts
   of the steps the release names, in ARTIFACT_BUCKET under the tenant's own ``artifacts/``
   prefix, with keys that name their objects as written (``outcomes.artifact_refusal``: the
   keys come from a status the tenant can shape, and must never reach another tenant's objects
   or a registered version), and the scorecard must be a JSON object. Anything missing or
   malformed fails the stage with a message the tenant can act on, before any number is taken.
   What was checked is kept: the scorecard's bytes (and their SHA-256), both files' ETags;
2. allocate the version (``RegistryStore.allocate_version``, under the model's row lock): the
   run's existing version when there is one, so a repeated stage never takes a second number
   (one an earlier attempt of the run abandoned is ``registering`` again);
3. copy the model and the scorecard into ``tenants/<t>/models/<model>/<n>/`` (server-side,
   idempotent), each only from the object checked in 1: the copy is conditional on the ETag
   read (``CopySourceIfMatch``), and the registered scorecard's SHA-256 must be that of the
   bytes parsed (which also catches storage that ignores the condition). The model's digest
   is the SHA-256 of the bytes registered, computed by storage as it copied. Then
   ``lineage.json``, digest included;
4. in one transaction: the version becomes ``registered`` with its scorecard, lineage and
   digest, and the stage's outcome (``version: <n>``) is recorded. That insert is the commit
   point: from then on the stage is done and only its node remains to be completed.

A file the tenant wrote again between 1 and 3 fails the attempt: the version's files are
removed, it is ``abandoned``, and the message asks for a retry of the run, whose new attempt
checks and registers again under the same number. It is never checked again within the
attempt: the bytes now there were written after the run's steps finished, by something other
than the run the lineage names, and the registry holds only what a stage checked.

A crash before 4 leaves a version ``registering`` with some files: the stage, done again, finds
same version and copies again; a run that ends first leaves it to the cleanup stage, which
removes the files and marks the version ``abandoned`` (its number is never given to another
run).
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from typing import Any

import asyncpg

from shared import stages as S
from shared import storage
from shared.db.registry import VersionChange, VersionRow
from shared.db.registry_store import RegistryStore
from shared.errors import Conflict, NotFound
from stagectl.outcomes import (
    DIGEST_PREFIX,
    LINEAGE_FILE,
    MAX_SCORECARD_BYTES,
    SCORECARD_FILE,
    Outcome,
    ScorecardError,
    artifact_refusal,
    commit_of,
    lineage,
    parse_scorecard,
)
from stagectl.s3_registry import RegistryObjects, Stored
from stagectl.stages.context import ReleaseRun, record
from stagectl.workflow import (
    MLFLOW_RUN_LABEL,
    MLFLOW_RUN_PARAMETER,
    Artifact,
    output_artifact,
    output_parameter,
    step_node,
)


class Refused(Exception):
    """The run's own output cannot be registered: the message is for the tenant."""


def _reference(release: ReleaseRun, field: str) -> tuple[str, str]:
    ref = release.release.model_artifact if field == "model_artifact" else release.release.scorecard
    return ref.step, ref.artifact


def _what(release: ReleaseRun, field: str, noun: str) -> str:
    """The file ``field`` names, for the tenant: its step and artifact."""
    step, name = _reference(release, field)
    return f"the {noun} (artifact {name!r} of step {step!r})"


def _located(release: ReleaseRun, field: str, *, bucket: str) -> Artifact:
    """Where the artifact ``field`` names was stored; Refused with what to fix otherwise."""
    step, name = _reference(release, field)
    node = step_node(release.workflow, step)
    if node is None:
        raise Refused(f"the run has no step {step!r} (release.{field}.step)")
    artifact = output_artifact(node, name)
    if artifact is None:
        raise Refused(
            f"step {step!r} recorded no output artifact {name!r} (release.{field}): "
            "did the step succeed and write it?"
        )
    refusal = artifact_refusal(
        artifact.key,
        stored_in=artifact.bucket or release.run.repository_bucket or bucket,
        bucket=bucket,
        tenant=release.tenant,
        what=f"artifact {name!r} of step {step!r}",
    )
    if refusal is not None:
        raise Refused(refusal)
    return artifact


def _model_file(key: str) -> str:
    name = posixpath.basename(key) or "model"
    return f"model-{name}" if name in (SCORECARD_FILE, LINEAGE_FILE) else name


def version_prefix(tenant: str, model: str, number: int) -> str:
    return f"{storage.tenant_models(tenant)}{model}/{number}/"


async def register(release: ReleaseRun, *, pool: asyncpg.Pool, objects: RegistryObjects) -> Outcome:
    """Do the register stage's work up to and including its commit point; the recorded
    outcome (a refusal is recorded too: the run's output will not change)."""
    where = _what(release, "scorecard", "scorecard")
    try:
        model_artifact = _located(release, "model_artifact", bucket=objects.bucket)
        scorecard_artifact = _located(release, "scorecard", bucket=objects.bucket)
        checked = await _check(
            release, model_artifact, scorecard_artifact, objects=objects, where=where
        )
    except (Refused, ScorecardError) as exc:
        return await _record(pool, release, Outcome.failed(S.REGISTER, str(exc)))

    async with RegistryStore.transaction(pool) as store:
        model = await store.lock_model(release.tenant, release.model)
        version = await store.allocate_version(
            model,
            release.ref,
            pipeline_id=release.pipeline_id,
            pipeline_version=release.pipeline_version,
            prefix_of=lambda number: version_prefix(release.tenant, release.model, number),
            model_file=_model_file(model_artifact.key),
        )
    try:
        digest = await _copied(
            release, version, model_artifact, scorecard_artifact, checked, objects=objects
        )
    except Refused as exc:
        await objects.delete_prefix(version.prefix)
        abandon = VersionChange(
            version.model_id, version.number, state="abandoned", only_from=("registering",)
        )
        return await _record(pool, release, Outcome.failed(S.REGISTER, str(exc)), abandon)
    doc = _lineage(release, version.number, model_artifact, scorecard_artifact, digest=digest)
    await objects.put_json(version.prefix + LINEAGE_FILE, doc)

    finish = VersionChange(
        version.model_id,
        version.number,
        state="registered",
        only_from=("registering",),
        scorecard=checked.parsed,
        lineage=doc,
        digest=digest,
    )
    outcome = Outcome(
        "Succeeded",
        {S.VERSION: str(version.number)},
        f"registered {release.model} version {version.number}",
    )
    return await _record(pool, release, outcome, finish)


@dataclass(frozen=True, slots=True)
class _Checked:
    parsed: dict[str, Any]  # the scorecard
    scorecard_sha256: str  # of the bytes parsed
    scorecard: Stored
    model: Stored


async def _check(
    release: ReleaseRun,
    model_artifact: Artifact,
    scorecard_artifact: Artifact,
    *,
    objects: RegistryObjects,
    where: str,
) -> _Checked:
    """Refused (or ScorecardError) unless both artifacts are there and the scorecard is one."""
    try:
        data, scorecard = await objects.read(scorecard_artifact.key, limit=MAX_SCORECARD_BYTES)
    except NotFound:
        raise Refused(f"{where} is not in object storage: write {SCORECARD_FILE} to it") from None
    parsed = parse_scorecard(data, where=where)
    try:
        model = await objects.head(model_artifact.key)
    except NotFound:
        raise Refused(
            f"{_what(release, 'model_artifact', 'model')} is not in object storage"
        ) from None
    return _Checked(parsed, hashlib.sha256(data).hexdigest(), scorecard, model)


def _written_again(what: str) -> str:
    return (
        f"{what} was written again after it was checked, while it was being registered; "
        "nothing was registered. Let nothing write the run's artifacts once its steps have "
        "finished, then retry the run"
    )


async def _copied(
    release: ReleaseRun,
    version: VersionRow,
    model_artifact: Artifact,
    scorecard_artifact: Artifact,
    checked: _Checked,
    *,
    objects: RegistryObjects,
) -> str:
    """Copy the model and the scorecard checked into the version's prefix, each only from
    the object checked; the model's digest (``sha256:<hex>`` of the bytes registered). Refused
    when the tenant wrote either again since it was checked."""
    model_file = version.prefix + version.model_file
    scorecard_file = version.prefix + SCORECARD_FILE
    try:
        model = await objects.copy(model_artifact.key, model_file, checked=checked.model)
    except Conflict:
        raise Refused(_written_again(_what(release, "model_artifact", "model"))) from None
    scorecard_what = _what(release, "scorecard", "scorecard")
    try:
        scorecard = await objects.copy(
            scorecard_artifact.key, scorecard_file, checked=checked.scorecard
        )
    except Conflict:
        raise Refused(_written_again(scorecard_what)) from None
    # Storage that ignores the copy's condition copies a newer scorecard; its digest tells
    # (and so does a collision of ETags, which are MD5s).
    registered = scorecard.sha256 or await objects.sha256(scorecard_file)
    if registered != checked.scorecard_sha256:
        raise Refused(_written_again(scorecard_what))
    return DIGEST_PREFIX + (model.sha256 or await objects.sha256(model_file))


def _lineage(
    release: ReleaseRun,
    number: int,
    model_artifact: Artifact,
    scorecard_artifact: Artifact,
    *,
    digest: str,
) -> dict[str, Any]:
    model_node = step_node(release.workflow, _reference(release, "model_artifact")[0]) or {}
    return lineage(
        release.run,
        cluster_id=release.ref.cluster,
        tenant=release.tenant,
        model=release.model,
        version=number,
        pipeline_id=release.pipeline_id,
        pipeline_version=release.pipeline_version,
        commit=commit_of(release.definition, release.version_settings),
        model_source=model_artifact.key,
        scorecard_source=scorecard_artifact.key,
        digest=digest,
        mlflow_run_id=output_parameter(model_node, MLFLOW_RUN_PARAMETER)
        or release.run.labels.get(MLFLOW_RUN_LABEL)
        or release.run.parameters.get(MLFLOW_RUN_PARAMETER),
    )


async def _record(
    pool: asyncpg.Pool, release: ReleaseRun, outcome: Outcome, change: VersionChange | None = None
) -> Outcome:
    return await record(pool, release, S.REGISTER, outcome, change)
