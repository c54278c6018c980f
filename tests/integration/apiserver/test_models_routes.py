"""``/models`` over registry rows written through the registry's own repository (as stagectl
writes them), real PostgreSQL and moto S3: tenant scoping, permissions, the two files a
version serves (streamed, nothing else, no way out of the registry), decisions taken once, and
the audit of every write."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import boto3
import pytest

from shared.db.registry import (
    AuditEntry,
    RegistryReader,
    RunRef,
    VersionChange,
    VersionRow,
)
from shared.db.registry_store import RegistryStore
from tests.integration.apiserver.conftest import Api, AppFactory, headers

BUCKET = "wm-models"
READ = "models.read"
ALL = "models.read,models.approve,models.deploy"
SCORECARD = {"metrics": {"auc": 0.91, "f1": 0.8}}
WEIGHTS = b"weights"
DIGEST = "sha256:" + hashlib.sha256(WEIGHTS).hexdigest()


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")


@pytest.fixture
def s3(moto_endpoint: str, aws_credentials: None) -> Any:
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    if BUCKET not in {b["Name"] for b in client.list_buckets()["Buckets"]}:
        client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
async def api(make_api: AppFactory, moto_endpoint: str, s3: Any) -> Api:
    return await make_api(s3=(moto_endpoint, BUCKET))


def run(tenant: str, n: int) -> RunRef:
    return RunRef("host", f"kubeopera-data-{tenant}", f"train-{n}", f"{tenant}-uid-{n}")


async def register(
    api: Api, s3: Any, tenant: str, n: int, *, model: str = "churn", files: bool = True
) -> VersionRow:
    """What stagectl's register stage leaves: a registered version and its files."""
    async with RegistryStore.transaction(api.pool) as store:
        row = await store.lock_model(tenant, model)
        version = await store.allocate_version(
            row,
            run(tenant, n),
            pipeline_id="p1",
            pipeline_version=2,
            prefix_of=lambda number: f"tenants/{tenant}/models/{model}/{number}/",
            model_file="model.tgz",
        )
        lineage = {"run": run(tenant, n).name, "pipeline": {"id": "p1", "version": 2}}
        await store.record_outcome(
            run(tenant, n),
            "register",
            {"phase": "Succeeded", "outputs": {"version": str(version.number)}},
            audit=AuditEntry(tenant, "stage_register", "succeeded", {}),
            change=VersionChange(
                row.id,
                version.number,
                state="registered",
                only_from=("registering",),
                scorecard=SCORECARD,
                lineage=lineage,
                digest=DIGEST,
            ),
        )
        found = await store.version(row.id, version.number)
    assert found is not None
    if files:
        s3.put_object(
            Bucket=BUCKET, Key=f"{found.prefix}eval_scorecard.json", Body=json.dumps(SCORECARD)
        )
        s3.put_object(Bucket=BUCKET, Key=f"{found.prefix}lineage.json", Body=json.dumps(lineage))
        s3.put_object(Bucket=BUCKET, Key=f"{found.prefix}model.tgz", Body=WEIGHTS)
    return found


async def pending(api: Api, version: VersionRow) -> None:
    async with RegistryStore.transaction(api.pool) as store:
        await store.request_approval(version, expires_in=3600, attempt="")


async def call(
    api: Api, method: str, path: str, *, as_: dict[str, str], **kwargs: Any
) -> tuple[int, Any]:
    response = await api.client.request(method, f"/api/v1/{path}", headers=as_, **kwargs)
    if response.content_type == "application/json":
        return response.status, await response.json()
    return response.status, await response.read()


async def actions(api: Api) -> list[dict[str, Any]]:
    rows = await api.pool.fetch(
        "SELECT name, run_uid, tenant, actor, action, outcome, parameters FROM run_actions "
        "WHERE action NOT LIKE 'stage_%' ORDER BY id"  # the routes' own, not the registration's
    )
    return [dict(row) for row in rows]


async def test_models_are_listed_and_read_within_the_tenant(api: Api, s3: Any) -> None:
    for number, model in enumerate(["churn", "fraud", "ranker"]):
        await register(api, s3, "acme", number, model=model)
    other = await register(api, s3, "globex", 1, model="churn")
    first = await register(api, s3, "acme", 10)
    await pending(api, first)

    pages, cursor = [], None
    while True:
        query = "models?limit=2" + (f"&cursor={cursor}" if cursor else "")
        status, page = await call(api, "GET", query, as_=headers(permissions=READ))
        assert status == 200, page
        assert page["total"] == 3
        pages.append([item["name"] for item in page["items"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == [["churn", "fraud"], ["ranker"]]

    status, detail = await call(
        api, "GET", f"models/{first.model_id}", as_=headers(permissions=READ)
    )
    assert status == 200, detail
    assert [v["number"] for v in detail["versions"]] == [2, 1]
    newest = detail["versions"][0]
    assert newest["state"] == "registered"
    assert newest["scorecard"] == SCORECARD
    assert newest["run"] == {
        "cluster": "host",
        "namespace": "kubeopera-data-acme",
        "name": "train-10",
        "uid": "acme-uid-10",
    }
    assert newest["files"] == ["eval_scorecard.json", "lineage.json"]
    assert newest["digest"] == DIGEST
    assert [a["run"]["name"] for a in detail["pending_approvals"]] == ["train-10"]
    assert detail["more_versions"] is False

    status, answer = await call(
        api, "GET", f"models/{other.model_id}", as_=headers(permissions=READ)
    )
    assert (status, answer["error"]) == (404, "not_found")
    status, answer = await call(
        api, "GET", f"models/{other.model_id}", as_=headers("globex", permissions="pipelines.read")
    )
    assert (status, answer["details"]) == (403, {"permission": "models.read"})
    status, everyone = await call(api, "GET", "models", as_=headers(None, admin=True))
    assert everyone["total"] == 4


async def test_a_version_serves_its_scorecard_and_lineage_and_nothing_else(
    api: Api, s3: Any
) -> None:
    version = await register(api, s3, "acme", 1)
    base = f"models/{version.model_id}/versions/1/files"
    response = await api.client.get(
        f"/api/v1/{base}/eval_scorecard.json", headers=headers(permissions=READ)
    )
    assert response.status == 200
    assert response.content_type == "application/json"
    assert "churn-v1-eval_scorecard.json" in response.headers["Content-Disposition"]
    assert await response.json() == SCORECARD
    status, lineage = await call(api, "GET", f"{base}/lineage.json", as_=headers(permissions=READ))
    assert (status, lineage["run"]) == (200, "train-1")

    for name, expected in [
        ("model.tgz", 404),  # in the prefix, but not one of the two
        ("..", 404),
        ("%2E%2E", 404),
        ("..%2F..%2Fartifacts%2Fsecret.json", 400),
        ("eval_scorecard.json%00", 400),
    ]:
        response = await api.client.get(f"/api/v1/{base}/{name}", headers=headers(permissions=READ))
        assert response.status == expected, name
    status, _ = await call(
        api,
        "GET",
        f"models/{version.model_id}/versions/9/files/lineage.json",
        as_=headers(permissions=READ),
    )
    assert status == 404
    status, _ = await call(
        api,
        "GET",
        f"models/{version.model_id}/versions/0/files/lineage.json",
        as_=headers(permissions=READ),
    )
    assert status == 400
    status, _ = await call(
        api, "GET", f"{base}/lineage.json", as_=headers("globex", permissions=READ)
    )
    assert status == 404


async def test_a_registering_version_or_a_prefix_outside_the_registry_serves_nothing(
    api: Api, s3: Any
) -> None:
    version = await register(api, s3, "acme", 1)
    await api.pool.execute(
        "UPDATE model_versions SET prefix = 'tenants/globex/models/churn/1/' WHERE run_uid = $1",
        version.run_uid,
    )
    s3.put_object(Bucket=BUCKET, Key="tenants/globex/models/churn/1/lineage.json", Body=b"{}")
    base = f"models/{version.model_id}/versions/1/files/lineage.json"
    status, _ = await call(api, "GET", base, as_=headers(permissions=READ))
    assert status == 404
    await api.pool.execute(
        "UPDATE model_versions SET prefix = $2, state = 'registering' WHERE run_uid = $1",
        version.run_uid,
        version.prefix,
    )
    status, answer = await call(api, "GET", base, as_=headers(permissions=READ))
    assert (status, answer["details"]["state"]) == (404, "registering")


async def test_a_release_is_decided_once_and_every_decision_is_audited(api: Api, s3: Any) -> None:
    first = await register(api, s3, "acme", 1)
    second = await register(api, s3, "acme", 2)
    await pending(api, first)
    await pending(api, second)
    approvals = f"models/{first.model_id}/approvals"

    status, answer = await call(
        api, "POST", f"{approvals}/train-1/approve", as_=headers(permissions=READ)
    )
    assert (status, answer["details"]) == (403, {"permission": "models.approve"})
    status, answer = await call(
        api, "POST", f"{approvals}/train-1/approve", as_=headers("globex", permissions=ALL)
    )
    assert status == 404

    approver = headers(permissions=ALL, actor="carol@acme")
    status, decided = await call(
        api, "POST", f"{approvals}/train-1/approve", as_=approver, json={"reason": "looks good"}
    )
    assert status == 200, decided
    assert decided["approval"]["state"] == "approved"
    assert decided["approval"]["decided_by"] == "carol@acme"
    assert decided["approval"]["reason"] == "looks good"
    status, again = await call(api, "POST", f"{approvals}/train-1/reject", as_=approver)
    assert (status, again["details"]["state"]) == (409, "approved")
    # By uid too, without a body.
    status, rejected = await call(api, "POST", f"{approvals}/acme-uid-2/reject", as_=approver)
    assert (status, rejected["approval"]["state"]) == (200, "rejected")
    status, _ = await call(api, "POST", f"{approvals}/train-9/approve", as_=approver)
    assert status == 404
    status, answer = await call(
        api, "POST", f"{approvals}/train-2/approve", as_=approver, json={"verdict": "yes"}
    )
    assert (status, answer["details"]) == (400, {"parameter": "verdict"})

    decision = await RegistryReader(api.pool).approval("acme-uid-1")
    assert decision is not None
    assert decision.state == "approved"
    assert await actions(api) == [
        {
            "name": "train-1",
            "run_uid": "acme-uid-1",
            "tenant": "acme",
            "actor": "carol@acme",
            "action": "model_approve",
            "outcome": "succeeded",
            "parameters": {"model": first.model_id, "version": 1, "reason": "looks good"},
        },
        {
            "name": "train-1",
            "run_uid": "acme-uid-1",
            "tenant": "acme",
            "actor": "carol@acme",
            "action": "model_reject",
            "outcome": "failed",
            "parameters": {"model": first.model_id, "version": 1},
        },
        {
            "name": "train-2",
            "run_uid": "acme-uid-2",
            "tenant": "acme",
            "actor": "carol@acme",
            "action": "model_reject",
            "outcome": "succeeded",
            "parameters": {"model": first.model_id, "version": 2},
        },
    ]


async def test_archive_needs_models_deploy_refuses_production_and_is_audited(
    api: Api, s3: Any
) -> None:
    first = await register(api, s3, "acme", 1)
    await register(api, s3, "acme", 2)
    await RegistryReader(api.pool).mark_production(first.model_id, 2)
    base = f"models/{first.model_id}/versions"
    deployer = headers(permissions=ALL, actor="dan@acme")
    # Its release still in flight (registered, no ending recorded yet): refused, naming the run.
    status, refused = await call(api, "POST", f"{base}/1/archive", as_=deployer)
    assert status == 409, refused
    assert refused["details"]["run"] == {"namespace": "kubeopera-data-acme", "name": "train-1"}
    await api.pool.execute("UPDATE model_versions SET release_outcome = 'completed'")
    status, answer = await call(
        api, "POST", f"{base}/1/archive", as_=headers(permissions="models.read,models.approve")
    )
    assert (status, answer["details"]) == (403, {"permission": "models.deploy"})

    status, archived = await call(api, "POST", f"{base}/1/archive", as_=deployer)
    assert status == 200, archived
    assert archived["version"]["state"] == "archived"
    assert archived["version"]["archived_by"] == "dan@acme"
    status, refused = await call(api, "POST", f"{base}/2/archive", as_=deployer)
    assert status == 409, refused
    status, _ = await call(api, "POST", f"{base}/3/archive", as_=deployer)
    assert status == 404
    status, _ = await call(api, "POST", f"{base}/1/archive", as_=headers("globex", permissions=ALL))
    assert status == 404
    assert [(a["action"], a["name"], a["outcome"]) for a in await actions(api)] == [
        ("model_archive", "train-1", "failed"),
        ("model_archive", "train-1", "succeeded"),
        ("model_archive", "train-2", "failed"),
    ]


async def test_archive_is_refused_while_the_version_serves_or_waits_for_approval(
    api: Api, s3: Any
) -> None:
    serving = await register(api, s3, "acme", 1)
    waiting = await register(api, s3, "acme", 2)
    await api.pool.execute("UPDATE model_versions SET state = 'passed'")
    await pending(api, waiting)
    await api.pool.execute(
        "UPDATE model_versions SET release_outcome = 'completed' WHERE number = 1"
    )
    await api.pool.execute(
        "INSERT INTO model_deployments (model_id, environment, version, serving, requested_by, "
        "deadline) VALUES ($1, 'staging', 1, '{}', 'stagectl', now())",
        serving.model_id,
    )
    base = f"models/{serving.model_id}/versions"
    deployer = headers(permissions=ALL, actor="dan@acme")
    status, refused = await call(api, "POST", f"{base}/1/archive", as_=deployer)
    assert status == 409, refused
    assert refused["details"]["serving"] == ["staging"]
    assert "serves staging" in refused["message"]
    status, refused = await call(api, "POST", f"{base}/2/archive", as_=deployer)
    assert status == 409, refused
    assert "waiting for approval" in refused["message"]
    # Once decided and ended, and once staging serves another version, both may go.
    await api.pool.execute("UPDATE approvals SET state = 'rejected', decided_at = now()")
    await api.pool.execute(
        "UPDATE model_versions SET release_outcome = 'rejected' WHERE number = 2"
    )
    status, archived = await call(api, "POST", f"{base}/2/archive", as_=deployer)
    assert status == 200, archived
    await api.pool.execute("DELETE FROM model_deployments")
    status, archived = await call(api, "POST", f"{base}/1/archive", as_=deployer)
    assert status == 200, archived
    states = await api.pool.fetch("SELECT state FROM model_versions ORDER BY number")
    assert [r["state"] for r in states] == ["archived", "archived"]
