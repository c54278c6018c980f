"""An ML pipeline with a release, end to end: saved through the apiserver and the compiler, its
template applied with the platform's stages and its version recording them, then run on the sim
host's data controller, where the stages wait as suspend nodes until they are completed through
the Argo server (as the stage controller will): a failed verdict skips approval and the exit
handler still runs; a passed one reaches approval."""

from __future__ import annotations

import json
from typing import Any

from shared.argo import ArgoServer
from sim.argo.server import DATA_ARGO_NAMESPACE, DATA_ARGO_SERVICE
from tests.integration.compiler.pipeline_stack import NS, Stack, finish

Obj = dict[str, Any]


def ml_spec() -> Obj:
    return {
        "apiVersion": "pipelines.kubeopera.io/v1",
        "parameters": [{"name": "day", "default": "2026-01-01"}],
        "steps": [
            {
                "name": "train",
                "image": "ghcr.io/acme/train:1.0",
                "command": ["train"],
                "args": ["--day", "{{workflow.parameters.day}}"],
                "outputs": {"artifacts": [{"name": "model", "path": "/out/model"}]},
            },
            {
                "name": "evaluate",
                "image": "ghcr.io/acme/evaluate:1.0",
                "command": ["evaluate"],
                "depends_on": ["train"],
                "outputs": {
                    "artifacts": [{"name": "scorecard", "path": "/out/eval_scorecard.json"}]
                },
            },
        ],
    }


def release(**fields: Any) -> Obj:
    return {
        "model": "churn",
        "model_artifact": {"step": "train", "artifact": "model"},
        "scorecard": {"step": "evaluate", "artifact": "scorecard"},
        "gate": {
            "thresholds": [{"metric": "auc", "op": ">=", "value": 0.8}],
            "compare_to_production": {"metric": "auc", "max_regression": 0.02},
        },
        "approval": {"required": True},
        **fields,
    }


SERVING: Obj = {
    "model_format": {"name": "sklearn", "version": "1"},
    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}},
    "min_replicas": 0,
    "max_replicas": 2,
}


def ml_body(**release_fields: Any) -> Obj:
    return {
        "name": "churn",
        "definition": {"type": "wizard", "spec": ml_spec()},
        "release": release(**release_fields),
    }


def argo(stack: Stack) -> ArgoServer:
    return ArgoServer(stack.kube, namespace=DATA_ARGO_NAMESPACE, service=DATA_ARGO_SERVICE)


def workflow(stack: Stack, name: str) -> Obj:
    store = stack.world.host.store
    result: Obj = store.get(store.resolve("argoproj.io", "v1alpha1", "workflows"), NS, name)
    return result


def by_template(run: Obj, template: str) -> Obj | None:
    nodes = run.get("status", {}).get("nodes", {}).values()
    return next((node for node in nodes if node.get("templateName") == template), None)


async def waiting_at(stack: Stack, name: str, stage: str) -> Obj:
    """Step the data controller until the run waits at the stage's suspend node; the run never
    finishes meanwhile (``finish`` would give up on it)."""
    controller = stack.world.host.data_argo
    assert controller is not None
    for _ in range(100):
        await controller.step()
        run = workflow(stack, name)
        node = by_template(run, f"wm-{stage}")
        if node is not None and node["phase"] == "Running":
            assert run["status"]["phase"] == "Running"
            return node
        assert run.get("status", {}).get("phase") in (None, "Pending", "Running"), run["status"]
    raise AssertionError(f"{name} never waited at {stage}")


async def complete(stack: Stack, name: str, node: Obj, outputs: dict[str, str]) -> None:
    await argo(stack).set_node(
        NS,
        name,
        node_field_selector=f"id={node['id']}",
        phase="Succeeded",
        output_parameters=outputs,
    )


async def saved_pipeline(stack: Stack, **release_fields: Any) -> str:
    status, saved = await stack.call("POST", "ml-pipelines", json=ml_body(**release_fields))
    assert status == 201, saved
    return str(saved["id"])


async def test_a_saved_release_applies_the_stages_and_the_version_records_them(
    stack: Stack,
) -> None:
    pipeline = await saved_pipeline(stack)
    store = stack.world.host.store
    [name] = stack.templates()
    applied = store.get(store.resolve("argoproj.io", "v1alpha1", "workflowtemplates"), NS, name)
    spec = applied["spec"]
    assert spec["entrypoint"] == "wm-release-main"
    assert spec["onExit"] == "wm-cleanup"
    annotated = {
        t["name"]: t["metadata"]["annotations"]["kubeopera.io/platform-stage"]
        for t in spec["templates"]
        if "kubeopera.io/platform-stage" in (t.get("metadata") or {}).get("annotations", {})
    }
    assert annotated == {
        "wm-register": "register",
        "wm-gate": "gate",
        "wm-approval": "approval",
        "wm-cleanup": "cleanup",
    }
    row = await stack.pool.fetchrow(
        "SELECT stages, settings FROM pipeline_versions WHERE pipeline_id = $1", pipeline
    )
    assert row["stages"] == ["register", "gate", "approval", "cleanup"]
    assert row["settings"]["release"]["model"] == "churn"
    assert row["settings"]["release"]["gate"]["compare_to_production"] == {
        "metric": "auc",
        "max_regression": 0.02,
        "higher_is_better": True,
    }

    # A new version without approval records its own stages; the first keeps its own.
    status, updated = await stack.call(
        "PUT", f"ml-pipelines/{pipeline}", json=ml_body(approval={"required": False})
    )
    assert status == 200, updated
    stages = await stack.pool.fetch(
        "SELECT version, stages FROM pipeline_versions WHERE pipeline_id = $1 ORDER BY version",
        pipeline,
    )
    assert [(r["version"], r["stages"]) for r in stages] == [
        (1, ["register", "gate", "approval", "cleanup"]),
        (2, ["register", "gate", "cleanup"]),
    ]


async def test_a_release_is_refused_on_data_pipelines_and_where_it_names_nothing(
    stack: Stack,
) -> None:
    status, refused = await stack.call("POST", "data-pipelines", json=ml_body())
    assert (status, refused["message"]) == (400, "release: only ML pipelines have a release")
    status, refused = await stack.call(
        "POST", "ml-pipelines", json=ml_body(deploy={"environments": ["staging"]})
    )
    assert (status, refused["message"]) == (
        400,
        "release.deploy: not a field of a release; this is set in release.serving",
    )
    # A serving field out of bounds is named, by the apiserver before the compiler is asked.
    status, refused = await stack.call(
        "POST",
        "ml-pipelines",
        json=ml_body(serving={**SERVING, "resources": {"requests": {"cpu": "65"}}}),
    )
    assert status == 400, refused
    assert [e["field"] for e in refused["details"]["errors"]] == [
        "release.serving.resources.requests.cpu"
    ]
    # A canary to production is refused until the canary stage exists.
    status, refused = await stack.call(
        "POST",
        "ml-pipelines",
        json=ml_body(serving=SERVING, production={"canary_steps": [10, 50]}),
    )
    assert (status, refused["details"]["errors"][0]["field"]) == (400, "release.production")
    assert refused["message"].startswith(
        "release.production: canary releases arrive with the canary stage"
    )
    status, refused = await stack.call(
        "POST", "ml-pipelines", json=ml_body(scorecard={"step": "train", "artifact": "scores"})
    )
    assert status == 400, refused
    assert refused["details"]["errors"] == [
        {
            "field": "release.scorecard.artifact",
            "message": "'train' has no output artifact 'scores'",
        }
    ]
    assert stack.templates() == []
    assert await stack.pool.fetchval("SELECT count(*) FROM pipeline_versions") == 0


async def test_a_failed_verdict_skips_approval_and_the_exit_handler_still_runs(
    stack: Stack,
) -> None:
    pipeline = await saved_pipeline(stack)
    status, run = await stack.call("POST", f"ml-pipelines/{pipeline}/run", json={})
    assert status == 201, run
    name = run["workflow"]["name"]

    register = await waiting_at(stack, name, "register")
    assert (register["type"], register["displayName"]) == ("Suspend", "wm-register")
    # The tenant's steps ran first; the run waits, and would wait for ever without a stage
    # controller.
    current = workflow(stack, name)
    done = {n["displayName"]: n["phase"] for n in current["status"]["nodes"].values()}
    assert (done["train"], done["evaluate"], done["main"]) == ("Succeeded",) * 3
    assert register["outputs"] == {
        "parameters": [{"name": "version", "valueFrom": {"supplied": {}}}]
    }
    await complete(stack, name, register, {"version": "1"})

    gate = await waiting_at(stack, name, "gate")
    reasons = json.dumps(["auc is 0.5, not >= 0.8"])
    await complete(stack, name, gate, {"verdict": "failed", "reasons": reasons})

    cleanup = await waiting_at(stack, name, "cleanup")
    # The exit handler, under Argo's name for it; approval was skipped by the gate's verdict.
    assert (cleanup["type"], cleanup["name"], cleanup["displayName"]) == (
        "Suspend",
        f"{name}.onExit",
        f"{name}.onExit",
    )
    approval = by_template(workflow(stack, name), "wm-approval")
    assert approval is not None
    assert (approval["type"], approval["phase"]) == ("Skipped", "Skipped")
    assert approval["message"] == "when 'failed == passed' evaluated false"
    gate_node = by_template(workflow(stack, name), "wm-gate")
    assert gate_node is not None
    assert gate_node["outputs"]["parameters"] == [
        {"name": "verdict", "value": "failed"},
        {"name": "reasons", "value": reasons},
    ]

    await complete(stack, name, cleanup, {"outcome": "rejected by the gate"})
    finished = await finish(stack, name)
    assert finished["status"]["phase"] == "Succeeded"


async def test_a_passed_verdict_waits_for_approval(stack: Stack) -> None:
    pipeline = await saved_pipeline(stack)
    status, run = await stack.call("POST", f"ml-pipelines/{pipeline}/run", json={})
    assert status == 201, run
    name = run["workflow"]["name"]
    await complete(stack, name, await waiting_at(stack, name, "register"), {"version": "7"})
    gate = await waiting_at(stack, name, "gate")
    await complete(stack, name, gate, {"verdict": "passed", "reasons": "[]"})

    approval = await waiting_at(stack, name, "approval")
    assert (approval["type"], approval["displayName"]) == ("Suspend", "wm-approval")
    assert by_template(workflow(stack, name), "wm-cleanup") is None  # not before the DAG ends

    await complete(stack, name, approval, {"decision": "approved"})
    cleanup = await waiting_at(stack, name, "cleanup")
    await complete(stack, name, cleanup, {"outcome": "released"})
    assert (await finish(stack, name))["status"]["phase"] == "Succeeded"


async def test_a_release_with_serving_deploys_after_the_gate_and_the_version_records_it(
    stack: Stack,
) -> None:
    pipeline = await saved_pipeline(stack, serving=SERVING)
    store = stack.world.host.store
    [name] = stack.templates()
    applied = store.get(store.resolve("argoproj.io", "v1alpha1", "workflowtemplates"), NS, name)
    by_name = {t["name"]: t for t in applied["spec"]["templates"]}
    assert by_name["wm-deploy"] == {
        "name": "wm-deploy",
        "metadata": {"annotations": {"kubeopera.io/platform-stage": "deploy"}},
        "suspend": {},
        "outputs": {"parameters": [{"name": "url", "valueFrom": {"supplied": {}}}]},
    }
    tasks = {t["name"]: t for t in by_name["wm-release-main"]["dag"]["tasks"]}
    passed = "{{tasks.wm-gate.outputs.parameters.verdict}} == passed"
    assert (tasks["wm-deploy"]["depends"], tasks["wm-deploy"]["when"]) == ("wm-gate", passed)
    assert (tasks["wm-approval"]["depends"], tasks["wm-approval"]["when"]) == (
        "wm-deploy",
        passed,
    )
    row = await stack.pool.fetchrow(
        "SELECT stages, settings FROM pipeline_versions WHERE pipeline_id = $1", pipeline
    )
    assert row["stages"] == ["register", "gate", "deploy", "approval", "cleanup"]
    # The version keeps the serving block as the stage controller will read it: complete.
    assert row["settings"]["release"]["serving"] == {
        "model_format": {"name": "sklearn", "version": "1"},
        "runtime": None,
        "resources": {
            "requests": {"cpu": "500m", "memory": "1Gi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
            "gpu": 0,
        },
        "min_replicas": 0,
        "max_replicas": 2,
        "readiness_deadline_seconds": 600,
    }
    assert row["settings"]["release"]["production"] is None
    # The API shows both on the version.
    status, detail = await stack.call("GET", f"ml-pipelines/{pipeline}")
    assert status == 200, detail
    assert detail["current"]["stages"] == ["register", "gate", "deploy", "approval", "cleanup"]
    assert detail["current"]["release"] == row["settings"]["release"]
    status, versions = await stack.call("GET", f"ml-pipelines/{pipeline}/versions")
    assert status == 200, versions
    assert [v["stages"] for v in versions["items"]] == [row["stages"]]


async def test_a_failed_gate_skips_deploy_and_a_passed_one_waits_at_deploy_then_approval(
    stack: Stack,
) -> None:
    # Completed by hand through the Argo server, as the existing stages are above: the stage
    # controller does not carry deploy yet.
    pipeline = await saved_pipeline(stack, serving=SERVING)
    names = []
    for _ in range(2):
        status, run = await stack.call("POST", f"ml-pipelines/{pipeline}/run", json={})
        assert status == 201, run
        names.append(run["workflow"]["name"])
    failed, passed = names

    await complete(stack, failed, await waiting_at(stack, failed, "register"), {"version": "1"})
    gate = await waiting_at(stack, failed, "gate")
    await complete(stack, failed, gate, {"verdict": "failed", "reasons": "[]"})
    cleanup = await waiting_at(stack, failed, "cleanup")
    for template in ("wm-deploy", "wm-approval"):
        node = by_template(workflow(stack, failed), template)
        assert node is not None
        assert node["phase"] == "Skipped", node
    await complete(stack, failed, cleanup, {"outcome": "rejected by the gate"})
    assert (await finish(stack, failed))["status"]["phase"] == "Succeeded"

    await complete(stack, passed, await waiting_at(stack, passed, "register"), {"version": "2"})
    gate = await waiting_at(stack, passed, "gate")
    await complete(stack, passed, gate, {"verdict": "passed", "reasons": "[]"})
    deploy = await waiting_at(stack, passed, "deploy")
    assert (deploy["type"], deploy["displayName"]) == ("Suspend", "wm-deploy")
    assert by_template(workflow(stack, passed), "wm-approval") is None  # not before deploy
    url = "https://churn-staging.acme.models.example.com"
    await complete(stack, passed, deploy, {"url": url})
    approval = await waiting_at(stack, passed, "approval")
    await complete(stack, passed, approval, {"decision": "rejected"})
    cleanup = await waiting_at(stack, passed, "cleanup")
    deployed = by_template(workflow(stack, passed), "wm-deploy")
    assert deployed is not None
    assert deployed["outputs"]["parameters"] == [{"name": "url", "value": url}]
    await complete(stack, passed, cleanup, {"outcome": "rejected"})
    assert (await finish(stack, passed))["status"]["phase"] == "Succeeded"
