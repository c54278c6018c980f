"""A save's attachments all or nothing (``compiler.pipelines.attaching.Attaching``), with fake
attachments recording what they were told: told in order, put back newest first to the
recorded version (or removed), one that fails to be put back keeping no other from it, and
settled once the outcome is recorded."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from compiler.pipelines.attaching import Attaching, current_of
from compiler.pipelines.ports import Current
from shared.db.pipelines import VersionRow
from shared.errors import DependencyDown
from shared.pipelines import PipelineKind


def version(number: int) -> VersionRow:
    return VersionRow(
        pipeline_id="p1",
        version=number,
        definition={},
        parameters=[],
        settings={},
        stages=[],
        template_name=f"p-p1-v{number}",
        template={},
        template_removed_at=None,
        created_by="alice",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


class Fake:
    def __init__(self, name: str, log: list[str], *, fails: set[str] | None = None) -> None:
        self.name, self.log, self.fails = name, log, fails or set()

    def _do(self, what: str) -> None:
        self.log.append(f"{self.name}:{what}")
        if what.split("@")[0] in self.fails:
            raise DependencyDown(f"{self.name} refused {what}")

    async def attach(self, current: Current) -> None:
        self._do(f"attach@{current.version.version}")

    async def detach(self, tenant: str, kind: PipelineKind, pipeline_id: str) -> None:
        self._do("detach")

    async def settle(
        self, tenant: str, kind: PipelineKind, pipeline_id: str, current: Current | None
    ) -> None:
        self._do(f"settle@{None if current is None else current.version.version}")


def attaching(*fakes: Fake) -> Attaching:
    return Attaching(fakes, tenant="acme", kind="data", pipeline_id="p1")


def current(number: int) -> Current:
    return current_of("acme", "data", "nightly", version(number))


async def test_attach_tells_each_in_order_and_settle_follows_once_recorded() -> None:
    log: list[str] = []
    moving = attaching(Fake("a", log), Fake("b", log))
    await moving.attach(current(2))
    await moving.settle()
    assert log == ["a:attach@2", "b:attach@2", "a:settle@2", "b:settle@2"]
    assert not moving.touched


@pytest.mark.parametrize("failing", ["a", "b", "c"])
async def test_a_failure_puts_back_every_touched_one_newest_first(failing: str) -> None:
    log: list[str] = []
    fakes = [Fake(name, log, fails={"attach"} if name == failing else None) for name in "abc"]
    moving = attaching(*fakes)
    with pytest.raises(DependencyDown):
        await moving.attach(current(3))
    touched = "abc"[: "abc".index(failing) + 1]
    log.clear()
    for fake in fakes:
        fake.fails = set()
    assert await moving.restore(current(2))
    await moving.settle()
    assert log == [f"{name}:attach@2" for name in reversed(touched)] + [
        f"{name}:settle@2" for name in touched
    ]


async def test_a_failed_create_removes_what_it_touched() -> None:
    log: list[str] = []
    moving = attaching(Fake("a", log), Fake("b", log, fails={"attach"}), Fake("c", log))
    with pytest.raises(DependencyDown):
        await moving.attach(current(1))
    log.clear()
    assert await moving.restore(None)
    await moving.settle()
    assert log == ["b:detach", "a:detach", "a:settle@None", "b:settle@None"]


async def test_one_that_cannot_be_put_back_keeps_no_other_from_it() -> None:
    log: list[str] = []
    stuck = Fake("b", log)
    moving = attaching(Fake("a", log), stuck, Fake("c", log, fails={"attach"}))
    with pytest.raises(DependencyDown):
        await moving.attach(current(3))
    stuck.fails = {"attach"}
    log.clear()
    assert not await moving.restore(current(2))  # not complete: the reconciler finishes it
    assert log == ["c:attach@2", "b:attach@2", "a:attach@2"]


async def test_a_failed_delete_gives_every_detached_one_the_recorded_version_back() -> None:
    log: list[str] = []
    moving = attaching(Fake("a", log), Fake("b", log))
    await moving.detach()
    log.clear()
    assert await moving.restore(current(4))
    assert log == ["b:attach@4", "a:attach@4"]
