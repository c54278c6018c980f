"""Guarded background tasks and the service lifecycle.

Every long-lived coroutine of a deployable runs under a ``Supervisor`` by name. A crash is
logged with the task's name and either restarted with backoff or escalated, which stops the
process: no task dies silently. ``run_service`` runs a deployable until SIGTERM/SIGINT (or an
escalated crash), then cancels everything within a grace deadline and logs what overran.
"""

from __future__ import annotations

import asyncio
import enum
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, NoReturn, Self

import structlog

log = structlog.get_logger(__name__)

TaskFactory = Callable[[], Awaitable[object]]
EscalationHook = Callable[[str, BaseException], None]


class OnCrash(enum.Enum):
    RESTART = "restart"  # log, wait the backoff delay, run the factory again
    ESCALATE = "escalate"  # log and stop the process: the failure is not recoverable here


@dataclass(frozen=True)
class Backoff:
    """Exponential restart delays; a run longer than ``reset_after`` counts as healthy."""

    initial: float = 1.0
    maximum: float = 60.0
    factor: float = 2.0
    reset_after: float = 60.0

    def delay(self, attempt: int) -> float:
        """Delay before restart number ``attempt`` (1-based). Purely computational."""
        return min(self.maximum, self.initial * self.factor ** max(0, attempt - 1))


class Escalated(Exception):
    """A supervised task crashed and asked for the process to stop."""

    def __init__(self, task: str, error: BaseException) -> None:
        super().__init__(f"task {task!r} crashed: {type(error).__name__}: {error}")
        self.task = task
        self.error = error


@dataclass(frozen=True)
class _Spec:
    name: str
    factory: TaskFactory
    on_crash: OnCrash
    backoff: Backoff
    max_restarts: int | None


class Supervisor:
    """Owns named tasks; ``async with`` waits for them like a TaskGroup.

    Leaving the block normally waits until every task has finished; an escalated crash (or an
    exception in the block) cancels the rest and, for a crash, raises ``Escalated``.
    """

    def __init__(self, *, name: str = "supervisor", on_escalate: EscalationHook | None = None):
        self.name = name
        self._on_escalate = on_escalate
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._failed = asyncio.Event()
        self._closed = False
        self.failure: Escalated | None = None

    # --- owning tasks ---------------------------------------------------------------------
    def spawn(
        self,
        name: str,
        factory: TaskFactory,
        *,
        on_crash: OnCrash = OnCrash.RESTART,
        backoff: Backoff = Backoff(),
        max_restarts: int | None = None,
    ) -> None:
        """Run ``factory()`` as task ``name``; on a crash restart it or escalate.

        ``max_restarts`` consecutive crashes (none counted after a healthy run) escalate.
        """
        if self._closed:
            raise RuntimeError(f"supervisor {self.name!r} is shut down; cannot spawn {name!r}")
        if name in self._tasks:
            raise ValueError(f"a task named {name!r} is already running")
        spec = _Spec(name, factory, on_crash, backoff, max_restarts)
        # The one place tasks are created: owned here, awaited by shutdown.
        task = asyncio.get_running_loop().create_task(self._guard(spec), name=name)
        self._tasks[name] = task
        self._idle.clear()
        task.add_done_callback(self._forget)

    @property
    def names(self) -> list[str]:
        """Names of the tasks still running."""
        return sorted(self._tasks)

    async def cancel(self, name: str) -> None:
        """Cancel task ``name`` and wait for it to end (no-op when it is not running)."""
        task = self._tasks.get(name)
        if task is None:
            return
        task.cancel()
        await asyncio.wait([task])

    async def wait(self) -> None:
        """Until every task has finished; raises ``Escalated`` when one escalated."""
        idle = asyncio.ensure_future(self._idle.wait())
        failed = asyncio.ensure_future(self._failed.wait())
        try:
            await asyncio.wait([idle, failed], return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()
            failed.cancel()
        if self.failure is not None:
            raise self.failure

    async def wait_failed(self) -> Escalated:
        """Until a task escalates; returns the failure."""
        await self._failed.wait()
        assert self.failure is not None
        return self.failure

    async def shutdown(self, grace: float) -> list[str]:
        """Cancel every task and wait at most ``grace`` seconds; return the names that overran."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if not tasks:
            return []
        _, pending = await asyncio.wait(tasks, timeout=max(grace, 0.0))
        overran = sorted(task.get_name() for task in pending)
        if overran:
            log.error("shutdown_overran", supervisor=self.name, tasks=overran, grace=grace)
        return overran

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            try:
                await self.wait()
            except Escalated:
                pass
            except asyncio.CancelledError:
                await self.shutdown(grace=float("inf"))
                raise
        await self.shutdown(grace=float("inf"))
        if exc is None and self.failure is not None:
            raise self.failure from self.failure.error

    # --- inside -----------------------------------------------------------------------------
    async def _guard(self, spec: _Spec) -> None:
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            started = loop.time()
            try:
                await spec.factory()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the guard: every crash is logged and acted on here
                if loop.time() - started >= spec.backoff.reset_after:
                    attempt = 0
                attempt += 1
                exhausted = spec.max_restarts is not None and attempt > spec.max_restarts
                if spec.on_crash is OnCrash.ESCALATE or exhausted:
                    log.error(
                        "task_crashed",
                        task=spec.name,
                        action="escalate",
                        attempt=attempt,
                        exc_info=exc,
                    )
                    self._escalate(spec.name, exc)
                    return
                delay = spec.backoff.delay(attempt)
                log.error(
                    "task_crashed",
                    task=spec.name,
                    action="restart",
                    attempt=attempt,
                    restart_in=delay,
                    exc_info=exc,
                )
                await asyncio.sleep(delay)
                log.info("task_restarting", task=spec.name, attempt=attempt)
            else:
                log.info("task_finished", task=spec.name)
                return

    def _escalate(self, name: str, error: BaseException) -> None:
        if self.failure is None:
            self.failure = Escalated(name, error)
        self._failed.set()
        if self._on_escalate is not None:
            self._on_escalate(name, error)

    def _forget(self, task: asyncio.Task[None]) -> None:
        name = task.get_name()
        if self._tasks.get(name) is task:
            del self._tasks[name]
        if not task.cancelled() and task.exception() is not None:
            # Only BaseExceptions the guard lets through end up here; still never lost.
            error = task.exception()
            assert error is not None
            log.error("task_crashed", task=name, action="escalate", exc_info=error)
            self._escalate(name, error)
        if not self._tasks:
            self._idle.set()


# --- the service lifecycle ------------------------------------------------------------------
ServiceMain = Callable[[Supervisor], Awaitable[None]]


@dataclass(frozen=True)
class ServiceResult:
    exit_code: int  # 0 after a signal or a normal return, 1 after an escalated crash
    overran: tuple[str, ...]  # tasks still running when the grace deadline passed
    failure: Escalated | None


async def run_service(
    main: ServiceMain,
    *,
    grace: float,
    signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
    stop: asyncio.Event | None = None,
) -> ServiceResult:
    """Run ``main(workers)`` until a signal, ``stop`` being set, a crash, or ``main`` returning.

    ``main`` wires the deployable (opens pools, starts servers in ``async with`` blocks) and
    spawns its background loops on ``workers``; it should then wait (e.g. on an Event) so its
    context managers stay open. On the way out the workers are cancelled first, then ``main``
    (so its resources outlive their users), all within ``grace`` seconds together.
    """
    loop = asyncio.get_running_loop()
    stopping = stop if stop is not None else asyncio.Event()

    def request_stop(_: str, __: BaseException) -> None:
        stopping.set()

    def on_signal(sig: signal.Signals) -> None:
        log.info("shutdown_requested", signal=sig.name)
        stopping.set()

    previous: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int] = {}
    for sig in signals:
        handler = signal.getsignal(sig)
        if handler is not None:
            previous[sig] = handler
        loop.add_signal_handler(sig, on_signal, sig)

    workers = Supervisor(name="workers", on_escalate=request_stop)
    outer = Supervisor(name="service", on_escalate=request_stop)

    async def run_main() -> None:
        try:
            await main(workers)
        finally:
            stopping.set()

    try:
        outer.spawn("main", run_main, on_crash=OnCrash.ESCALATE)
        log.info("service_started")
        await stopping.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
            if sig in previous:
                signal.signal(sig, previous[sig])
        deadline = loop.time() + grace
        overran = await workers.shutdown(grace)
        overran += await outer.shutdown(deadline - loop.time())
    failure = outer.failure or workers.failure
    result = ServiceResult(exit_code=1 if failure else 0, overran=tuple(overran), failure=failure)
    log.info("service_stopped", exit_code=result.exit_code, overran=list(result.overran))
    return result


def serve(
    main: ServiceMain,
    *,
    grace: float,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> NoReturn:
    """For ``__main__``: run the service on a fresh loop (``loop_factory``'s, e.g. uvloop's)
    and exit with its status."""
    runner = asyncio.Runner(loop_factory=loop_factory)
    result = runner.run(run_service(main, grace=grace))
    if result.overran:
        # A task ignored cancellation; closing the loop would wait for it forever.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(result.exit_code or 1)
    runner.close()
    raise SystemExit(result.exit_code)
