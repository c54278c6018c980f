"""``serve`` in a real process: SIGTERM stops it cleanly; a task ignoring cancellation cannot
keep it alive past the grace deadline; an escalated crash exits non-zero."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import asyncio, sys
    from shared import logging
    from shared.tasks import OnCrash, serve

    logging.configure(service="test", json=True)

    MODE = sys.argv[1]

    async def stubborn():
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                pass  # a bug: swallows cancellation

    async def broken():
        raise RuntimeError("cannot go on")

    async def main(workers):
        if MODE == "stubborn":
            workers.spawn("stubborn", stubborn)
        if MODE == "crash":
            workers.spawn("broken", broken, on_crash=OnCrash.ESCALATE)
        print("ready", flush=True)
        await asyncio.Event().wait()

    serve(main, grace=0.2)
    """
)


async def run(mode: str, *, terminate: bool) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PROGRAM,
        mode,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=10)
        assert line == b"ready\n"
        if terminate:
            process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=10)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return code, (await process.stderr.read()).decode()


async def test_sigterm_exits_zero() -> None:
    code, log = await run("plain", terminate=True)
    assert code == 0
    assert "shutdown_requested" in log


async def test_a_task_swallowing_cancellation_cannot_hold_the_process() -> None:
    code, log = await run("stubborn", terminate=True)
    assert code == 1
    assert "shutdown_overran" in log
    assert "stubborn" in log


async def test_escalated_crash_exits_one() -> None:
    code, log = await run("crash", terminate=False)
    assert code == 1
    assert "task_crashed" in log
    assert "cannot go on" in log
