"""Data secrets end to end: through the apiserver's routes and the compiler's internal API onto
the sim host, with real PostgreSQL. Values go in and never come out: not in an answer, an error,
a log line or the audit."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from compiler.secrets.service import DataSecretService
from shared import labels as L
from shared.db.pipelines import PipelineStore
from shared.errors import Conflict, DependencyDown, Refused, WorkflowManagerError
from shared.k8s_objects import KubeObjects
from tests.integration.compiler.pipeline_stack import NS, Stack, body, headers, wizard

SECRETS = "pipelines.read,pipelines.write,pipelines.run,secrets.write"
VALUE = "hunter2-VALUE-s3cr3t"
OTHER_VALUE = "correct-horse-VALUE"


def writer(tenant: str = "acme", actor: str = "alice@acme") -> dict[str, str]:
    return headers(tenant, permissions=SECRETS, actor=actor)


def live_secret(stack: Stack, name: str, namespace: str = NS) -> dict[str, Any] | None:
    store = stack.world.host.store
    rtype = store.resolve("", "v1", "secrets")
    try:
        found: dict[str, Any] = store.get(rtype, namespace, name)
    except Exception:  # the emulator's own NotFound
        return None
    return found


async def audit(stack: Stack) -> list[dict[str, Any]]:
    rows = await stack.pool.fetch(
        "SELECT cluster_id, namespace, name, tenant, actor, action, parameters, outcome, detail "
        "FROM run_actions ORDER BY id"
    )
    return [dict(row) for row in rows]


Logs = Callable[[], str]


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[Logs]:
    """Everything either deployable logged so far (structlog events and stdlib records, at
    every level), as one text."""
    caplog.set_level(logging.DEBUG)
    # Pinned by shared.logging.configure in every deployable (its debug lines are response
    # bodies; tests/unit/shared/test_logging.py holds it).
    caplog.set_level(logging.INFO, logger="kubernetes_asyncio")
    with capture_logs() as captured:
        yield lambda: json.dumps(
            [captured, [record.getMessage() for record in caplog.records]], default=str
        )


def yaml_pipeline(name: str, container: str) -> dict[str, Any]:
    template = f"""
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata:
  name: t
spec:
  entrypoint: main
  templates:
    - name: main
      container:
        image: alpine:3.20
        command: [sh, -c, echo hi]
{container}
"""
    return {"name": name, "definition": {"type": "yaml", "template": template}}


def step_reading(secret: str, key: str = "token") -> dict[str, Any]:
    spec = wizard()
    spec["steps"][1]["env"] = [{"name": "TOKEN", "from_secret": {"name": secret, "key": key}}]
    return {"name": "loader", "definition": {"type": "wizard", "spec": spec}}


async def test_a_secret_is_created_listed_read_replaced_and_deleted_without_a_value_shown(
    stack: Stack, logs: Logs
) -> None:
    answers: list[Any] = []
    status, created = await stack.call(
        "PUT", "data-secrets/warehouse", as_=writer(), json={"data": {"token": VALUE, "user": "e"}}
    )
    answers.append(created)
    assert status == 201, created
    assert created["name"] == "warehouse"
    assert created["keys"] == ["token", "user"]
    assert created["created_by"] == created["updated_by"] == "alice@acme"
    assert created["created_at"]
    assert created["updated_at"]

    secret = live_secret(stack, "warehouse")
    assert secret is not None
    assert secret["metadata"]["labels"][L.DATA_SECRET] == "true"
    assert base64.b64decode(secret["data"]["token"]).decode() == VALUE
    assert secret["type"] == "Opaque"

    status, listing = await stack.call("GET", "data-secrets", as_=headers())
    answers.append(listing)
    assert status == 200, listing
    assert [item["name"] for item in listing["items"]] == ["warehouse"]
    assert (listing["total"], listing["next_cursor"]) == (1, None)
    status, read = await stack.call("GET", "data-secrets/warehouse", as_=headers())
    answers.append(read)
    assert (status, read) == (200, created)

    status, replaced = await stack.call(
        "PUT",
        "data-secrets/warehouse",
        as_=writer(actor="bob@acme"),
        json={"data": {"token": OTHER_VALUE}},
    )
    answers.append(replaced)
    assert status == 200, replaced
    assert replaced["keys"] == ["token"]
    assert (replaced["created_by"], replaced["updated_by"]) == ("alice@acme", "bob@acme")
    assert replaced["created_at"] == created["created_at"]
    secret = live_secret(stack, "warehouse")
    assert secret is not None
    assert base64.b64decode(secret["data"]["token"]).decode() == OTHER_VALUE
    assert "user" not in secret["data"]

    status, deleted = await stack.call("DELETE", "data-secrets/warehouse", as_=writer())
    assert (status, deleted) == (200, {"name": "warehouse", "deleted": True})
    assert live_secret(stack, "warehouse") is None
    status, missing = await stack.call("GET", "data-secrets/warehouse", as_=headers())
    answers.append(missing)
    assert status == 404, missing
    status, missing = await stack.call("DELETE", "data-secrets/warehouse", as_=writer())
    assert status == 404, missing

    rows = await audit(stack)
    assert [(row["action"], row["outcome"], row["actor"]) for row in rows] == [
        ("data_secret.create", "succeeded", "alice@acme"),
        ("data_secret.replace", "succeeded", "bob@acme"),
        ("data_secret.delete", "succeeded", "alice@acme"),
    ]
    assert {(row["namespace"], row["name"], row["tenant"]) for row in rows} == {
        (NS, "secret/warehouse", "acme")
    }
    assert rows[0]["parameters"] == {"keys": ["token", "user"]}
    assert rows[0]["detail"] == {"secret": "warehouse"}
    assert "data_secret_written" in logs()
    assert "data_secret_deleted" in logs()
    everything = json.dumps([answers, rows, logs()], default=str)
    for value in (VALUE, OTHER_VALUE):
        assert value not in everything
        assert base64.b64encode(value.encode()).decode() not in everything


MALFORMED: list[tuple[str, Any, int]] = [
    ("warehouse", {"data": {"token": [VALUE]}}, 400),
    ("warehouse", {"data": {"bad/key": VALUE}}, 400),
    ("warehouse", {"data": {"..": VALUE}}, 400),
    ("warehouse", {"data": {}}, 400),
    ("warehouse", {"data": VALUE}, 400),
    ("warehouse", {"data": {"token": VALUE}, "extra": VALUE}, 400),
    ("warehouse", {"data": {"token": VALUE * 4000}}, 400),
    ("warehouse", {"data": {"token": VALUE + "\u0000"}}, 400),
    ("kubeopera-artifact-credentials", {"data": {"secretKey": VALUE}}, 400),
    ("kubeopera-mlflow", {"data": {"password": VALUE}}, 400),
    ("Not_A_Name", {"data": {"token": VALUE}}, 400),
]


async def test_refused_writes_never_echo_a_value(stack: Stack, logs: Logs) -> None:
    answers = []
    for name, payload, expected in MALFORMED:
        status, answer = await stack.call("PUT", f"data-secrets/{name}", as_=writer(), json=payload)
        assert status == expected, (name, payload, answer)
        answers.append(answer)
    response = await stack.api.put(
        "/api/v1/data-secrets/warehouse", headers=writer(), data=f'{{"data": {{"k": "{VALUE}"'
    )
    assert response.status == 400
    answers.append(await response.text())
    assert live_secret(stack, "warehouse") is None
    assert await audit(stack) == []
    assert "request_refused" in logs()
    assert VALUE not in json.dumps([answers, logs()], default=str)


async def test_tenants_see_and_touch_only_their_own_secrets(stack: Stack) -> None:
    status, _ = await stack.call(
        "PUT", "data-secrets/warehouse", as_=writer(), json={"data": {"token": VALUE}}
    )
    assert status == 201
    globex = writer("globex", actor="bob@globex")
    status, listing = await stack.call("GET", "data-secrets", as_=globex)
    assert (status, listing["items"], listing["total"]) == (200, [], 0)
    for method in ("GET", "DELETE"):
        status, answer = await stack.call(method, "data-secrets/warehouse", as_=globex)
        assert (status, answer["error"]) == (404, "not_found"), method
    # The same name in another tenant is another secret, in its own namespace.
    status, theirs = await stack.call(
        "PUT", "data-secrets/warehouse", as_=globex, json={"data": {"password": OTHER_VALUE}}
    )
    assert status == 201, theirs
    assert live_secret(stack, "warehouse", "kubeopera-data-globex") is not None
    status, ours = await stack.call("GET", "data-secrets/warehouse", as_=headers())
    assert ours["keys"] == ["token"]

    # Permissions: writes need secrets.write, reads pipelines.read.
    status, answer = await stack.call(
        "PUT", "data-secrets/warehouse", as_=headers(), json={"data": {"token": "x"}}
    )
    assert (status, answer["details"]) == (403, {"permission": "secrets.write"})
    status, answer = await stack.call("DELETE", "data-secrets/warehouse", as_=headers())
    assert (status, answer["details"]) == (403, {"permission": "secrets.write"})
    only_secrets = headers(permissions="secrets.write")
    for path in ("data-secrets", "data-secrets/warehouse"):
        status, answer = await stack.call("GET", path, as_=only_secrets)
        assert (status, answer["details"]) == (403, {"permission": "pipelines.read"})

    # An administrator acts for one tenant.
    admin = headers(None, admin=True, actor="root")
    status, answer = await stack.call("GET", "data-secrets", as_=admin)
    assert (status, answer["details"]) == (400, {"parameter": "acting_tenant"})
    status, listing = await stack.call("GET", "data-secrets?acting_tenant=globex", as_=admin)
    assert [item["keys"] for item in listing["items"]] == [["password"]]
    status, answer = await stack.call(
        "DELETE", "data-secrets/warehouse?acting_tenant=globex", as_=admin
    )
    assert status == 200, answer
    assert live_secret(stack, "warehouse", "kubeopera-data-globex") is None
    assert live_secret(stack, "warehouse") is not None


async def test_platform_and_foreign_secrets_are_out_of_reach(stack: Stack) -> None:
    # Provision the namespace (its platform Secret among it) and plant a Secret someone else
    # created there, unlabelled.
    status, _ = await stack.call("POST", "data-pipelines", json=body())
    assert status == 201
    status, _ = await stack.call(
        "PUT", "data-secrets/seed", as_=writer(), json={"data": {"k": "v"}}
    )
    assert status == 201
    store = stack.world.host.store
    rtype = store.resolve("", "v1", "secrets")
    store.create(
        rtype,
        NS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "foreign", "namespace": NS},
            "data": {"k": base64.b64encode(VALUE.encode()).decode()},
        },
    )
    assert live_secret(stack, "kubeopera-executor.service-account-token") is not None
    for name in ("kubeopera-executor.service-account-token", "foreign"):
        for method in ("GET", "DELETE"):
            status, answer = await stack.call(method, f"data-secrets/{name}", as_=writer())
            assert status == 404, (method, name, answer)
    status, answer = await stack.call(
        "PUT", "data-secrets/foreign", as_=writer(), json={"data": {"k": OTHER_VALUE}}
    )
    assert (status, answer["details"]["reason"]) == (409, "not_a_data_secret")
    secret = live_secret(stack, "foreign")
    assert secret is not None
    assert base64.b64decode(secret["data"]["k"]).decode() == VALUE
    refusals = [row for row in await audit(stack) if row["outcome"] == "failed"]
    assert [(r["action"], r["name"], r["detail"]) for r in refusals] == [
        ("data_secret.create", "secret/foreign", {"secret": "foreign", "error": "conflict"})
    ]
    status, listing = await stack.call("GET", "data-secrets", as_=headers())
    assert [item["name"] for item in listing["items"]] == ["seed"]
    assert live_secret(stack, "kubeopera-executor.service-account-token") is not None


async def test_the_list_is_paged_by_name_with_cursors_bound_to_the_tenant(stack: Stack) -> None:
    for name in ("c-secret", "a-secret", "b-secret"):
        status, _ = await stack.call(
            "PUT", f"data-secrets/{name}", as_=writer(), json={"data": {"k": "v"}}
        )
        assert status == 201
    status, first = await stack.call("GET", "data-secrets?limit=2", as_=headers())
    assert [item["name"] for item in first["items"]] == ["a-secret", "b-secret"]
    assert first["total"] == 3
    assert first["next_cursor"]
    status, rest = await stack.call(
        "GET", "data-secrets", as_=headers(), params={"cursor": first["next_cursor"]}
    )
    assert [item["name"] for item in rest["items"]] == ["c-secret"]
    assert rest["next_cursor"] is None
    status, refused = await stack.call(
        "GET", "data-secrets", as_=headers("globex"), params={"cursor": first["next_cursor"]}
    )
    assert (status, refused["details"]["parameter"]) == (400, "cursor")
    status, refused = await stack.call("GET", "data-secrets?limit=0", as_=headers())
    assert status == 400


async def test_pipelines_may_refer_to_the_tenants_data_secrets_and_no_other(stack: Stack) -> None:
    # Before the secret exists, a step reading it is refused; after, it is saved.
    status, refused = await stack.call("POST", "data-pipelines", json=step_reading("warehouse"))
    assert status == 422, refused
    assert {(v["rule"], v["path"]) for v in refused["details"]["violations"]} == {
        ("secret_reference", "spec.templates[2].container.env[0].valueFrom.secretKeyRef.name")
    }
    status, _ = await stack.call(
        "PUT", "data-secrets/warehouse", as_=writer(), json={"data": {"token": VALUE}}
    )
    assert status == 201
    status, saved = await stack.call("POST", "data-pipelines", json=step_reading("warehouse"))
    assert status == 201, saved
    status, detail = await stack.call("GET", f"data-pipelines/{saved['id']}")
    env = detail["current"]["template"]["spec"]["templates"][2]["container"]["env"]
    assert env == [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "warehouse", "key": "token"}}}
    ]
    status, validated = await stack.call(
        "POST", "data-pipelines/validate", json=step_reading("warehouse")
    )
    assert status == 200, validated

    # YAML: the data secret in env, envFrom and a volume is accepted.
    accepted = yaml_pipeline(
        "yaml-reader",
        """        envFrom: [{secretRef: {name: warehouse}}]
        volumeMounts: [{name: w, mountPath: /etc/w}]
      volumes: [{name: w, secret: {secretName: warehouse}}]""",
    )
    status, yaml_saved = await stack.call("POST", "data-pipelines", json=accepted)
    assert status == 201, yaml_saved

    # Anything else is refused: a platform Secret, an unlabelled one, a missing one.
    store = stack.world.host.store
    store.create(
        store.resolve("", "v1", "secrets"),
        NS,
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "foreign", "namespace": NS}},
    )
    for name, rule in (
        ("kubeopera-artifact-credentials", "platform_secret"),
        ("foreign", "secret_reference"),
        ("missing", "secret_reference"),
    ):
        hostile = yaml_pipeline(
            "hostile",
            f"        env: [{{name: K, valueFrom: {{secretKeyRef: {{name: {name}, key: k}}}}}}]",
        )
        status, refused = await stack.call("POST", "data-pipelines", json=hostile)
        assert status == 422, (name, refused)
        assert [(v["rule"], v["path"]) for v in refused["details"]["violations"]] == [
            (rule, "spec.templates[0].container.env[0].valueFrom.secretKeyRef.name")
        ], name
    # Another tenant's data secret of that name is not this one's.
    status, _ = await stack.call(
        "PUT", "data-secrets/theirs", as_=writer("globex"), json={"data": {"k": "v"}}
    )
    status, refused = await stack.call(
        "POST",
        "data-pipelines",
        json=yaml_pipeline("h2", "        envFrom: [{secretRef: {name: theirs}}]"),
    )
    assert status == 422, refused


async def test_a_secret_in_use_is_not_deleted_and_the_409_names_the_pipelines(
    stack: Stack,
) -> None:
    for name in ("warehouse", "spare"):
        status, _ = await stack.call(
            "PUT", f"data-secrets/{name}", as_=writer(), json={"data": {"token": VALUE}}
        )
        assert status == 201
    status, wizard_saved = await stack.call(
        "POST", "data-pipelines", json=step_reading("warehouse")
    )
    assert status == 201, wizard_saved
    mounted = yaml_pipeline(
        "mounter",
        """        volumeMounts: [{name: w, mountPath: /etc/w}]
      volumes: [{name: w, secret: {secretName: warehouse}}]""",
    )
    status, ml_saved = await stack.call("POST", "ml-pipelines", json=mounted)
    assert status == 201, ml_saved

    status, refused = await stack.call("DELETE", "data-secrets/warehouse", as_=writer())
    assert status == 409, refused
    assert refused["details"] == {
        "reason": "in_use",
        "secret": "warehouse",
        "pipelines": [
            {"id": wizard_saved["id"], "kind": "data", "name": "loader"},
            {"id": ml_saved["id"], "kind": "ml", "name": "mounter"},
        ],
    }
    assert "loader" in refused["message"]
    assert "mounter" in refused["message"]
    assert live_secret(stack, "warehouse") is not None
    failed = [row for row in await audit(stack) if row["outcome"] == "failed"]
    assert [(row["action"], row["detail"]["error"]) for row in failed] == [
        ("data_secret.delete", "conflict")
    ]
    assert failed[0]["detail"]["pipelines"] == refused["details"]["pipelines"]

    # A secret no current version uses goes; so does this one once nothing current uses it.
    status, _ = await stack.call("DELETE", "data-secrets/spare", as_=writer())
    assert status == 200
    status, _ = await stack.call("DELETE", f"ml-pipelines/{ml_saved['id']}")
    assert status == 200
    status, updated = await stack.call("PUT", f"data-pipelines/{wizard_saved['id']}", json=body())
    assert status == 200, updated
    status, deleted = await stack.call("DELETE", "data-secrets/warehouse", as_=writer())
    assert status == 200, deleted

    # Rolling back to the version that read it would refer to nothing: refused.
    status, refused = await stack.call(
        "POST", f"data-pipelines/{wizard_saved['id']}/rollback", json={"version": 1}
    )
    assert status == 409, refused
    assert refused["details"]["reason"] == "missing_data_secrets"
    assert refused["details"]["secrets"] == ["warehouse"]
    status, _ = await stack.call(
        "PUT", "data-secrets/warehouse", as_=writer(), json={"data": {"token": VALUE}}
    )
    status, rolled = await stack.call(
        "POST", f"data-pipelines/{wizard_saved['id']}/rollback", json={"version": 1}
    )
    assert status == 200, rolled


async def test_git_credentials_and_notification_channels_keep_a_secret_in_use(
    stack: Stack,
) -> None:
    """Versions written by Git sync and notification settings (other features), as rows."""
    status, _ = await stack.call(
        "PUT", "data-secrets/git-creds", as_=writer(), json={"data": {"token": VALUE}}
    )
    status, _ = await stack.call(
        "PUT", "data-secrets/slack", as_=writer(), json={"data": {"url": VALUE}}
    )
    for pipeline, definition, settings in (
        (
            "gitpipe",
            {"type": "git", "repository": "r", "path": "p", "credentials_secret": "git-creds"},
            {},
        ),
        ("notified", {"type": "yaml", "template": "x"}, {"notifications": [{"secret": "slack"}]}),
    ):
        await stack.pool.execute(
            "INSERT INTO pipelines (id, tenant, kind, name, definition_type, current_version, "
            "latest_version, created_by) VALUES ($1, 'acme', 'data', $1, 'git', 1, 1, 'a')",
            pipeline,
        )
        await stack.pool.execute(
            "INSERT INTO pipeline_versions (pipeline_id, version, definition, settings, "
            "template_name, template, parameters, created_by) "
            "VALUES ($1, 1, $2, $3, 't', '{}', '[]', 'a')",
            pipeline,
            definition,
            settings,
        )
    for secret, pipeline in (("git-creds", "gitpipe"), ("slack", "notified")):
        status, refused = await stack.call("DELETE", f"data-secrets/{secret}", as_=writer())
        assert status == 409, refused
        assert [p["id"] for p in refused["details"]["pipelines"]] == [pipeline]


async def test_a_delete_waits_for_a_save_that_read_the_secrets_and_then_sees_its_version(
    stack: Stack,
) -> None:
    """The shared lock a save holds while it records a version referring to a data secret
    keeps the delete's check waiting until that version is visible."""
    status, _ = await stack.call(
        "PUT", "data-secrets/warehouse", as_=writer(), json={"data": {"token": VALUE}}
    )
    async with PipelineStore.transaction(stack.pool) as store:
        await store.guard_data_secrets("acme", exclusive=False)
        deleting = asyncio.create_task(stack.call("DELETE", "data-secrets/warehouse", as_=writer()))
        for _ in range(500):  # until the delete is queued behind our shared lock
            waiting = await stack.pool.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            if waiting:
                break
            await asyncio.sleep(0.01)
        assert waiting == 1
        assert not deleting.done()
        await store.insert_pipeline(
            pipeline_id="racer",
            tenant="acme",
            kind="data",
            name="racer",
            description="",
            definition_type="yaml",
            actor="a",
        )
        await store.insert_version(
            pipeline_id="racer",
            version=1,
            definition={"type": "yaml", "template": "x"},
            parameters=[],
            settings={},
            stages=[],
            template_name="p-racer-v1",
            template={"spec": {"volumes": [{"name": "w", "secret": {"secretName": "warehouse"}}]}},
            actor="a",
        )
    status, refused = await deleting
    assert status == 409, refused
    assert [p["id"] for p in refused["details"]["pipelines"]] == ["racer"]


class RefusingObjects:
    """The host's objects, where every write is refused with a message quoting the object (as
    the Kubernetes API server may)."""

    def __init__(self, objects: Any, error: type[WorkflowManagerError]) -> None:
        self._objects = objects
        self._error = error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._objects, name)

    async def create(self, obj: Any) -> dict[str, Any]:
        raise self._error(f"refused: {json.dumps(obj)}", details={"object": obj})

    async def replace(self, obj: Any) -> dict[str, Any]:
        raise self._error(f"refused: {json.dumps(obj)}", details={"object": obj})


@pytest.mark.parametrize("error", [Conflict, Refused, DependencyDown])
async def test_a_write_the_cluster_refuses_is_audited_and_its_error_quotes_nothing(
    stack: Stack, error: type[WorkflowManagerError]
) -> None:
    service = DataSecretService(
        pool=stack.pool,
        objects=RefusingObjects(KubeObjects(stack.kube), error),
        tenants=stack.compiler.tenants,
    )
    with pytest.raises(error) as refused:
        await service.put("acme", "alice", "warehouse", {"data": {"token": VALUE}})
    assert refused.value.details == {"secret": "warehouse"}
    assert "warehouse" in refused.value.message
    assert VALUE not in str(refused.value.to_json())
    assert refused.value.__cause__ is None
    assert refused.value.__suppress_context__
    (row,) = await audit(stack)
    assert (row["action"], row["outcome"], row["detail"]) == (
        "data_secret.create",
        "failed",
        {"secret": "warehouse", "error": error.code},
    )


async def test_the_compilers_data_secret_routes_need_its_key(stack: Stack) -> None:
    for method, path in (
        ("GET", "/internal/v1/data-secrets?tenant=acme"),
        ("GET", "/internal/v1/data-secrets/warehouse?tenant=acme"),
        ("PUT", "/internal/v1/data-secrets/warehouse"),
        ("DELETE", "/internal/v1/data-secrets/warehouse"),
    ):
        for key in (None, "wrong"):
            extra = {"X-Internal-Key": key} if key else {}
            response = await stack.internal.request(
                method,
                path,
                json={"tenant": "acme", "actor": "x", "secret": {"data": {"k": VALUE}}},
                headers=extra,
            )
            assert response.status == 401, (method, path)
    assert live_secret(stack, "warehouse") is None


async def test_a_rollback_asks_only_for_the_tenants_own_secrets(stack: Stack) -> None:
    """A version may refer to a platform Secret the platform added after the check (tracking
    credentials): a rollback to it does not ask for that one as a data secret."""
    status, saved = await stack.call("POST", "data-pipelines", json=body())
    assert status == 201, saved
    status, _ = await stack.call("PUT", f"data-pipelines/{saved['id']}", json=body())
    platform = {"envFrom": [{"secretRef": {"name": "kubeopera-mlflow"}}]}
    await stack.pool.execute(
        "UPDATE pipeline_versions SET template = jsonb_set(template, "
        "'{spec,templateDefaults}', $2) WHERE pipeline_id = $1 AND version = 1",
        saved["id"],
        {"container": platform},
    )
    status, rolled = await stack.call(
        "POST", f"data-pipelines/{saved['id']}/rollback", json={"version": 1}
    )
    assert status == 200, rolled
