"""Git sync: a check of one Git-defined pipeline, a poller pass over all of them, the loop.

A check (``compiler.gitsync.planning`` decides) reads the credentials, lists the branch's head,
and stops there when the head is nothing new. Otherwise it fetches the document at the head and
hands it to the save path (``PipelineService.sync``), which makes the next version of it, with
its commit, or refuses it like any save.

Whatever fails (credentials, the repository, the branch, the path, the size, the document, our
own dependencies) is a sync error: stored on the pipeline (``git_sources``: reason, sentence,
since when, the commit it is about) and audited (``run_actions``, action ``pipeline.git_sync``)
once per distinct error, never every pass; it never makes a version and never stops the pass,
which goes on with every other repository. A sync asked for through the API
(``sync_now``) is always audited, with the caller as actor, and answers with its outcome.

A pass checks up to ``concurrency`` repositories at once; its fetches share
``GitRepositories``' limit with the saves' (the fetches are what costs memory in the tmpfs). It
reads each data secret once. Credentials
live in memory for the pass only; no log line, error or audit record carries them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import asyncpg
from pydantic import ValidationError

from compiler.gitsync import metrics, planning
from compiler.gitsync import remotes as R
from compiler.gitsync.remotes import Credentials, GitFailed
from compiler.gitsync.repositories import GitRepositories
from compiler.pipelines.definitions import Fetched
from compiler.pipelines.ports import Caller
from compiler.pipelines.service import PipelineService
from shared import labels as L
from shared.db.audit import record_action
from shared.db.git_sources import GitSourceRow, GitSources
from shared.db.pipelines import PipelineReader, PipelineStore
from shared.errors import (
    Conflict,
    DependencyDown,
    Invalid,
    NotFound,
    Refused,
    WorkflowManagerError,
)
from shared.logging import get_logger
from shared.pipelines import GitDefinition, PipelineKind

log = get_logger(__name__)

ACTOR: Final = "workflow-manager:git-sync"
ACTION: Final = "pipeline.git_sync"
Result = Literal["unchanged", "updated", "failed"]
_VIOLATIONS_SHOWN: Final = 3


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one check did: the route's answer, the audit's detail."""

    outcome: Result
    commit: str | None = None
    version: int | None = None
    reason: str | None = None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    clears_error: bool = False  # unchanged at the last good commit: nothing is wrong any more
    news: bool = False  # failed otherwise than the check before: worth an audit record

    def to_json(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"outcome": self.outcome, "commit": self.commit}
        if self.version is not None:
            answer["version"] = self.version
        if self.error is not None:
            answer["error"] = {"reason": self.reason, "message": self.error, **self.details}
        return answer


@dataclass(frozen=True, slots=True)
class PassResult:
    checked: int
    unchanged: int
    updated: int
    failed: int
    seconds: float


class _Secrets:
    """One read of each data secret per pass (many pipelines of a tenant share one), its
    outcome, values or failure, kept for the pass only."""

    def __init__(self, repositories: GitRepositories) -> None:
        self._repositories = repositories
        self._locks: dict[tuple[str, str | None], asyncio.Lock] = {}
        self._read: dict[tuple[str, str | None], Credentials | WorkflowManagerError | None] = {}

    async def get(self, tenant: str, definition: GitDefinition) -> Credentials | None:
        key = (tenant, definition.credentials_secret)
        async with self._locks.setdefault(key, asyncio.Lock()):
            if key not in self._read:
                try:
                    self._read[key] = await self._repositories.credentials(tenant, definition)
                except (GitFailed, DependencyDown) as failure:
                    self._read[key] = failure
        found = self._read[key]
        if isinstance(found, WorkflowManagerError):
            raise found
        return found


class GitSync:
    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        repositories: GitRepositories,
        service: PipelineService,
        concurrency: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._sources = GitSources(pool)
        self._repositories = repositories
        self._service = service
        self._checks = asyncio.Semaphore(concurrency)
        self._clock = clock

    # --- the route -------------------------------------------------------------------------
    async def sync_now(
        self, caller: Caller, kind: PipelineKind, pipeline_id: str
    ) -> dict[str, Any]:
        """Check the pipeline now, as ``caller``: ``{outcome, commit, version?, error?}``."""
        source = await self._sources.find(pipeline_id, kind=kind, tenant=caller.tenant)
        if source is None:
            found = await PipelineReader(self._pool).find(kind, pipeline_id, tenant=caller.tenant)
            if found is None:
                raise NotFound(f"no {kind} pipeline {pipeline_id!r}", details={"id": pipeline_id})
            raise Invalid(
                f"pipeline {pipeline_id!r} is not defined in Git: there is nothing to sync",
                details={"id": pipeline_id},
            )
        outcome = await self._check(
            source, _Secrets(self._repositories), actor=caller.actor, manual=True
        )
        if outcome.outcome == "unchanged":
            await self._sources.checked([pipeline_id], clear_error=outcome.clears_error)
        await self._audit(source, caller.actor, outcome, await self._host())
        return {"id": pipeline_id, **outcome.to_json()}

    # --- the poller ------------------------------------------------------------------------
    async def run_pass(self) -> PassResult:
        """Check every Git-defined pipeline once; never raises for one pipeline's trouble."""
        started = self._clock()
        sources = await self._sources.all()
        host = await self._host()
        secrets = _Secrets(self._repositories)
        async with self._repositories.pooled():
            outcomes = await asyncio.gather(
                *(self._poll(source, secrets, host) for source in sources)
            )
        unchanged = [
            (source, outcome)
            for source, outcome in zip(sources, outcomes, strict=True)
            if outcome.outcome == "unchanged"
        ]
        for clear in (True, False):
            ids = [
                source.pipeline_id for source, outcome in unchanged if outcome.clears_error == clear
            ]
            await self._sources.checked(ids, clear_error=clear)
        seconds = self._clock() - started
        counts = {name: sum(o.outcome == name for o in outcomes) for name in ("updated", "failed")}
        metrics.PASSES.inc()
        metrics.PASS_SECONDS.observe(seconds)
        metrics.SOURCES.set(len(sources))
        result = PassResult(
            len(sources), len(unchanged), counts["updated"], counts["failed"], seconds
        )
        log.info(
            "git_sync_pass",
            checked=result.checked,
            updated=result.updated,
            failed=result.failed,
            seconds=round(seconds, 3),
        )
        return result

    async def loop(self, interval: float, *, sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        """A pass now and then every ``interval`` seconds after the start of the last one (run
        while leading). A pass that failed as a whole (PostgreSQL away) is logged and the next
        one comes at its time."""
        while True:
            started = self._clock()
            try:
                await self.run_pass()
            except DependencyDown as down:
                log.warning("git_sync_pass_failed", reason=down.message)
            await sleep(max(interval - (self._clock() - started), 0.0))

    async def _poll(self, source: GitSourceRow, secrets: _Secrets, host: str) -> Outcome:
        async with self._checks:
            try:
                outcome = await self._check(source, secrets, actor=ACTOR, manual=False)
            except WorkflowManagerError as error:  # a store write failed: next pass retries
                log.warning("git_sync_check_failed", pipeline=source.pipeline_id, error=error.code)
                outcome = Outcome("failed", reason=R.UNAVAILABLE, error=error.message)
                metrics.CHECKS.labels("failed").inc()
                return outcome
            if outcome.outcome == "updated" or outcome.news:
                await self._audit(source, ACTOR, outcome, host)
            return outcome

    # --- one check -------------------------------------------------------------------------
    async def _check(
        self, source: GitSourceRow, secrets: _Secrets, *, actor: str, manual: bool
    ) -> Outcome:
        try:
            definition = GitDefinition.model_validate(source.definition)
        except ValidationError:  # saved by an older release whose rules were looser
            message = "the saved Git definition is not valid any more: save the pipeline again"
            return await self._failed(source, R.REFUSED, message, None)
        head: str | None = None
        try:
            credentials = await secrets.get(source.tenant, definition)
            head = await self._repositories.head(definition, credentials)
            if planning.unchanged(
                head,
                good=source.last_good_commit,
                seen=source.last_seen_commit,
                error=source.last_error,
                error_commit=source.last_error_commit,
                manual=manual,
            ):
                metrics.CHECKS.labels("unchanged").inc()
                return Outcome("unchanged", head, clears_error=head == source.last_good_commit)
            fetched = await self._repositories.fetch(definition, credentials)
            return await self._save(source, definition, fetched, actor)
        except GitFailed as failure:
            commit = planning.failed_at(failure.reason, failure.commit, head)
            return await self._failed(source, failure.reason, failure.message, commit)
        except DependencyDown as down:
            return await self._failed(source, R.UNAVAILABLE, down.message, None)

    async def _save(
        self, source: GitSourceRow, definition: GitDefinition, fetched: Fetched, actor: str
    ) -> Outcome:
        caller = Caller(source.tenant, actor)
        try:
            saved = await self._service.sync(
                caller, source.kind, source.pipeline_id, definition, fetched
            )
        except (NotFound, Conflict):
            # Deleted or saved again meanwhile: the next pass reads what is there now.
            metrics.CHECKS.labels("unchanged").inc()
            return Outcome("unchanged", fetched.commit)
        except (Refused, Invalid) as refused:
            return await self._failed(
                source,
                R.REFUSED,
                _refusal(refused, fetched.commit),
                fetched.commit,
                details={
                    key: refused.details[key]
                    for key in ("violations", "errors")
                    if key in refused.details
                },
            )
        if saved.get("outcome") == "unchanged":
            metrics.CHECKS.labels("unchanged").inc()
            return Outcome("unchanged", fetched.commit, clears_error=True)
        metrics.CHECKS.labels("updated").inc()
        log.info(
            "git_sync_updated",
            pipeline=source.pipeline_id,
            tenant=source.tenant,
            version=saved["version"],
            commit=fetched.commit,
        )
        return Outcome("updated", fetched.commit, version=int(saved["version"]))

    async def _failed(
        self,
        source: GitSourceRow,
        reason: str,
        message: str,
        commit: str | None,
        *,
        details: dict[str, Any] | None = None,
    ) -> Outcome:
        new = await self._sources.record_failure(
            source.pipeline_id, reason=reason, message=message, commit=commit
        )
        metrics.CHECKS.labels("failed").inc()
        if new:
            log.warning(
                "git_sync_failed",
                pipeline=source.pipeline_id,
                tenant=source.tenant,
                reason=reason,
                commit=commit,
            )
        return Outcome(
            "failed", commit, reason=reason, error=message, details=details or {}, news=new
        )

    # --- the audit -------------------------------------------------------------------------
    async def _host(self) -> str:
        async with PipelineStore.transaction(self._pool) as store:
            return await store.host_cluster_id() or "host"

    async def _audit(self, source: GitSourceRow, actor: str, outcome: Outcome, host: str) -> None:
        detail: dict[str, Any] = {
            "pipeline_id": source.pipeline_id,
            "kind": source.kind,
            "result": outcome.outcome,
            "commit": outcome.commit,
        }
        if outcome.version is not None:
            detail["version"] = outcome.version
        if outcome.error is not None:
            detail["reason"] = outcome.reason
            detail["error"] = outcome.error
        try:
            await record_action(
                self._pool,
                cluster_id=host,
                namespace=f"{L.DATA_NAMESPACE_PREFIX}{source.tenant}",
                name=f"pipeline/{source.pipeline_id}",
                run_uid=None,
                tenant=source.tenant,
                actor=actor,
                action=ACTION,
                parameters={
                    "repository": source.definition.get("repository"),
                    "branch": source.definition.get("branch"),
                },
                outcome="failed" if outcome.outcome == "failed" else "succeeded",
                detail=detail,
            )
        except DependencyDown as down:
            log.error("git_sync_audit_failed", pipeline=source.pipeline_id, reason=down.message)


def _refusal(refused: WorkflowManagerError, commit: str) -> str:
    """The stored sentence of a refused document: the save's message and its first violations."""
    items = refused.details.get("violations") or refused.details.get("errors") or []
    shown = [
        f"{item.get('path') or item.get('field') or '$'}: {item.get('message')}"
        for item in items[:_VIOLATIONS_SHOWN]
        if isinstance(item, dict)
    ]
    more = f" (and {len(items) - len(shown)} more)" if len(items) > len(shown) else ""
    listed = f" — {'; '.join(shown)}{more}" if shown else ""
    return f"the document at commit {commit[:12]} was refused: {refused.message}{listed}"
