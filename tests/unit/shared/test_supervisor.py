"""Supervisor and service lifecycle: crashes are logged, restarted or escalated, never lost.

Time-dependent behaviour runs under looptime (fake loop time), so no test sleeps for real.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

import shared.tasks
from shared.tasks import Backoff, Escalated, OnCrash, Supervisor, run_service


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[MutableMapping[str, Any]]]:
    with capture_logs() as captured:
        # A fresh proxy: the module's may have been cached by an earlier configure().
        monkeypatch.setattr(shared.tasks, "log", structlog.get_logger("shared.tasks"))
        yield captured


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == name]


class Flaky:
    """Crashes ``crashes`` times, then blocks until cancelled."""

    def __init__(self, crashes: int) -> None:
        self.crashes = crashes
        self.starts: list[float] = []

    async def __call__(self) -> None:
        self.starts.append(asyncio.get_running_loop().time())
        if len(self.starts) <= self.crashes:
            raise RuntimeError(f"crash {len(self.starts)}")
        await asyncio.Event().wait()


def test_backoff_grows_and_caps() -> None:
    backoff = Backoff(initial=1.0, factor=2.0, maximum=5.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


@pytest.mark.looptime
async def test_crash_is_logged_with_the_task_name_and_restarted_with_backoff(
    logs: list[MutableMapping[str, Any]],
) -> None:
    flaky = Flaky(crashes=3)
    supervisor = Supervisor()
    supervisor.spawn("informer:prod-eu", flaky, backoff=Backoff(initial=1.0, factor=2.0))
    await asyncio.sleep(10)
    start = flaky.starts[0]
    assert [t - start for t in flaky.starts] == [0.0, 1.0, 3.0, 7.0]
    crashes = events(logs, "task_crashed")
    assert [c["task"] for c in crashes] == ["informer:prod-eu"] * 3
    assert [c["restart_in"] for c in crashes] == [1.0, 2.0, 4.0]
    assert all(isinstance(c["exc_info"], RuntimeError) for c in crashes)
    assert supervisor.names == ["informer:prod-eu"]
    assert supervisor.failure is None
    assert await supervisor.shutdown(grace=1) == []
    assert supervisor.names == []


@pytest.mark.looptime
async def test_a_healthy_run_resets_the_backoff() -> None:
    starts: list[float] = []

    async def crash_after_running_a_while() -> None:
        starts.append(asyncio.get_running_loop().time())
        if len(starts) < 3:
            await asyncio.sleep(100 if len(starts) == 2 else 0)
            raise RuntimeError("boom")
        await asyncio.Event().wait()

    supervisor = Supervisor()
    backoff = Backoff(initial=1.0, factor=10.0, reset_after=60.0)
    supervisor.spawn("loop", crash_after_running_a_while, backoff=backoff)
    await asyncio.sleep(200)
    # Crash 1 waits 1 s; run 2 lasted 100 s (healthy), so crash 2 waits 1 s again, not 10 s.
    assert [round(t - starts[0]) for t in starts] == [0, 1, 102]
    await supervisor.shutdown(grace=1)


async def test_escalated_crash_stops_the_group_and_raises(
    logs: list[MutableMapping[str, Any]],
) -> None:
    cancelled = asyncio.Event()

    async def bystander() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def broken() -> None:
        raise ValueError("schema mismatch")

    async def run_group() -> None:
        async with Supervisor() as supervisor:
            supervisor.spawn("bystander", bystander)
            supervisor.spawn("broken", broken, on_crash=OnCrash.ESCALATE)

    with pytest.raises(Escalated) as caught:
        await run_group()
    assert caught.value.task == "broken"
    assert isinstance(caught.value.error, ValueError)
    assert cancelled.is_set()
    [crash] = events(logs, "task_crashed")
    assert (crash["task"], crash["action"]) == ("broken", "escalate")


@pytest.mark.looptime
async def test_too_many_restarts_escalate() -> None:
    flaky = Flaky(crashes=10)
    supervisor = Supervisor()
    supervisor.spawn("loop", flaky, max_restarts=2, backoff=Backoff(initial=1.0))
    failure = await asyncio.wait_for(supervisor.wait_failed(), timeout=60)
    assert failure.task == "loop"
    assert len(flaky.starts) == 3
    await supervisor.shutdown(grace=1)


async def test_group_waits_for_tasks_that_finish(logs: list[MutableMapping[str, Any]]) -> None:
    done: list[str] = []

    async def one_shot() -> None:
        await asyncio.sleep(0)
        done.append("x")

    async with Supervisor() as supervisor:
        supervisor.spawn("one-shot", one_shot)
    assert done == ["x"]
    assert events(logs, "task_finished")[0]["task"] == "one-shot"


async def test_names_are_unique_and_a_closed_supervisor_refuses_work() -> None:
    supervisor = Supervisor()
    supervisor.spawn("a", asyncio.Event().wait)
    with pytest.raises(ValueError, match="already running"):
        supervisor.spawn("a", asyncio.Event().wait)
    await supervisor.cancel("a")
    assert supervisor.names == []
    await supervisor.shutdown(grace=1)
    with pytest.raises(RuntimeError, match="shut down"):
        supervisor.spawn("b", asyncio.Event().wait)


@pytest.mark.looptime
async def test_shutdown_reports_tasks_that_overrun_the_grace(
    logs: list[MutableMapping[str, Any]],
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                await asyncio.sleep(30)  # cleanup that takes longer than the grace

    supervisor = Supervisor()
    supervisor.spawn("stubborn", stubborn)
    supervisor.spawn("polite", asyncio.Event().wait)
    await asyncio.sleep(0)
    assert await supervisor.shutdown(grace=5) == ["stubborn"]
    assert events(logs, "shutdown_overran")[0]["tasks"] == ["stubborn"]
    release.set()
    await asyncio.sleep(30)


# --- run_service ------------------------------------------------------------------------------
async def test_run_service_stops_workers_before_main_and_exits_zero() -> None:
    stop = asyncio.Event()
    order: list[str] = []

    async def worker() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            order.append("worker stopped")

    async def main(workers: Supervisor) -> None:
        workers.spawn("worker", worker)
        try:
            await asyncio.Event().wait()
        finally:
            order.append("main cleaned up")

    async def stop_soon() -> None:
        await asyncio.sleep(0.01)
        stop.set()

    stopper = asyncio.ensure_future(stop_soon())
    result = await run_service(main, grace=1.0, stop=stop, signals=())
    await stopper
    assert result.exit_code == 0
    assert result.overran == ()
    assert order == ["worker stopped", "main cleaned up"]


async def test_run_service_exits_one_when_a_worker_escalates() -> None:
    async def broken() -> None:
        raise RuntimeError("cannot continue")

    async def main(workers: Supervisor) -> None:
        workers.spawn("broken", broken, on_crash=OnCrash.ESCALATE)
        await asyncio.Event().wait()

    result = await run_service(main, grace=1.0, signals=())
    assert result.exit_code == 1
    assert result.failure is not None
    assert result.failure.task == "broken"


async def test_run_service_exits_one_when_main_crashes() -> None:
    async def main(workers: Supervisor) -> None:
        raise RuntimeError("cannot wire")

    result = await run_service(main, grace=1.0, signals=())
    assert (result.exit_code, result.failure and result.failure.task) == (1, "main")


async def test_run_service_ends_when_main_returns() -> None:
    async def main(workers: Supervisor) -> None:
        return None

    result = await run_service(main, grace=1.0, signals=())
    assert result.exit_code == 0


async def test_sigterm_stops_the_service_and_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    started = asyncio.Event()

    async def main(workers: Supervisor) -> None:
        started.set()
        await asyncio.Event().wait()

    async def send_sigterm() -> None:
        await started.wait()
        os.kill(os.getpid(), signal.SIGTERM)

    sender = asyncio.ensure_future(send_sigterm())
    result = await asyncio.wait_for(
        run_service(main, grace=1.0, signals=(signal.SIGTERM,)), timeout=5
    )
    await sender
    assert result.exit_code == 0
    assert signal.getsignal(signal.SIGTERM) == before
