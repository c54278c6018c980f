"""A pipeline's attachments moved all or nothing: what one save, rollback or delete touched, and
putting it back when that save fails.

Each attachment (``compiler.pipelines.ports.Attachment``: the schedule's CronWorkflow, the event
triggers' objects, experiment tracking, ...) is told the version now current, in order. When
anything fails after the first was told (an attachment refused by the cluster, the version's
insert, the commit), every attachment touched so far, the failing one included (it may have
applied part of its objects), is put back, newest first, to the state PostgreSQL records: the
pipeline's current version as committed, read again under the pipeline's row lock (so a save
that committed meanwhile is what they follow), or, for a pipeline that was never recorded, no
attachment at all (``detach``). When PostgreSQL cannot be read, they are put back to the
version that was current when the save began. A put-back that fails is logged and the others
still run; the drift reconciler (``compiler.automation.reconciler``) converges what is left from
the recorded state on its next pass.

Attachments only add or re-point inside the transaction; what cannot be made again as it was (a
removed webhook trigger's token) is dropped by ``settle`` once the outcome is recorded (after the
commit, or after a put-back, to the state put back).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import asyncpg

from compiler.pipelines.ports import Attachment, Current, Objects, pause_of
from shared.db.pipelines import PipelineRow, PipelineStore, VersionRow
from shared.errors import WorkflowManagerError
from shared.logging import get_logger
from shared.pipelines import PipelineKind

log = get_logger(__name__)

ARGO_API_VERSION: Final = "argoproj.io/v1alpha1"
TEMPLATE_KIND: Final = "WorkflowTemplate"


def current_of(
    tenant: str,
    kind: PipelineKind,
    name: str,
    row: VersionRow,
    pipeline: PipelineRow | None = None,
) -> Current:
    """What the attachments of a pipeline named ``name`` follow when ``row`` is current, with
    the schedule pause recorded on ``pipeline`` (None: a pipeline being created has none)."""
    return Current(
        tenant=tenant,
        kind=kind,
        pipeline_id=row.pipeline_id,
        name=name,
        version=row,
        pause=None if pipeline is None else pause_of(pipeline),
        pause_unadopted=pipeline is not None and not pipeline.schedule_pause_adopted,
    )


class Attaching:
    """The attachments one operation on one pipeline has touched, in order."""

    def __init__(
        self,
        attachments: Sequence[Attachment],
        *,
        tenant: str,
        kind: PipelineKind,
        pipeline_id: str,
    ) -> None:
        self._attachments = tuple(attachments)
        self._touched: list[Attachment] = []
        self.tenant, self.kind, self.pipeline_id = tenant, kind, pipeline_id
        # What was current when the operation began (None: a create), for when PostgreSQL
        # cannot say what is recorded.
        self.previous: Current | None = None
        # The template a create applied: removed again when the pipeline is not recorded.
        self.template: Mapping[str, Any] | None = None
        self._outcome: Current | None = None  # what the touched attachments were told

    @property
    def touched(self) -> bool:
        return bool(self._touched)

    async def _put_back(self, attachment: Attachment) -> None:
        if self._outcome is None:
            await attachment.detach(self.tenant, self.kind, self.pipeline_id)
        else:
            await attachment.attach(self._outcome)

    async def _settle(self, attachment: Attachment) -> None:
        await attachment.settle(self.tenant, self.kind, self.pipeline_id, self._outcome)

    async def _guarded(
        self, attachment: Attachment, event: str, step: Callable[[Attachment], Awaitable[None]]
    ) -> bool:
        try:
            await step(attachment)
        except Exception as error:  # one that fails keeps no other attachment from its step
            log.warning(
                event,
                pipeline=self.pipeline_id,
                attachment=type(attachment).__name__,
                error=getattr(error, "message", type(error).__name__),
            )
            return False
        return True

    async def attach(self, current: Current) -> None:
        """Tell every attachment, in order, that ``current`` is the pipeline's version."""
        self._outcome = current
        for attachment in self._attachments:
            self._touched.append(attachment)
            await attachment.attach(current)

    async def detach(self) -> None:
        """Remove every attachment, in order (the pipeline is deleted)."""
        self._outcome = None
        for attachment in self._attachments:
            self._touched.append(attachment)
            await attachment.detach(self.tenant, self.kind, self.pipeline_id)

    async def settle(self) -> None:
        """Once the operation is recorded: let every attachment drop what only the previous
        version needed. A failure is logged; the operation stands, the reconciler finishes."""
        for attachment in self._touched:
            await self._guarded(attachment, "attachment_settle_failed", self._settle)
        self._touched.clear()

    async def restore(self, recorded: Current | None) -> bool:
        """Put every touched attachment back to ``recorded`` (None: none of them), newest
        first; whether all of them were. ``settle`` them there once the row lock is released."""
        self._outcome = recorded
        complete = True
        for attachment in reversed(self._touched):
            complete &= await self._guarded(attachment, "attachment_restore_failed", self._put_back)
        log.info(
            "attachments_restored",
            pipeline=self.pipeline_id,
            version=None if recorded is None else recorded.version.version,
            complete=complete,
        )
        return complete


@contextlib.asynccontextmanager
async def all_or_nothing(
    attachments: Sequence[Attachment],
    *,
    pool: asyncpg.Pool,
    objects: Objects,
    tenant: str,
    kind: PipelineKind,
    pipeline_id: str,
) -> AsyncIterator[Attaching]:
    """The attachments of one operation on a pipeline, to wrap around its transaction: when
    anything fails, the commit included, those it touched are put back to what PostgreSQL
    records, and a created pipeline's template is removed (see the module docstring)."""
    attaching = Attaching(attachments, tenant=tenant, kind=kind, pipeline_id=pipeline_id)
    done = False
    try:
        yield attaching
        done = True
    finally:
        if not done and (attaching.touched or attaching.template is not None):
            await _put_back(attaching, pool=pool, objects=objects)
    await attaching.settle()  # recorded: the transaction around which this wraps committed


async def _put_back(attaching: Attaching, *, pool: asyncpg.Pool, objects: Objects) -> None:
    recorded: Current | None = None
    restored = False
    try:
        async with PipelineStore.transaction(pool) as store:  # under the row lock, as saves
            recorded = await _recorded(store, attaching)
            await attaching.restore(recorded)
            restored = True
    except WorkflowManagerError as error:  # PostgreSQL unreadable: what was seen at the start
        log.warning(
            "attachments_recorded_state_unread",
            pipeline=attaching.pipeline_id,
            reason=error.message,
        )
        if not restored:
            recorded = attaching.previous
            await attaching.restore(recorded)
    # Outside the row lock: an attachment may write the pipeline's row when it settles.
    await attaching.settle()
    template = attaching.template
    if recorded is None and template is not None:
        metadata = template["metadata"]
        try:
            await objects.delete(
                ARGO_API_VERSION, TEMPLATE_KIND, metadata["namespace"], metadata["name"]
            )
        except WorkflowManagerError as error:
            log.warning("unrecorded_template_left", template=metadata["name"], reason=error.message)


async def _recorded(store: PipelineStore, attaching: Attaching) -> Current | None:
    """The pipeline's current version as committed, locked; None when it has none."""
    pipeline = await store.lock(attaching.tenant, attaching.kind, attaching.pipeline_id)
    if pipeline is None:
        return None
    row = await store.version(pipeline.id, pipeline.current_version)
    if row is None:
        return None
    return current_of(pipeline.tenant, pipeline.kind, pipeline.name, row, pipeline)
