"""Pipelines end to end: the apiserver's routes, the compiler's internal API behind them, a sim
host cluster with Argo and real PostgreSQL (tenant provisioning included, storage users off)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer
from kubernetes_asyncio.client import ApiClient

from apiserver.app import create_app as create_api
from apiserver.clusters.connections import ConnectionCache
from apiserver.pipelines.compiler_client import CompilerClient
from apiserver.runs.pg_runs import RunReader
from apiserver.services import Services
from apiserver.stream.hub import StreamHub
from apiserver.stream.pg_changes import PgChangeSource
from compiler.runner import Parts, assemble
from compiler.stamping import template_name
from shared.k8s import client_from_kubeconfig
from sim.argo.controller import ArgoSimulator
from sim.argo.server import DATA_ARGO_NAMESPACE, DATA_ARGO_SERVICE
from sim.world import World, start_world

API_KEY = "test-api-key"
INTERNAL_KEY = "test-internal-key"
WRITE = "pipelines.read,pipelines.write,pipelines.run"
NS = "kubeopera-data-acme"
INSTANCE_LABEL = "workflows.argoproj.io/controller-instanceid"
INLINE = {
    "entrypoint": "main",
    "templates": [{"name": "main", "container": {"image": "busybox", "args": ["echo ci"]}}],
}


def headers(
    tenant: str | None = "acme",
    *,
    permissions: str = WRITE,
    admin: bool = False,
    actor: str = "alice@acme",
) -> dict[str, str]:
    values = {
        "X-API-Key": API_KEY,
        "X-Kubeopera-Admin": "true" if admin else "false",
        "X-Kubeopera-Actor": actor,
        "X-Kubeopera-Permissions": permissions,
    }
    if tenant is not None:
        values["X-Kubeopera-Tenant"] = tenant
    return values


def wizard(*, fail_step: bool = False, extra_step: bool = False) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {
            "name": "extract",
            "image": "ghcr.io/acme/extract:1.0",
            "command": ["extract"],
            "args": ["--day", "{{workflow.parameters.day}}"],
            "env": [{"name": "SIM_FAIL", "value": "true" if fail_step else "false"}],
        },
        {
            "name": "load",
            "image": "ghcr.io/acme/load:1.0",
            "command": ["load"],
            "depends_on": ["extract"],
        },
    ]
    if extra_step:
        steps.append({"name": "report", "image": "ghcr.io/acme/report:1.0", "depends_on": ["load"]})
    return {
        "apiVersion": "pipelines.kubeopera.io/v1",
        "parameters": [
            {"name": "day", "default": "2026-01-01"},
            {"name": "shards", "type": "integer", "default": 4},
        ],
        "steps": steps,
    }


def body(name: str = "nightly", **spec: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": "nightly load",
        "definition": {"type": "wizard", "spec": wizard(**spec)},
    }


YAML_TEMPLATE = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata:
  name: mine
spec:
  entrypoint: main
  arguments:
    parameters:
      - name: size
        value: "10"
  templates:
    - name: main
      container:
        image: alpine:3.20
        command: [sh, -c, "echo {{workflow.parameters.size}}"]
"""

ESCAPING_YAML = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata:
  name: sneaky
spec:
  entrypoint: main
  hostNetwork: true
  templates:
    - name: main
      container:
        image: alpine:3.20
        securityContext: {privileged: true}
        volumeMounts: [{name: root, mountPath: /host}]
      volumes:
        - name: root
          hostPath: {path: /}
"""


@dataclass
class Stack:
    world: World
    kube: ApiClient
    api: TestClient[Any, Any]
    compiler: Parts
    internal: TestClient[Any, Any]  # the compiler's internal API
    pool: asyncpg.Pool

    async def call(
        self, method: str, path: str, *, as_: dict[str, str] | None = None, **kwargs: Any
    ) -> tuple[int, Any]:
        response = await self.api.request(
            method, f"/api/v1/{path}", headers=as_ or headers(), **kwargs
        )
        return response.status, await response.json()

    def templates(self, namespace: str = NS) -> list[str]:
        store = self.world.host.store
        rtype = store.resolve("argoproj.io", "v1alpha1", "workflowtemplates")
        items, _ = store.list(rtype, namespace)
        return sorted(item["metadata"]["name"] for item in items)


async def make_stack(
    db: asyncpg.Pool, database_url: str, settings_factory: Any, **overrides: Any
) -> AsyncIterator[Stack]:
    world = await start_world(1, tick=0.01, autostart=False, pod_gc_delay=0)
    kube = await client_from_kubeconfig(world.host.kubeconfig)
    # ARGO_DATA_SERVER_URL and ARGO_DATA_INSTANCE_ID by default: the sim host's data controller.
    settings = settings_factory(
        INTERNAL_API_KEY=INTERNAL_KEY,
        ARTIFACT_BUCKET="artifacts",
        **overrides,
    )
    parts = assemble(settings, pool=db, host_api=kube, storage=None)
    compiler_client: TestClient[Any, Any] = TestClient(TestServer(parts.app))
    await compiler_client.start_server()
    session = aiohttp.ClientSession()
    services = Services(
        pool=db,
        runs=RunReader(db),
        connections=ConnectionCache(registry=None, host_factory=None),
        objects=None,
        artifact_bucket=None,
        argo_data_server_url=settings.ARGO_DATA_SERVER_URL,
        compiler=CompilerClient(
            session, base_url=str(compiler_client.make_url("")), internal_key=INTERNAL_KEY
        ),
    )
    hub = StreamHub(PgChangeSource(db, dsn=database_url))
    api: TestClient[Any, Any] = TestClient(TestServer(create_api(services, hub, api_key=API_KEY)))
    await api.start_server()
    try:
        yield Stack(world, kube, api, parts, compiler_client, db)
    finally:
        await api.close()
        await session.close()
        await compiler_client.close()
        await kube.close()
        await world.stop()


@pytest.fixture
async def stack(db: asyncpg.Pool, database_url: str, settings_factory: Any) -> AsyncIterator[Stack]:
    async for value in make_stack(db, database_url, settings_factory):
        yield value


async def test_create_provisions_the_tenant_applies_the_template_and_records_version_1(
    stack: Stack,
) -> None:
    status, saved = await stack.call("POST", "data-pipelines", json=body())
    assert status == 201, saved
    assert saved["version"] == 1
    assert saved["template_name"] == template_name(saved["id"], 1)
    assert stack.templates() == [saved["template_name"]]
    store = stack.world.host.store
    quota = store.get(store.resolve("", "v1", "resourcequotas"), NS, "kubeopera-quota")
    assert quota["spec"]["hard"]["pods"] == "50"
    tenant = await stack.pool.fetchrow("SELECT * FROM tenants WHERE id = 'acme'")
    assert tenant["spec_hash"] == await stack.compiler.tenants.spec_hash()

    status, listing = await stack.call("GET", "data-pipelines")
    assert status == 200
    assert [item["name"] for item in listing["items"]] == ["nightly"]
    assert listing["total"] == 1
    status, ml_listing = await stack.call("GET", "ml-pipelines")
    assert (status, ml_listing["items"]) == (200, [])

    status, detail = await stack.call("GET", f"data-pipelines/{saved['id']}")
    assert status == 200
    applied = detail["current"]["template"]
    assert applied["metadata"]["namespace"] == NS
    assert applied["spec"]["serviceAccountName"] == "kubeopera-workload"
    assert detail["current"]["parameters"] == [
        {"name": "day", "default": "2026-01-01", "type": "string"},
        {"name": "shards", "default": "4", "type": "integer"},
    ]

    status, again = await stack.call("POST", "data-pipelines", json=body())
    assert status == 409, again


async def test_validate_renders_without_saving_and_refuses_with_every_violation(
    stack: Stack,
) -> None:
    yaml_body = {"name": "mine", "definition": {"type": "yaml", "template": YAML_TEMPLATE}}
    status, result = await stack.call("POST", "data-pipelines/validate", json=yaml_body)
    assert status == 200, result
    assert result["valid"] is True
    assert result["template"]["metadata"]["namespace"] == NS
    assert any("metadata.name" in warning for warning in result["warnings"])
    assert stack.templates() == []
    assert await stack.pool.fetchval("SELECT count(*) FROM pipelines") == 0

    bad = {"name": "sneaky", "definition": {"type": "yaml", "template": ESCAPING_YAML}}
    for path in ("data-pipelines/validate", "data-pipelines"):
        status, refused = await stack.call("POST", path, json=bad)
        assert status == 422, refused
        paths = {v["path"] for v in refused["details"]["violations"]}
        assert {
            "spec.hostNetwork",
            "spec.templates[0].container.securityContext.privileged",
            "spec.templates[0].volumes[0].hostPath",
        } <= paths, paths
    assert stack.templates() == []

    status, invalid = await stack.call(
        "POST",
        "data-pipelines",
        json={"name": "x", "definition": {"type": "yaml", "template": ":"}},
    )
    assert status == 400, invalid
    status, invalid = await stack.call(
        "POST", "data-pipelines", json={**body(), "parameters": {"nope": 1}}
    )
    assert (status, invalid["error"]) == (400, "invalid")


async def test_update_versions_rollback_and_template_gc(stack: Stack) -> None:
    status, saved = await stack.call("POST", "data-pipelines", json=body())
    pipeline = saved["id"]
    for version in range(2, 13):
        status, updated = await stack.call(
            "PUT", f"data-pipelines/{pipeline}", json=body(extra_step=version % 2 == 0)
        )
        assert (status, updated["version"]) == (200, version), updated
    # The newest ten templates stay; versions 1 and 2 were collected.
    assert stack.templates() == sorted(template_name(pipeline, v) for v in range(3, 13))
    status, versions = await stack.call(
        "GET", f"data-pipelines/{pipeline}/versions", params={"limit": "5"}
    )
    assert status == 200
    assert [item["version"] for item in versions["items"]] == [12, 11, 10, 9, 8]
    assert versions["items"][0]["current"] is True
    status, rest = await stack.call(
        "GET",
        f"data-pipelines/{pipeline}/versions",
        params={"cursor": versions["next_cursor"], "limit": "10"},
    )
    assert [item["version"] for item in rest["items"]] == [7, 6, 5, 4, 3, 2, 1]
    assert [item["template_applied"] for item in rest["items"][-2:]] == [False, False]

    status, rolled = await stack.call(
        "POST", f"data-pipelines/{pipeline}/rollback", json={"version": 1}
    )
    assert status == 200, rolled
    assert rolled == {"id": pipeline, "current_version": 1, "template_restored": True}
    assert template_name(pipeline, 1) in stack.templates()
    status, detail = await stack.call("GET", f"data-pipelines/{pipeline}")
    assert (detail["current_version"], detail["latest_version"]) == (1, 12)
    assert detail["current"]["template_applied"] is True
    # Ten templates again: the current one (v1) plus the newest nine others.
    assert len(stack.templates()) == 10

    status, missing = await stack.call(
        "POST", f"data-pipelines/{pipeline}/rollback", json={"version": 99}
    )
    assert status == 404, missing
    status, next_save = await stack.call("PUT", f"data-pipelines/{pipeline}", json=body())
    assert next_save["version"] == 13


async def _finish(
    stack: Stack, name: str, *, namespace: str = NS, controller: ArgoSimulator | None = None
) -> dict[str, Any]:
    """Step one controller, by default the data controller (pipelines run there alone), until
    the workflow `name` finishes."""
    store = stack.world.host.store
    rtype = store.resolve("argoproj.io", "v1alpha1", "workflows")
    controller = controller or stack.world.host.data_argo
    assert controller is not None
    for _ in range(200):
        await controller.step()
        workflow = store.get(rtype, namespace, name)
        if workflow.get("status", {}).get("phase") in ("Succeeded", "Failed", "Error"):
            return workflow
    raise AssertionError(f"{name} did not finish")


async def test_run_checks_parameters_and_starts_the_current_version(stack: Stack) -> None:
    status, saved = await stack.call("POST", "data-pipelines", json=body())
    pipeline = saved["id"]
    status, refused = await stack.call(
        "POST",
        f"data-pipelines/{pipeline}/run",
        json={"parameters": {"shards": "many", "nope": "1"}},
    )
    assert status == 400, refused
    fields = {error["field"] for error in refused["details"]["errors"]}
    assert fields == {"parameters.shards", "parameters.nope"}

    status, run = await stack.call(
        "POST",
        f"data-pipelines/{pipeline}/run",
        json={"parameters": {"day": "2026-02-03", "shards": 8}},
    )
    assert status == 201, run
    assert run["version"] == 1
    assert run["parameters"] == {"day": "2026-02-03", "shards": "8"}
    name = run["workflow"]["name"]
    done = await _finish(stack, name)
    assert done["status"]["phase"] == "Succeeded"
    assert done["spec"]["workflowTemplateRef"] == {"name": template_name(pipeline, 1)}
    assert done["metadata"]["labels"]["kubeopera.io/pipeline-id"] == pipeline
    action = await stack.pool.fetchrow("SELECT * FROM run_actions WHERE name = $1", name)
    assert (action["action"], action["outcome"], action["actor"]) == (
        "run",
        "succeeded",
        "alice@acme",
    )
    assert action["parameters"] == {"day": "2026-02-03", "shards": "8"}


async def test_a_run_carries_the_data_instance_id_and_runs_on_the_data_controller_only(
    stack: Stack,
) -> None:
    status, saved = await stack.call("POST", "data-pipelines", json=body())
    assert status == 201, saved
    status, run = await stack.call("POST", f"data-pipelines/{saved['id']}/run", json={})
    assert status == 201, run
    name = run["workflow"]["name"]
    host = stack.world.host
    store = host.store
    workflows = store.resolve("argoproj.io", "v1alpha1", "workflows")
    pods = store.resolve("", "v1", "pods")
    labels = store.get(workflows, NS, name)["metadata"]["labels"]
    assert labels[INSTANCE_LABEL] == "kubeopera-data"
    # A CI/CD workflow created after the run: once the CI/CD controller has finished it, it has
    # passed over the run, which it never touches.
    later = store.create(workflows, "argo", {"metadata": {"generateName": "ci-"}, "spec": INLINE})
    ci = await _finish(stack, later["metadata"]["name"], namespace="argo", controller=host.argo)
    assert ci["status"]["phase"] == "Succeeded"
    assert "status" not in store.get(workflows, NS, name)
    run_pods = f"workflows.argoproj.io/workflow={name}"
    assert store.list(pods, NS, label_selector=run_pods)[0] == []
    assert (await _finish(stack, name))["status"]["phase"] == "Succeeded"
    started = store.list(pods, NS, label_selector=run_pods)[0]
    assert started
    assert {pod["metadata"]["labels"][INSTANCE_LABEL] for pod in started} == {"kubeopera-data"}


async def test_a_run_of_a_recent_version_can_be_retried_after_newer_saves(stack: Stack) -> None:
    status, saved = await stack.call("POST", "data-pipelines", json=body(fail_step=True))
    pipeline = saved["id"]
    status, run = await stack.call("POST", f"data-pipelines/{pipeline}/run", json={})
    assert status == 201, run
    name = run["workflow"]["name"]
    assert (await _finish(stack, name))["status"]["phase"] == "Failed"
    for _ in range(3):
        status, _ = await stack.call("PUT", f"data-pipelines/{pipeline}", json=body())
        assert status == 200
    # Version 1's template is still there, so Argo can retry the failed run in place.
    assert template_name(pipeline, 1) in stack.templates()
    from shared.argo import ArgoServer

    await ArgoServer(stack.kube, namespace=DATA_ARGO_NAMESPACE, service=DATA_ARGO_SERVICE).retry(
        NS, name
    )
    store = stack.world.host.store
    rtype = store.resolve("argoproj.io", "v1alpha1", "workflows")
    retried = store.get(rtype, NS, name)
    assert retried["status"]["phase"] == "Running"
    assert retried["spec"]["workflowTemplateRef"] == {"name": template_name(pipeline, 1)}


async def test_delete_removes_templates_and_versions(stack: Stack) -> None:
    status, saved = await stack.call("POST", "data-pipelines", json=body())
    pipeline = saved["id"]
    await stack.call("PUT", f"data-pipelines/{pipeline}", json=body(extra_step=True))
    assert len(stack.templates()) == 2
    status, deleted = await stack.call("DELETE", f"data-pipelines/{pipeline}")
    assert status == 200, deleted
    assert deleted["templates_removed"] == 2
    assert stack.templates() == []
    assert await stack.pool.fetchval("SELECT count(*) FROM pipeline_versions") == 0
    status, _ = await stack.call("GET", f"data-pipelines/{pipeline}")
    assert status == 404


async def test_tenants_and_permissions_are_enforced(stack: Stack) -> None:
    status, saved = await stack.call("POST", "data-pipelines", json=body())
    pipeline = saved["id"]
    other = headers("globex", actor="bob@globex")
    for method, path, payload in (
        ("GET", f"data-pipelines/{pipeline}", None),
        ("GET", f"data-pipelines/{pipeline}/versions", None),
        ("PUT", f"data-pipelines/{pipeline}", body()),
        ("DELETE", f"data-pipelines/{pipeline}", None),
        ("POST", f"data-pipelines/{pipeline}/rollback", {"version": 1}),
        ("POST", f"data-pipelines/{pipeline}/run", {}),
        ("GET", f"ml-pipelines/{pipeline}", None),
    ):
        status, answer = await stack.call(method, path, as_=other, json=payload)
        assert status == 404, (method, path, answer)
    status, listing = await stack.call("GET", "data-pipelines", as_=other)
    assert listing["items"] == []

    reader = headers(permissions="pipelines.read")
    status, answer = await stack.call("PUT", f"data-pipelines/{pipeline}", as_=reader, json=body())
    assert (status, answer["details"]) == (403, {"permission": "pipelines.write"})
    status, answer = await stack.call("POST", f"data-pipelines/{pipeline}/run", as_=reader, json={})
    assert (status, answer["details"]) == (403, {"permission": "pipelines.run"})

    admin = headers(None, admin=True, actor="root")
    status, answer = await stack.call("POST", "data-pipelines", as_=admin, json=body("x"))
    assert status == 400, answer
    status, listing = await stack.call("GET", "data-pipelines", as_=admin)
    assert [item["tenant"] for item in listing["items"]] == ["acme"]
    status, saved_b = await stack.call(
        "POST", "data-pipelines?acting_tenant=globex", as_=admin, json=body()
    )
    assert status == 201, saved_b
    assert stack.templates("kubeopera-data-globex") == [saved_b["template_name"]]


async def test_the_compiler_refuses_calls_without_its_key(stack: Stack) -> None:
    payload = {"tenant": "acme", "actor": "x", "pipeline": body()}
    for key in (None, "wrong"):
        extra = {"X-Internal-Key": key} if key else {}
        response = await stack.internal.post(
            "/internal/v1/pipelines/data", json=payload, headers=extra
        )
        assert response.status == 401
    response = await stack.internal.post(
        "/internal/v1/pipelines/data", json=payload, headers={"X-Internal-Key": INTERNAL_KEY}
    )
    assert response.status == 201


async def test_concurrent_saves_of_one_pipeline_get_distinct_versions(stack: Stack) -> None:
    _, saved = await stack.call("POST", "data-pipelines", json=body())
    pipeline = saved["id"]
    answers = await asyncio.gather(
        *(
            stack.call("PUT", f"data-pipelines/{pipeline}", json=body(extra_step=n % 2 == 0))
            for n in range(4)
        )
    )
    assert sorted(answer["version"] for status, answer in answers if status == 200) == [2, 3, 4, 5]
    versions = await stack.pool.fetch(
        "SELECT version, template_name FROM pipeline_versions WHERE pipeline_id = $1", pipeline
    )
    assert {row["template_name"] for row in versions} <= set(stack.templates())
    assert len(versions) == 5


async def test_a_yaml_pipeline_is_saved_and_runs_as_written(stack: Stack) -> None:
    yaml_body = {
        "name": "mine",
        "parameters": {"size": "20"},
        "definition": {"type": "yaml", "template": YAML_TEMPLATE},
    }
    status, saved = await stack.call("POST", "data-pipelines", json=yaml_body)
    assert status == 201, saved
    assert any("metadata.name" in warning for warning in saved["warnings"])
    status, detail = await stack.call("GET", f"data-pipelines/{saved['id']}")
    assert detail["current"]["parameters"] == [{"name": "size", "default": "20"}]
    template = detail["current"]["template"]
    assert template["spec"]["templates"][0]["container"]["image"] == "alpine:3.20"
    status, run = await stack.call(
        "POST", f"data-pipelines/{saved['id']}/run", json={"parameters": {"size": "5"}}
    )
    assert status == 201, run
    done = await _finish(stack, run["workflow"]["name"])
    assert done["status"]["phase"] == "Succeeded"


async def test_ml_pipelines_are_their_own_kind_with_gpu_limits(
    db: asyncpg.Pool, database_url: str, settings_factory: Any
) -> None:
    async for stack in make_stack(
        db, database_url, settings_factory, ML_MAX_GPU=1, ML_NS_QUOTA_GPU=2
    ):
        spec = wizard()
        spec["steps"][0]["resources"] = {"limits": {"gpu": 2}}
        gpu_body = {"name": "train", "definition": {"type": "wizard", "spec": spec}}
        status, refused = await stack.call("POST", "ml-pipelines", json=gpu_body)
        assert status == 400, refused
        spec["steps"][0]["resources"] = {"limits": {"gpu": 1}}
        status, saved = await stack.call("POST", "ml-pipelines", json=gpu_body)
        assert status == 201, saved
        status, refused = await stack.call("POST", "data-pipelines", json=gpu_body)
        assert status == 400, refused  # data steps get no GPU
        status, listing = await stack.call("GET", "ml-pipelines")
        assert [item["kind"] for item in listing["items"]] == ["ml"]
        status, _ = await stack.call("GET", f"data-pipelines/{saved['id']}")
        assert status == 404


def _yaml_pipeline(spec: str) -> dict[str, Any]:
    template = (
        "apiVersion: argoproj.io/v1alpha1\nkind: WorkflowTemplate\nmetadata:\n  name: t\n"
        f"spec:\n  entrypoint: main\n{spec}"
    )
    return {"name": "hostile", "definition": {"type": "yaml", "template": template}}


MAIN = """  templates:
    - name: main
      container:
        image: alpine:3.20
        command: [sh, -c, echo hi]
"""
# One hostile document per class the allowlist once accepted: (YAML spec body, {(rule, path)}).
HOSTILE_CLASSES: dict[str, tuple[str, set[tuple[str, str]]]] = {
    "artifact repository": (
        """  artifactRepositoryRef: {key: platform-default}
  templates:
    - name: main
      container: {image: alpine:3.20, command: [sh, -c, echo hi]}
      archiveLocation:
        s3: {key: tenants/acme/models/churn/1}
""",
        {
            ("artifact_repository_ref", "spec.artifactRepositoryRef.key"),
            ("artifact_location", "spec.templates[0].archiveLocation.s3.key"),
        },
    ),
    "secret reference": (
        """  templates:
    - name: main
      sidecars:
        - name: s
          image: alpine:3.20
          envFrom: [{secretRef: {name: argo-server-sso}}]
      container:
        image: alpine:3.20
        env:
          - name: K
            valueFrom: {secretKeyRef: {name: kubeopera-artifact-credentials, key: secretKey}}
""",
        {
            ("secret_reference", "spec.templates[0].sidecars[0].envFrom[0].secretRef.name"),
            (
                "platform_secret",
                "spec.templates[0].container.env[0].valueFrom.secretKeyRef.name",
            ),
        },
    ),
    "labels and annotations": (
        """  podMetadata:
    labels: {kubeopera.io/pipeline-id: someone-elses}
    annotations: {workflows.argoproj.io/outputs: "{}"}
"""
        + MAIN
        + """      metadata:
        annotations:
          container.apparmor.security.beta.kubernetes.io/main: unconfined
""",
        {
            ("reserved_label", 'spec.podMetadata.labels["kubeopera.io/pipeline-id"]'),
            (
                "reserved_annotation",
                'spec.podMetadata.annotations["workflows.argoproj.io/outputs"]',
            ),
            (
                "security_annotation",
                'spec.templates[0].metadata.annotations["container.apparmor.security.beta'
                '.kubernetes.io/main"]',
            ),
        },
    ),
    "resources": (
        MAIN
        + """        resources:
          requests: {cpu: "3", memory: 9Gi}
          limits: {nvidia.com/gpu: 1, amd.com/gpu: 1}
""",
        {
            ("resource_limit", "spec.templates[0].container.resources.requests.cpu"),
            ("resource_limit", "spec.templates[0].container.resources.requests.memory"),
            ("resource_limit", 'spec.templates[0].container.resources.limits["nvidia.com/gpu"]'),
            ("extended_resource", 'spec.templates[0].container.resources.limits["amd.com/gpu"]'),
        },
    ),
}


async def test_a_hostile_yaml_pipeline_of_each_class_is_refused_at_save_with_its_violations(
    db: asyncpg.Pool, database_url: str, settings_factory: Any
) -> None:
    async for stack in make_stack(db, database_url, settings_factory, DATA_MAX_CPU="2"):
        for name, (spec, expected) in HOSTILE_CLASSES.items():
            status, refused = await stack.call("POST", "data-pipelines", json=_yaml_pipeline(spec))
            assert status == 422, (name, refused)
            violations = refused["details"]["violations"]
            assert {(v["rule"], v["path"]) for v in violations} == expected, name
        messages = {v["path"]: v["message"] for v in violations}
        # The settings reach the check: the limit is the deployment's, named.
        cpu = messages["spec.templates[0].container.resources.requests.cpu"]
        assert cpu == "3 is above DATA_MAX_CPU (2)"
        assert stack.templates() == []
        # The near-miss of each: the default repository, keys under artifacts/, ordinary labels,
        # amounts exactly at the largest step.
        near_miss = """  artifactRepositoryRef: {configMap: artifact-repositories, key: default-v1}
  podMetadata:
    labels: {app: etl}
  templates:
    - name: main
      container:
        image: alpine:3.20
        command: [sh, -c, echo hi]
        resources:
          limits: {cpu: 2000m, memory: 8Gi}
      archiveLocation:
        s3: {key: tenants/acme/artifacts/logs}
"""
        status, saved = await stack.call("POST", "data-pipelines", json=_yaml_pipeline(near_miss))
        assert status == 201, saved


async def test_a_create_that_loses_the_race_for_its_name_removes_its_template(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = stack.compiler.service._objects
    apply = objects.apply

    async def apply_then_lose_the_race(obj: Any) -> str:
        result = await apply(obj)
        if obj["kind"] != "WorkflowTemplate":
            return result  # tenant provisioning shares the client
        # Another replica's save of the same name commits between our check and our insert.
        await stack.pool.execute(
            "INSERT INTO pipelines (id, tenant, kind, name, definition_type, current_version, "
            "latest_version, created_by) VALUES ('winner', 'acme', 'data', 'same', 'yaml', 1, "
            "1, 'bob')"
        )
        return result

    monkeypatch.setattr(objects, "apply", apply_then_lose_the_race)
    status, answer = await stack.call("POST", "data-pipelines", json=body("same"))
    assert (status, answer["error"]) == (409, "conflict"), answer
    assert stack.templates() == []  # the loser's template did not stay behind


MALFORMED_BODIES: list[Any] = [
    {"name": "", "definition": {"type": "yaml"}},
    {"name": "x", "definition": {"type": "svn", "url": "svn://x"}},
    {"name": "x", "definition": {"type": "wizard", "spec": {}}, "colour": "blue"},
    {"name": "x", "definition": {"type": "yaml", "template": "a"}, "schedule": "0 * * * *"},
    {"name": "x", "description": 7, "parameters": {"a": [1]}, "definition": None},
]


async def test_the_apiserver_refuses_a_malformed_body_exactly_as_the_compiler_does(
    stack: Stack,
) -> None:
    _, saved = await stack.call("POST", "data-pipelines", json=body())
    for bad in MALFORMED_BODIES:
        direct = await stack.internal.post(
            "/internal/v1/pipelines/data/validate",
            json={"tenant": "acme", "actor": "alice@acme", "pipeline": bad},
            headers={"X-Internal-Key": INTERNAL_KEY},
        )
        expected = (direct.status, await direct.json())
        assert expected[0] == 400, expected
        for method, path in (
            ("POST", "data-pipelines/validate"),
            ("POST", "data-pipelines"),
            ("PUT", f"data-pipelines/{saved['id']}"),
        ):
            assert await stack.call(method, path, json=bad) == expected, (method, bad)
