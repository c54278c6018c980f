"""Saving, versioning, rolling back, deleting and running pipelines (the compiler's service).

Save = render → check → lint → apply the WorkflowTemplate → record the version, in that order
and inside one transaction that holds the pipeline's row lock: a version row is only written
once its template is on the cluster, so no version ever names a template that was never applied.
If the commit fails after the apply, the template is orphaned under a version number nobody
recorded; the next save of that pipeline takes the same number and replaces it.

Each version has its own template (``p-<id>-v<N>``), so runs of recent versions can still be
retried after newer saves. Once each save is recorded the templates of all but the newest
``PIPELINE_TEMPLATES_KEPT`` versions are deleted (the current one always stays; a save that
fails collects nothing); a rollback applies its version's recorded document again whenever the
template is not on the cluster.

What a pipeline owns besides its templates (a CronWorkflow for its schedule, event sources and
sensors for its triggers, ...) are its *attachments*: each follows the current version. Inside
the same transaction, after the template is applied and the version recorded, every attachment
is given the version that is now current (``attach``: create, update, rollback); delete removes
them first (``detach``). All or nothing: when an attachment fails, or anything after it (the
commit included), the operation fails, no version is recorded, and every attachment it touched
is put back to the version PostgreSQL records as current (none for a create, whose template
goes too): ``compiler.pipelines.attaching``. So nothing on the cluster ever points at a version
that was not recorded.

A template may refer to the tenant's data secrets and no other Secret (the allowlist's
``data_secrets``): a save, a validate and a rollback read their names from the tenant's namespace
(``DataSecrets``, ``compiler.secrets.service``). Saves and rollbacks read them inside the
transaction under the tenant's shared data-secrets lock, which a data secret's delete takes
exclusively to check that no current version refers to it; so a version is never recorded
referring to a secret deleted meanwhile, and a rollback to a version referring to a data
secret that no longer exists is refused (409).
A Git definition is read before it is rendered (``GitReader``: its branch's head, the document
at ``path``), and then takes the YAML path. Its pipeline follows the branch: the body of the last
save is kept (``git_sources``), and ``sync`` renders it again with the document of a newer commit,
through the same steps as ``update``, recording the commit on the version. The poller and the
sync route decide when (``compiler.gitsync``); a save never happens anywhere else.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg

from compiler.pipelines import definitions
from compiler.pipelines.attaching import (
    ARGO_API_VERSION,
    TEMPLATE_KIND,
    Attaching,
    all_or_nothing,
    current_of,
)
from compiler.pipelines.definitions import Fetched, Limits, Rendered, Target
from compiler.pipelines.ports import (
    Attachment,
    Caller,
    DataSecrets,
    GitReader,
    Lint,
    Objects,
    Tenants,
)
from compiler.pipelines.stamping import run_manifest, template_name
from compiler.secrets import references, rules
from shared import labels as L
from shared.db.audit import record_action
from shared.db.pipelines import PipelineRow, PipelineStore, VersionRow
from shared.errors import (
    Conflict,
    DependencyDown,
    Invalid,
    NotFound,
    Refused,
    WorkflowManagerError,
)
from shared.logging import get_logger
from shared.pipelines import GitDefinition, PipelineBody, PipelineKind, parse_body

log = get_logger(__name__)


def new_pipeline_id() -> str:
    """Short, DNS-safe and unguessable enough that ids never collide in practice."""
    return uuid.uuid4().hex[:16]


class PipelineService:
    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        objects: Objects,
        tenants: Tenants,
        lint: Lint | None,
        limits: Limits,
        instance_id: str,
        attachments: Sequence[Attachment] = (),
        data_secrets: DataSecrets | None = None,
        git: GitReader | None = None,
    ) -> None:
        self._pool = pool
        self._git = git
        self._objects = objects
        self._tenants = tenants
        self._lint = lint
        self._limits = limits
        self._instance_id = instance_id  # the data controller's (ARGO_DATA_INSTANCE_ID)
        self._attachments = tuple(attachments)
        self._data_secrets = data_secrets  # None: no tenant has any (a template names none)

    # --- rendering ---------------------------------------------------------------------------
    async def _secrets(self, tenant: str, store: PipelineStore | None) -> frozenset[str]:
        """The tenant's data secrets; with ``store``, held (shared lock) until its transaction
        ends."""
        if self._data_secrets is None:
            return frozenset()
        if store is not None:
            await store.guard_data_secrets(tenant, exclusive=False)
        return await self._data_secrets.names(tenant)

    def _target(
        self,
        caller: Caller,
        kind: PipelineKind,
        pipeline_id: str,
        version: int,
        data_secrets: frozenset[str],
    ) -> Target:
        return Target(
            tenant=caller.tenant,
            pipeline_id=pipeline_id,
            version=version,
            kind=kind,
            limits=self._limits.step_limits(kind),
            artifact_bucket=self._limits.artifact_bucket,
            data_secrets=data_secrets,
            schedule_min_interval=self._limits.schedule_min_interval,
            year=datetime.now(UTC).year,
            tracking=self._limits.tracking,
        )

    async def _read(self, caller: Caller, body: PipelineBody) -> Fetched | None:
        """The document of a Git definition, read now; None for any other definition."""
        if not isinstance(body.definition, GitDefinition):
            return None
        if self._git is None:
            raise Invalid(
                "definition: Git-defined pipelines are not available on this installation",
                details={"errors": [{"field": "definition.type", "message": "not available"}]},
            )
        return await self._git.read(caller.tenant, body.definition)

    async def _checked(
        self, body: PipelineBody, target: Target, fetched: Fetched | None = None
    ) -> Rendered:
        rendered = definitions.render(body, target, fetched=fetched)
        if self._lint is None:
            return rendered
        try:
            await self._lint(target.namespace, rendered.template)
        except Invalid as refused:  # Argo's own verdict on the document: a refusal, like ours
            raise Refused(
                f"the template was refused by Argo's linter: {refused.message}",
                details={
                    "violations": [{"path": "", "rule": "argo_lint", "message": refused.message}]
                },
            ) from None
        except DependencyDown as down:
            # The linter is a second opinion behind the allowlist and the schema: while the
            # Argo server is unreachable, saves go on and say so.
            log.warning("argo_lint_unavailable", reason=down.message)
            return Rendered(
                rendered.template,
                rendered.parameters,
                [*rendered.warnings, f"Argo's linter could not be reached: {down.message}"],
                rendered.stages,
            )
        return rendered

    async def validate(self, caller: Caller, kind: PipelineKind, data: object) -> dict[str, Any]:
        """Render, check and lint without saving (the id is a placeholder)."""
        body = parse_body(data, kind)
        fetched = await self._read(caller, body)
        await self._tenants.ensure(caller.tenant)
        secrets = await self._secrets(caller.tenant, None)
        target = self._target(caller, kind, "validate", 1, secrets)
        rendered = await self._checked(body, target, fetched)
        result = {"valid": True, "template": rendered.template, "warnings": rendered.warnings}
        return result if fetched is None else {**result, "commit": fetched.commit}

    # --- saving ------------------------------------------------------------------------------
    def _transaction(self) -> contextlib.AbstractAsyncContextManager[PipelineStore]:
        return PipelineStore.transaction(self._pool)

    async def create(self, caller: Caller, kind: PipelineKind, data: object) -> dict[str, Any]:
        body = parse_body(data, kind)
        pipeline_id = new_pipeline_id()
        fetched = await self._read(caller, body)
        await self._tenants.ensure(caller.tenant)
        async with (
            self._all_or_nothing(caller.tenant, kind, pipeline_id) as attaching,
            self._transaction() as store,
        ):
            secrets = await self._secrets(caller.tenant, store)
            rendered = await self._checked(
                body, self._target(caller, kind, pipeline_id, 1, secrets), fetched
            )
            if await store.name_taken(caller.tenant, kind, body.name):
                raise Conflict(
                    f"a {kind} pipeline named {body.name!r} exists already",
                    details={"name": body.name},
                )
            # From here a failure (another save of that name winning the race after our check
            # included) takes the template away again: it would belong to no pipeline.
            attaching.template = rendered.template
            await self._objects.apply(rendered.template)
            await store.insert_pipeline(
                pipeline_id=pipeline_id,
                tenant=caller.tenant,
                kind=kind,
                name=body.name,
                description=body.description,
                definition_type=body.definition.type,
                actor=caller.actor,
            )
            row = await self._record(store, pipeline_id, 1, body, rendered, caller, fetched)
            await self._follow(store, pipeline_id, body, fetched)
            await attaching.attach(current_of(caller.tenant, kind, body.name, row))
        log.info("pipeline_created", pipeline=pipeline_id, tenant=caller.tenant, kind=kind)
        return self._saved(pipeline_id, 1, rendered, fetched)

    async def update(
        self, caller: Caller, kind: PipelineKind, pipeline_id: str, data: object
    ) -> dict[str, Any]:
        body = parse_body(data, kind)
        fetched = await self._read(caller, body)
        await self._tenants.ensure(caller.tenant)
        async with (
            self._all_or_nothing(caller.tenant, kind, pipeline_id) as attaching,
            self._transaction() as store,
        ):
            pipeline = await self._locked(store, caller, kind, pipeline_id, attaching)
            if await store.name_taken(caller.tenant, kind, body.name, other_than=pipeline_id):
                raise Conflict(
                    f"a {kind} pipeline named {body.name!r} exists already",
                    details={"name": body.name},
                )
            saved = await self._new_version(store, caller, pipeline, body, fetched, attaching)
            await self._follow(store, pipeline_id, body, fetched)
        await self._collect(caller.tenant, kind, pipeline_id)
        log.info("pipeline_updated", pipeline=pipeline_id, version=saved["version"])
        return saved

    async def sync(
        self,
        caller: Caller,
        kind: PipelineKind,
        pipeline_id: str,
        definition: GitDefinition,
        fetched: Fetched,
    ) -> dict[str, Any]:
        """A new version of a Git-defined pipeline from ``fetched``, the document its
        ``definition`` was read as at a newer commit: the body of its last save rendered again,
        through ``update``'s steps. ``{"outcome": "unchanged"}`` when that commit has made a
        version already (a concurrent sync) or brings the document the last version was made
        from; ``Conflict`` when a save changed the pipeline's definition since it was read."""
        await self._tenants.ensure(caller.tenant)
        async with (
            self._all_or_nothing(caller.tenant, kind, pipeline_id) as attaching,
            self._transaction() as store,
        ):
            pipeline = await self._locked(store, caller, kind, pipeline_id, attaching)
            source = await store.git.get(pipeline_id)
            if source is None or source.definition != definition.model_dump(mode="json"):
                raise Conflict(
                    f"the Git definition of pipeline {pipeline_id!r} changed while it was read",
                    details={"id": pipeline_id},
                )
            if source.last_good_commit == fetched.commit:
                return {"id": pipeline_id, "outcome": "unchanged", "commit": fetched.commit}
            if fetched.blob is not None and fetched.blob == source.last_good_blob:
                # A commit that left the document as it was: nothing to make a version of.
                await store.git.synced(pipeline_id, commit=fetched.commit, blob=fetched.blob)
                return {"id": pipeline_id, "outcome": "unchanged", "commit": fetched.commit}
            body = parse_body(source.body, kind)
            saved = await self._new_version(store, caller, pipeline, body, fetched, attaching)
            await store.git.synced(pipeline_id, commit=fetched.commit, blob=fetched.blob)
        await self._collect(caller.tenant, kind, pipeline_id)
        log.info(
            "pipeline_synced", pipeline=pipeline_id, version=saved["version"], commit=fetched.commit
        )
        return {**saved, "outcome": "updated"}

    async def _new_version(
        self,
        store: PipelineStore,
        caller: Caller,
        pipeline: PipelineRow,
        body: PipelineBody,
        fetched: Fetched | None,
        attaching: Attaching,
    ) -> dict[str, Any]:
        """Render, check, lint, apply, record and make current the next version of the locked
        ``pipeline``: what ``update`` and ``sync`` share."""
        pipeline_id, kind = pipeline.id, pipeline.kind
        version = pipeline.latest_version + 1
        secrets = await self._secrets(caller.tenant, store)
        target = self._target(caller, kind, pipeline_id, version, secrets)
        rendered = await self._checked(body, target, fetched)
        await self._objects.apply(rendered.template)
        row = await self._record(store, pipeline_id, version, body, rendered, caller, fetched)
        await store.point_at(
            pipeline_id,
            current=version,
            latest=version,
            name=body.name,
            description=body.description,
            definition_type=body.definition.type,
        )
        await attaching.attach(current_of(caller.tenant, kind, body.name, row, pipeline))
        return self._saved(pipeline_id, version, rendered, fetched)

    @staticmethod
    async def _follow(
        store: PipelineStore, pipeline_id: str, body: PipelineBody, fetched: Fetched | None
    ) -> None:
        """Keep the body of a Git-defined save for the syncs to come; forget it otherwise."""
        if fetched is None:
            await store.git.drop(pipeline_id)
        else:
            await store.git.save(
                pipeline_id,
                body=body.model_dump(mode="json"),
                commit=fetched.commit,
                blob=fetched.blob,
            )

    async def _record(
        self,
        store: PipelineStore,
        pipeline_id: str,
        version: int,
        body: PipelineBody,
        rendered: Rendered,
        caller: Caller,
        fetched: Fetched | None = None,
    ) -> VersionRow:
        await store.insert_version(
            pipeline_id=pipeline_id,
            version=version,
            definition=body.definition.model_dump(mode="json"),
            parameters=rendered.parameters,
            settings=body.settings(),
            stages=rendered.stages,
            template_name=template_name(pipeline_id, version),
            template=rendered.template,
            actor=caller.actor,
            commit=fetched.commit if fetched else None,
        )
        row = await store.version(pipeline_id, version)
        assert row is not None  # written just now, in this transaction
        return row

    def _all_or_nothing(
        self, tenant: str, kind: PipelineKind, pipeline_id: str
    ) -> contextlib.AbstractAsyncContextManager[Attaching]:
        """The attachments of one operation on a pipeline, wrapped around its transaction."""
        return all_or_nothing(
            self._attachments,
            pool=self._pool,
            objects=self._objects,
            tenant=tenant,
            kind=kind,
            pipeline_id=pipeline_id,
        )

    @staticmethod
    def _saved(
        pipeline_id: str, version: int, rendered: Rendered, fetched: Fetched | None = None
    ) -> dict[str, Any]:
        saved: dict[str, Any] = {
            "id": pipeline_id,
            "version": version,
            "template_name": template_name(pipeline_id, version),
            "warnings": rendered.warnings,
        }
        if fetched is not None:
            saved["commit"] = fetched.commit
        return saved

    async def _locked(
        self,
        store: PipelineStore,
        caller: Caller,
        kind: PipelineKind,
        pipeline_id: str,
        attaching: Attaching | None = None,
    ) -> PipelineRow:
        """The pipeline, locked; with ``attaching``, its current version noted there."""
        pipeline = await store.lock(caller.tenant, kind, pipeline_id)
        if pipeline is None:  # another tenant's pipeline is indistinguishable from none
            raise NotFound(f"no {kind} pipeline {pipeline_id!r}", details={"id": pipeline_id})
        if attaching is not None:
            row = await store.version(pipeline_id, pipeline.current_version)
            if row is not None:
                attaching.previous = current_of(pipeline.tenant, kind, pipeline.name, row, pipeline)
        return pipeline

    async def _collect(self, tenant: str, kind: PipelineKind, pipeline_id: str) -> None:
        """Delete the templates of all but the newest versions (template GC), once the save is
        recorded (a save that fails collects nothing), under the pipeline's row lock: when
        another save holds it, that one collects after itself. A failure is logged, the save
        stands, and the next save collects them; a rollback applies its version's template
        whatever the record says."""
        try:
            async with self._transaction() as store:
                pipeline = await store.lock(tenant, kind, pipeline_id, wait=False)
                if pipeline is None:  # deleted, or another save's to collect
                    return
                surplus = await store.surplus_templates(
                    pipeline_id, keep=self._limits.templates_kept, current=pipeline.current_version
                )
                if not surplus:
                    return
                await store.mark_removed(pipeline_id, surplus)
                namespace = f"{L.DATA_NAMESPACE_PREFIX}{tenant}"
                for name in surplus:
                    await self._objects.delete(ARGO_API_VERSION, TEMPLATE_KIND, namespace, name)
        except WorkflowManagerError as error:
            log.warning("templates_not_collected", pipeline=pipeline_id, reason=error.message)
            return
        log.info("templates_collected", pipeline=pipeline_id, removed=len(surplus))

    # --- rollback, delete, run ---------------------------------------------------------------
    async def rollback(
        self, caller: Caller, kind: PipelineKind, pipeline_id: str, version: object
    ) -> dict[str, Any]:
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise Invalid("version: expected a version number", details={"parameter": "version"})
        await self._tenants.ensure(caller.tenant)
        async with (
            self._all_or_nothing(caller.tenant, kind, pipeline_id) as attaching,
            self._transaction() as store,
        ):
            pipeline = await self._locked(store, caller, kind, pipeline_id, attaching)
            row = await store.version(pipeline_id, version)
            if row is None:
                raise NotFound(
                    f"pipeline {pipeline_id!r} has no version {version}",
                    details={"id": pipeline_id, "version": version},
                )
            await self._secrets_exist(caller.tenant, store, row)
            # Applied whatever the record says (a converge: a read when it is there).
            await self._objects.apply(row.template)
            restored = row.template_removed_at is not None
            if restored:
                await store.mark_restored(pipeline_id, version)
            await store.point_at(pipeline_id, current=version, latest=pipeline.latest_version)
            await attaching.attach(current_of(caller.tenant, kind, pipeline.name, row, pipeline))
        await self._collect(caller.tenant, kind, pipeline_id)
        log.info("pipeline_rolled_back", pipeline=pipeline_id, version=version, restored=restored)
        return {"id": pipeline_id, "current_version": version, "template_restored": restored}

    async def _secrets_exist(self, tenant: str, store: PipelineStore, row: VersionRow) -> None:
        """Conflict when ``row`` refers to a Secret that is not (any more) one of the tenant's
        data secrets: made current, it would run with a reference to nothing. The platform's own
        Secrets (``kubeopera-*``, added after the check, never the tenant's) are not asked for."""
        every = references.of_version(row.template, row.definition, row.settings)
        used = {name for name in every if rules.is_own(name)}
        if self._data_secrets is None or not used:
            return
        missing = sorted(used - await self._secrets(tenant, store))
        if missing:
            raise Conflict(
                f"version {row.version} refers to data secrets that no longer exist: "
                f"{', '.join(missing)}; create them again first",
                details={
                    "reason": "missing_data_secrets",
                    "secrets": missing,
                    "id": row.pipeline_id,
                    "version": row.version,
                },
            )

    async def delete(self, caller: Caller, kind: PipelineKind, pipeline_id: str) -> dict[str, Any]:
        """Delete the pipeline, its versions and every template it applied (runs stay)."""
        async with (
            self._all_or_nothing(caller.tenant, kind, pipeline_id) as attaching,
            self._transaction() as store,
        ):
            await self._locked(store, caller, kind, pipeline_id, attaching)
            if kind == "ml":
                flying, total = await store.releases_in_flight(caller.tenant, pipeline_id)
                if flying:
                    more = f" and {total - len(flying)} more" if total > len(flying) else ""
                    raise Conflict(
                        f"{total} run(s) of this pipeline are still releasing: "
                        f"{', '.join(flying)}{more}. Stop them or wait for their releases to "
                        "end, then delete the pipeline",
                        details={"id": pipeline_id, "runs": flying, "total": total},
                    )
            await attaching.detach()
            namespace = f"{L.DATA_NAMESPACE_PREFIX}{caller.tenant}"
            selector = f"{L.PIPELINE_ID}={pipeline_id}"
            templates = await self._objects.list(
                ARGO_API_VERSION, TEMPLATE_KIND, namespace, label_selector=selector
            )
            for template in templates:
                name = template.get("metadata", {}).get("name")
                if isinstance(name, str):
                    await self._objects.delete(ARGO_API_VERSION, TEMPLATE_KIND, namespace, name)
            await store.delete(pipeline_id)
        log.info("pipeline_deleted", pipeline=pipeline_id, templates=len(templates))
        return {"id": pipeline_id, "deleted": True, "templates_removed": len(templates)}

    async def run(
        self, caller: Caller, kind: PipelineKind, pipeline_id: str, overrides: object
    ) -> dict[str, Any]:
        """Start a run of the current version with parameter overrides (checked first)."""
        if overrides is None:
            overrides = {}
        if not isinstance(overrides, Mapping):
            raise Invalid("parameters: expected an object", details={"parameter": "parameters"})
        async with self._transaction() as store:
            pipeline = await store.lock(caller.tenant, kind, pipeline_id)
            if pipeline is None:
                raise NotFound(f"no {kind} pipeline {pipeline_id!r}", details={"id": pipeline_id})
            version = await store.version(pipeline_id, pipeline.current_version)
            cluster_id = await store.host_cluster_id()
        if version is None:  # the schema makes this impossible; say so if it ever happens
            raise Conflict("the pipeline's current version is missing", details={"id": pipeline_id})
        arguments = definitions.run_arguments(version.parameters, dict(overrides))
        await self._tenants.ensure(caller.tenant)
        workflow = run_manifest(
            tenant=pipeline.tenant,
            pipeline_id=pipeline.id,
            kind=pipeline.kind,
            version=version.version,
            template=version.template_name,
            arguments=arguments,
            actor=caller.actor,
            instance_id=self._instance_id,
        )
        namespace = workflow["metadata"]["namespace"]
        parameters = {item["name"]: item["value"] for item in arguments}
        try:
            created = await self._objects.create(workflow)
        except Exception as exc:
            await self._audit(caller, cluster_id, namespace, version, parameters, "failed", exc)
            raise
        name = str(created.get("metadata", {}).get("name"))
        await self._audit(caller, cluster_id, namespace, version, parameters, "succeeded", name)
        log.info("pipeline_run", pipeline=pipeline_id, version=version.version, workflow=name)
        return {
            "id": pipeline_id,
            "version": version.version,
            "workflow": {"cluster": cluster_id, "namespace": namespace, "name": name},
            "parameters": parameters,
        }

    async def _audit(
        self,
        caller: Caller,
        cluster_id: str | None,
        namespace: str,
        version: VersionRow,
        parameters: dict[str, str],
        outcome: str,
        result: object,
    ) -> None:
        detail: dict[str, Any] = {"pipeline_id": version.pipeline_id, "version": version.version}
        if isinstance(result, BaseException):
            detail["error"] = getattr(result, "code", type(result).__name__)
            name = version.template_name
        else:
            name = str(result)
        await record_action(
            self._pool,
            cluster_id=cluster_id or "host",
            namespace=namespace,
            name=name,
            run_uid=None,
            tenant=caller.tenant,
            actor=caller.actor,
            action="run",
            parameters=parameters,
            outcome=outcome,
            detail=detail,
        )
