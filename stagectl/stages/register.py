"""The register stage: a run's model and scorecard copied into the registry under a new,
immutable version number, with its lineage beside them.

Order of work, and why each step is safe to repeat after a crash at any point:

1. check what the run produced: the model artifact and the scorecard must be output artifacts
   of the steps the release names, under the tenant's own prefix of ARTIFACT_BUCKET (never
   anyone else's: the keys come from a status the tenant's steps influence), and the scorecard
   must be a JSON object. Anything missing or malformed fails the stage with a message the
   tenant can act on, before any number is taken;
2. allocate the version (``RegistryStore.allocate_version``, under the model's row lock): the
   run's existing version when there is one, so a repeated stage never takes a second number;
3. copy the model and the scorecard into ``tenants/<t>/models/<model>/<n>/`` (server-side,
   idempotent) and write ``lineage.json``. The registry's copy is the truth the gate judges,
   whatever the tenant's prefix holds later: when the copy's ETag is not the one read in 1 (the
   tenant wrote the file again meanwhile), the registered scorecard is read back and checked;
4. in one transaction: the version becomes ``registered`` with its scorecard and lineage, and
   the stage's outcome (``version: <n>``) is recorded. That insert is the commit point: from
   then on the stage is done and only its node remains to be completed.

A crash before 4 leaves a version ``registering`` with some files: the next attempt finds the
same version and copies again; a run that ends first leaves it to the cleanup stage, which
removes the files and marks the version ``abandoned`` (its number is never reused).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

import asyncpg

from shared import stages as S
from shared import storage
from shared.db.registry import VersionChange
from shared.db.registry_store import RegistryStore
from shared.errors import NotFound
from stagectl.outcomes import (
    LINEAGE_FILE,
    MAX_SCORECARD_BYTES,
    SCORECARD_FILE,
    Outcome,
    ScorecardError,
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
    where = artifact.bucket or release.run.repository_bucket or bucket
    own = storage.tenant_prefix(release.tenant)
    key = artifact.key
    if where != bucket or not key.startswith(own) or posixpath.normpath(key) != key:
        raise Refused(
            f"artifact {name!r} of step {step!r} is stored outside the tenant's artifact "
            "storage; a release registers only what the run wrote there"
        )
    return artifact


def _model_file(key: str) -> str:
    name = posixpath.basename(key) or "model"
    return f"model-{name}" if name in (SCORECARD_FILE, LINEAGE_FILE) else name


def version_prefix(tenant: str, model: str, number: int) -> str:
    return f"{storage.tenant_models(tenant)}{model}/{number}/"


async def register(release: ReleaseRun, *, pool: asyncpg.Pool, objects: RegistryObjects) -> Outcome:
    """Do the register stage's work up to and including its commit point; the recorded
    outcome (a refusal is recorded too: the run's output will not change)."""
    step, name = _reference(release, "scorecard")
    where = f"the scorecard (artifact {name!r} of step {step!r})"
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
    prefix = version.prefix
    await objects.copy(model_artifact.key, prefix + version.model_file, size=checked.model.size)
    copied = await objects.copy(
        scorecard_artifact.key, prefix + SCORECARD_FILE, size=checked.scorecard.size
    )
    scorecard = checked.parsed
    if copied != checked.scorecard.etag:
        # The tenant's file changed since it was checked: judge what the registry holds.
        registered, _ = await objects.read(prefix + SCORECARD_FILE, limit=MAX_SCORECARD_BYTES)
        try:
            scorecard = parse_scorecard(registered, where=where)
        except ScorecardError as exc:
            await objects.delete_prefix(prefix)
            abandon = VersionChange(
                version.model_id, version.number, state="abandoned", only_from=("registering",)
            )
            return await _record(pool, release, Outcome.failed(S.REGISTER, str(exc)), abandon)
    doc = _lineage(release, version.number, model_artifact, scorecard_artifact)
    await objects.put_json(prefix + LINEAGE_FILE, doc)

    finish = VersionChange(
        version.model_id,
        version.number,
        state="registered",
        only_from=("registering",),
        scorecard=scorecard,
        lineage=doc,
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
        step, name = _reference(release, "model_artifact")
        raise Refused(
            f"the model (artifact {name!r} of step {step!r}) is not in object storage"
        ) from None
    return _Checked(parsed, scorecard, model)


def _lineage(
    release: ReleaseRun, number: int, model_artifact: Artifact, scorecard_artifact: Artifact
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
        mlflow_run_id=output_parameter(model_node, MLFLOW_RUN_PARAMETER)
        or release.run.labels.get(MLFLOW_RUN_LABEL)
        or release.run.parameters.get(MLFLOW_RUN_PARAMETER),
    )


async def _record(
    pool: asyncpg.Pool, release: ReleaseRun, outcome: Outcome, change: VersionChange | None = None
) -> Outcome:
    return await record(pool, release, S.REGISTER, outcome, change)
