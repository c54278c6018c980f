"""The drift reconciler of pipelines' attachments: every pipeline's CronWorkflow, event source,
sensor, webhook token Secret and Ingress made again from what PostgreSQL records (the current
version and the schedule's pause) when deleted or changed out of band. Leader-elected (the
``wm-compiler`` lease, beside the tenant reconciler: ``compiler.runner``).

One pass walks every pipeline by id, a page at a time. Each pipeline is reconciled under its
row lock, as a save is (``compiler.pipelines.attaching``): each attachment is told the current
version again, and converges (an object missing is created, one drifted is replaced, one the
version no longer has is removed), then settles (tokens of triggers the version does not have
are dropped). A pause made before pauses were recorded is adopted from its CronWorkflow first
(``ScheduleService.adopt``). A pipeline that fails is logged and the pass goes on; the next
pass retries it.

A token Secret deleted out of band comes back with new tokens: the tokens live nowhere else
(by design), and the tenant reads the new ones through the webhook route.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import asyncpg

from compiler.automation.service import ScheduleService
from compiler.pipelines.attaching import Attaching, current_of
from compiler.pipelines.ports import Attachment
from shared.db.pipelines import PipelineStore
from shared.logging import get_logger

log = get_logger(__name__)

PAGE: Final = 200


@dataclass
class Pass:
    """What one pass did."""

    pipelines: int = 0
    failed: int = 0


class AttachmentReconciler:
    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        attachments: Sequence[Attachment],
        schedules: ScheduleService,
    ) -> None:
        self._pool = pool
        self._attachments = tuple(attachments)
        self._schedules = schedules

    async def reconcile(self, pipeline_id: str, *, tenant: str, kind: str) -> bool:
        """Converge one pipeline's attachments; False when it is gone."""
        async with PipelineStore.transaction(self._pool) as store:
            pipeline = await store.lock(tenant, kind, pipeline_id)
            if pipeline is None:
                return False
            row = await store.version(pipeline_id, pipeline.current_version)
            if row is None:  # the schema makes this impossible
                return False
            current = current_of(pipeline.tenant, pipeline.kind, pipeline.name, row, pipeline)
            current = await self._schedules.adopt(store, current)
            attaching = Attaching(
                self._attachments, tenant=tenant, kind=pipeline.kind, pipeline_id=pipeline_id
            )
            await attaching.attach(current)
        await attaching.settle()  # outside the row lock, as after a save
        return True

    async def reconcile_all(self) -> Pass:
        """One pass over every pipeline; a failing pipeline does not stop the others."""
        done = Pass()
        after = ""
        while True:
            async with PipelineStore.transaction(self._pool) as store:
                page = await store.ids(after=after, limit=PAGE)
            for pipeline_id, tenant, kind in page:
                try:
                    await self.reconcile(pipeline_id, tenant=tenant, kind=kind)
                except Exception as error:  # logged; the next pass retries it
                    done.failed += 1
                    log.warning(
                        "pipeline_reconcile_failed",
                        pipeline=pipeline_id,
                        tenant=tenant,
                        error=getattr(error, "message", type(error).__name__),
                    )
                done.pipelines += 1
            if len(page) < PAGE:
                return done
            after = page[-1][0]

    async def loop(self, interval: float, *, sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        """Reconcile every pipeline now and then every ``interval`` seconds (run while
        leading)."""
        while True:
            done = await self.reconcile_all()
            log.info("pipelines_reconciled", pipelines=done.pipelines, failed=done.failed)
            await sleep(interval)
