"""What does not arrive on the workflow watch: approvals decided elsewhere, through a LISTEN
connection on ``approvals`` (migration 0011 NOTIFYs the run's uid on every decision, whoever
wrote it), and a periodic sweep.

A decision through the API completes its run's approval node within the notification's
delivery time. The sweep, every STAGE_SWEEP_INTERVAL and at once after (re)connecting (so
first thing when a replica starts leading):

- expires approvals past their time (their NOTIFY then comes like any decision's);
- acts on decisions whose stage was not completed (made while no replica was leading, or
  sent while the LISTEN connection was down): ``StageWork.finish_approval``;
- completes the nodes of outcomes recorded and never marked completed (a crash after the node
  was resumed and before that mark: the node no longer waits, so the watch never shows it
  again): ``StageWork.finish_recorded``. After (re)connecting every open outcome; later only
  those older than one interval, which no worker is still busy with.

Every one of these is idempotent, as is the work they may race with.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any

import asyncpg

from shared import stages as S
from shared.config import Settings
from shared.db.listening import listen_forever
from shared.db.registry import APPROVALS_CHANNEL
from shared.db.registry_store import RegistryStore
from shared.errors import WorkflowManagerError
from shared.logging import get_logger
from stagectl.work import ACTOR, StageWork

log = get_logger(__name__)


class ApprovalWatch:
    """Feeds decided approvals to ``StageWork`` (see the module docstring)."""

    def __init__(
        self,
        *,
        source: Settings | str,
        pool: asyncpg.Pool,
        work: StageWork,
        sweep_interval: float,
    ) -> None:
        self._source = source
        self._pool = pool
        self._work = work
        self._interval = sweep_interval
        self._decided: asyncio.Queue[str] = asyncio.Queue()
        self._sweep_now = asyncio.Event()

    def on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self._decided.put_nowait(payload)

    async def run(self) -> None:
        """Listen, sweep and act until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._listen())
            group.create_task(self._sweep())
            while True:
                run_uid = await self._decided.get()
                group.create_task(self._finish(run_uid))

    async def _finish(self, run_uid: str) -> None:
        await self._guarded(self._work.finish_approval(run_uid), run_uid)

    async def _guarded(self, call: Awaitable[None], run_uid: str) -> None:
        try:
            await call
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the next sweep tries again
            log.warning(
                "stage_finish_failed",
                run_uid=run_uid,
                error=getattr(exc, "code", type(exc).__name__),
                exc_info=not isinstance(exc, WorkflowManagerError),
            )

    async def _listen(self) -> None:
        await listen_forever(
            self._source,
            name="approvals",
            application_name="wm-stagectl-listen",
            channels={APPROVALS_CHANNEL: self.on_notify},
            # What was decided while we were not listening: the sweep finds it.
            on_listening=self._sweep_now.set,
        )

    async def _sweep(self) -> None:
        while True:
            now = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._sweep_now.wait()
                    now = True
            self._sweep_now.clear()
            try:
                await self.sweep(older_than=0.0 if now else self._interval)
            except WorkflowManagerError as exc:
                log.warning("stages_sweep_failed", error=exc.code)

    async def sweep(self, *, older_than: float) -> None:
        """Expire what is due; queue every decision whose stage is not completed; complete
        the nodes of open outcomes recorded ``older_than`` seconds ago or more."""
        async with RegistryStore.transaction(self._pool) as store:
            expired = await store.expire_due(actor=ACTOR)
            unfinished = await store.decided_unfinished()
            stale = await store.open_outcomes(older_than=older_than)
        for run_uid in expired:
            log.info("approval_expired", run_uid=run_uid)
        for approval in unfinished:
            self._decided.put_nowait(approval.run_uid)
        for stored in stale:
            if stored.stage != S.APPROVAL:  # a decided approval is queued above
                await self._guarded(self._work.finish_recorded(stored), stored.run_uid)
