"""The model registry's repository (shared/db/registry.py) against a real PostgreSQL: version
numbers allocated once per run and never reused, decisions taken once, archive rules, the
NOTIFY a decision sends, and tenant scoping."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from shared.db.registry import (
    APPROVALS_CHANNEL,
    AuditEntry,
    RegistryReader,
    RunRef,
    VersionChange,
    VersionRow,
)
from shared.db.registry_store import RegistryStore
from shared.errors import Conflict, NotFound

AUDIT = AuditEntry(tenant="acme", action="stage_test", outcome="succeeded", detail={})


def run(n: int) -> RunRef:
    return RunRef("host", "kubeopera-data-acme", f"train-{n}", f"uid-{n}")


async def register(pool: asyncpg.Pool, n: int, *, model: str = "churn") -> VersionRow:
    async with RegistryStore.transaction(pool) as store:
        row = await store.lock_model("acme", model)
        version = await store.allocate_version(
            row,
            run(n),
            pipeline_id="p1",
            pipeline_version=1,
            prefix_of=lambda number: f"tenants/acme/models/{model}/{number}/",
            model_file="model.tgz",
        )
        change = VersionChange(
            row.id,
            version.number,
            state="registered",
            only_from=("registering",),
            scorecard={"auc": 0.9},
            lineage={"run": run(n).name},
        )
        await store.record_outcome(
            run(n), "register", {"phase": "Succeeded"}, audit=AUDIT, change=change
        )
        found = await store.version(row.id, version.number)
    assert found is not None
    return found


async def test_one_version_per_run_and_numbers_in_order(db: asyncpg.Pool) -> None:
    first = await register(db, 1)
    again = await register(db, 1)
    second = await register(db, 2)
    assert (first.number, again.number, second.number) == (1, 1, 2)
    assert first.state == "registered"
    assert first.scorecard == {"auc": 0.9}
    assert first.prefix == "tenants/acme/models/churn/1/"
    assert await db.fetchval("SELECT count(*) FROM model_versions") == 2


async def test_concurrent_registrations_get_distinct_numbers(db: asyncpg.Pool) -> None:
    versions = await asyncio.gather(*(register(db, n) for n in range(8)))
    assert sorted(v.number for v in versions) == list(range(1, 9))
    assert await db.fetchval("SELECT count(DISTINCT model_id) FROM model_versions") == 1


async def test_outcome_recorded_once(db: asyncpg.Pool) -> None:
    store = RegistryStore(db)
    first, inserted = await store.record_outcome(
        run(1), "gate", {"phase": "Succeeded"}, audit=AUDIT
    )
    second, again = await store.record_outcome(run(1), "gate", {"phase": "Failed"}, audit=AUDIT)
    assert (inserted, again) == (True, False)
    # The audit entry goes with the insert that won, never with the one that lost.
    assert await db.fetchval("SELECT count(*) FROM run_actions WHERE run_uid = 'uid-1'") == 1
    assert second.outcome == first.outcome == {"phase": "Succeeded"}
    assert [o.stage for o in await store.open_outcomes()] == ["gate"]
    assert await store.open_outcomes(older_than=3600) == []
    await store.mark_completed(run(1).uid, "gate", run(1).attempt)
    assert await store.open_outcomes() == []


async def approval_for(db: asyncpg.Pool, n: int, *, expires_in: float = 3600) -> VersionRow:
    version = await register(db, n)
    async with RegistryStore.transaction(db) as store:
        await store.request_approval(version, expires_in=expires_in, attempt="")
    return version


async def test_a_decision_is_taken_once_and_notified(db: asyncpg.Pool, database_url: str) -> None:
    version = await approval_for(db, 1)
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(database_url)
    await listener.add_listener(APPROVALS_CHANNEL, lambda *args: heard.put_nowait(args[3]))
    try:
        reader = RegistryReader(db)
        decided = await reader.decide(
            version.model_id, "train-1", tenant="acme", approve=True, actor="alice"
        )
        assert (decided.state, decided.decided_by) == ("approved", "alice")
        assert await asyncio.wait_for(heard.get(), 5) == "uid-1"
        with pytest.raises(Conflict, match="approved already"):
            await reader.decide(
                version.model_id, "uid-1", tenant="acme", approve=False, actor="bob"
            )
        assert (await RegistryStore(db).expire_due(actor="stagectl")) == []
    finally:
        await listener.close()


async def test_expiry_and_decision_race_decides_once(db: asyncpg.Pool) -> None:
    version = await approval_for(db, 1, expires_in=-1)
    reader = RegistryReader(db)
    results = await asyncio.gather(
        RegistryStore(db).expire_due(actor="stagectl"),
        reader.decide(version.model_id, "uid-1", tenant="acme", approve=True, actor="alice"),
        return_exceptions=True,
    )
    expired, decided = results
    expiry_won = expired == ["uid-1"]
    decision_won = not isinstance(decided, BaseException)
    assert expiry_won != decision_won  # exactly one of them decided
    assert isinstance(decided, Conflict) == expiry_won
    approval = await reader.approval("uid-1")
    assert approval is not None
    assert approval.state in ("expired", "approved")


async def test_another_tenants_approval_is_not_found(db: asyncpg.Pool) -> None:
    version = await approval_for(db, 1)
    with pytest.raises(NotFound):
        await RegistryReader(db).decide(
            version.model_id, "uid-1", tenant="other", approve=True, actor="mallory"
        )
    with pytest.raises(NotFound):
        await RegistryReader(db).decide(
            version.model_id, "uid-9", tenant="acme", approve=True, actor="alice"
        )
    assert await RegistryReader(db).find(version.model_id, tenant="other") is None
    assert [a.run_uid for a in await RegistryReader(db).approvals(version.model_id)] == ["uid-1"]


async def test_archive_refuses_production_and_unfinished_versions(db: asyncpg.Pool) -> None:
    first = await register(db, 1)
    second = await register(db, 2)
    reader = RegistryReader(db)
    await reader.mark_production(first.model_id, 1)
    with pytest.raises(Conflict, match="production"):
        await reader.archive(first.model_id, 1, tenant="acme", actor="alice")
    # Registered with no release ending yet: its gate is to come, so its release is in flight.
    with pytest.raises(Conflict, match="in flight"):
        await reader.archive(second.model_id, 2, tenant="acme", actor="alice")
    await db.execute("UPDATE model_versions SET release_outcome = 'completed' WHERE number = 2")
    archived = await reader.archive(second.model_id, 2, tenant="acme", actor="alice")
    assert (archived.state, archived.archived_by) == ("archived", "alice")
    assert (await reader.archive(second.model_id, 2, tenant="acme", actor="bob")).archived_by == (
        "alice"
    )
    with pytest.raises(NotFound):
        await reader.archive(second.model_id, 2, tenant="other", actor="mallory")
    async with RegistryStore.transaction(db) as store:
        model = await store.lock_model("acme", "churn")
        pending = await store.allocate_version(
            model,
            run(3),
            pipeline_id="p1",
            pipeline_version=1,
            prefix_of=lambda n: f"p/{n}/",
            model_file="m",
        )
    with pytest.raises(Conflict, match="registering"):
        await reader.archive(pending.model_id, pending.number, tenant="acme", actor="alice")
    page = await reader.page(tenant="acme", after=None, limit=10)
    assert [m.name for m in page.rows] == ["churn"]
    assert page.total == 1
    assert (await reader.find(first.model_id, tenant=None)) is not None
    assert [v.number for v in await reader.versions(first.model_id)] == [3, 2, 1]
