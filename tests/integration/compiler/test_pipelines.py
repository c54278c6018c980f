"""Pipelines end to end: save, validate, version, roll back, run, retry and delete through the
apiserver and the compiler, on a sim host with the data controller."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from compiler.pipelines.stamping import template_name
from sim.argo.server import DATA_ARGO_NAMESPACE, DATA_ARGO_SERVICE
from tests.integration.compiler.pipeline_stack import (
    ESCAPING_YAML,
    INLINE,
    INSTANCE_LABEL,
    NS,
    YAML_TEMPLATE,
    Stack,
    body,
    finish,
    make_stack,
    wizard,
)


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
    done = await finish(stack, name)
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
    ci = await finish(stack, later["metadata"]["name"], namespace="argo", controller=host.argo)
    assert ci["status"]["phase"] == "Succeeded"
    assert "status" not in store.get(workflows, NS, name)
    run_pods = f"workflows.argoproj.io/workflow={name}"
    assert store.list(pods, NS, label_selector=run_pods)[0] == []
    assert (await finish(stack, name))["status"]["phase"] == "Succeeded"
    started = store.list(pods, NS, label_selector=run_pods)[0]
    assert started
    assert {pod["metadata"]["labels"][INSTANCE_LABEL] for pod in started} == {"kubeopera-data"}


async def test_a_run_of_a_recent_version_can_be_retried_after_newer_saves(stack: Stack) -> None:
    status, saved = await stack.call("POST", "data-pipelines", json=body(fail_step=True))
    pipeline = saved["id"]
    status, run = await stack.call("POST", f"data-pipelines/{pipeline}/run", json={})
    assert status == 201, run
    name = run["workflow"]["name"]
    assert (await finish(stack, name))["status"]["phase"] == "Failed"
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
    done = await finish(stack, run["workflow"]["name"])
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
