"""stagectl.workflow and stagectl.admission: reading a workflow never raises on any JSON, finds
exactly the waiting platform stage nodes, and admission refuses every claim the stored version
does not back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.db.pipelines import PipelineRow, VersionRow
from stagectl.admission import refusal, tenant_of
from stagectl.workflow import (
    RunFacts,
    WaitingStage,
    output_artifact,
    read_run,
    root_phase,
    stage_node_name,
    step_node,
    unhandled_exit,
    waiting_stages,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=30,
)
keys = st.sampled_from(
    [
        "metadata",
        "spec",
        "status",
        "nodes",
        "labels",
        "name",
        "uid",
        "namespace",
        "type",
        "phase",
        "templateName",
        "outputs",
        "artifacts",
        "parameters",
        "workflowTemplateRef",
        "arguments",
        "s3",
        "key",
    ]
)
workflow_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(keys | st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=40,
)


def node(name: str, template: str, *, kind: str = "Suspend", phase: str = "Running") -> Any:
    return {
        "id": f"id-{name}",
        "name": name,
        "type": kind,
        "phase": phase,
        "templateName": template,
    }


def workflow(*nodes: Any, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "wf",
            "namespace": "kubeopera-data-acme",
            "uid": "u1",
            "resourceVersion": "42",
            "labels": {"kubeopera.io/pipeline-id": "p1", "kubeopera.io/pipeline-version": "3"},
            "annotations": {"workflows.argoproj.io/creator": "alice"},
        },
        "spec": {"workflowTemplateRef": {"name": "p-p1-v3"}, **spec},
        "status": {"nodes": {n["id"]: n for n in nodes}},
    }


@settings(max_examples=300)
@given(json_values | workflow_like)
def test_reading_never_raises(doc: Any) -> None:
    if isinstance(doc, dict):
        read_run(doc)
        waiting_stages(doc)
        root_phase(doc)
        step_node(doc, "train")


@settings(max_examples=200)
@given(st.dictionaries(st.text(max_size=10), workflow_like, max_size=6))
def test_hostile_nodes_never_raise(nodes: dict[str, Any]) -> None:
    doc = workflow()
    doc["status"]["nodes"] = nodes
    for found in waiting_stages(doc):
        assert found.stage in ("register", "gate", "approval", "cleanup")


def test_only_waiting_suspend_nodes_of_platform_templates_are_stages() -> None:
    doc = workflow(
        node("wf.wm-register", "wm-register"),
        node("wf.wm-gate", "wm-gate", phase="Succeeded"),
        node("wf.main.wm-approval", "wm-approval", kind="Pod"),
        node("wf.onExit", "wm-cleanup"),
        node("wf.main.register", "register"),
        node("wf.wm-canary", "wm-canary"),
    )
    assert waiting_stages(doc) == [
        WaitingStage("cleanup", "id-wf.onExit", "wf.onExit"),
        WaitingStage("register", "id-wf.wm-register", "wf.wm-register"),
    ]


def test_the_run_facts() -> None:
    facts = read_run(workflow(arguments={"parameters": [{"name": "day", "value": "x"}]}))
    assert facts is not None
    assert (facts.pipeline_id, facts.pipeline_version, facts.template_ref) == ("p1", 3, "p-p1-v3")
    assert (facts.creator, facts.resource_version, facts.parameters) == ("alice", 42, {"day": "x"})
    doc = workflow()
    doc["metadata"]["labels"]["kubeopera.io/pipeline-version"] = "3a"
    doc["spec"]["workflowTemplateRef"]["clusterScope"] = True
    facts = read_run(doc)
    assert facts is not None
    assert (facts.pipeline_version, facts.template_ref) == (None, None)
    assert read_run({"metadata": {"name": "x"}}) is None


def test_a_steps_artifact_is_read_from_its_succeeded_node() -> None:
    failed = {
        **node("wf.main.train(0)", "train", kind="Pod", phase="Failed"),
        "displayName": "train",
    }
    retried = {
        **node("wf.main.train", "train", kind="Retry", phase="Succeeded"),
        "displayName": "train",
        "outputs": {"artifacts": [{"name": "model", "s3": {"key": "tenants/acme/a/m.tgz"}}]},
    }
    doc = workflow(failed, retried)
    found = step_node(doc, "train")
    assert found is not None
    artifact = output_artifact(found, "model")
    assert artifact is not None
    assert (artifact.key, artifact.bucket) == ("tenants/acme/a/m.tgz", None)
    assert output_artifact(found, "other") is None
    assert step_node(doc, "evaluate") is None


# --- admission ------------------------------------------------------------------------------
def pipeline(*, tenant: str = "acme", kind: str = "ml") -> PipelineRow:
    return PipelineRow(
        id="p1",
        tenant=tenant,
        kind=kind,  # type: ignore[arg-type]
        name="churn",
        description="",
        definition_type="wizard",
        current_version=3,
        latest_version=3,
        created_by="alice",
        created_at=NOW,
        updated_at=NOW,
    )


def version(*stages: str) -> VersionRow:
    return VersionRow(
        pipeline_id="p1",
        version=3,
        definition={},
        parameters=[],
        settings={},
        stages=list(stages or ("register", "gate", "cleanup")),
        template_name="p-p1-v3",
        template={},
        template_removed_at=None,
        created_by="alice",
        created_at=NOW,
    )


def facts(**changes: Any) -> RunFacts:
    found = read_run(workflow())
    assert found is not None
    return RunFacts(**{**{f: getattr(found, f) for f in found.__slots__}, **changes})


REGISTER = WaitingStage("register", "n", stage_node_name("wf", "register"))


def test_a_stage_the_stored_version_backs_is_admitted() -> None:
    assert refusal(facts(), REGISTER, pipeline(), version()) is None
    assert refusal(facts(entrypoint="wm-release-main"), REGISTER, pipeline(), version()) is None
    cleanup = WaitingStage("cleanup", "n", "wf.onExit")
    assert refusal(facts(), cleanup, pipeline(), version()) is None


def test_every_claim_the_version_does_not_back_is_refused() -> None:
    cases = [
        (facts(namespace="default"), REGISTER, pipeline(), version(), "not in a tenant's"),
        (facts(pipeline_id=None), REGISTER, pipeline(), version(), "names no pipeline"),
        (facts(), REGISTER, None, version(), "not one of its namespace's tenant"),
        (facts(), REGISTER, pipeline(tenant="other"), version(), "not one of its namespace's"),
        (facts(), REGISTER, pipeline(kind="data"), version(), "not an ML pipeline"),
        (facts(), REGISTER, pipeline(), None, "version is not recorded"),
        (facts(), REGISTER, pipeline(), version("gate"), "has no register stage"),
        (facts(template_ref="mine"), REGISTER, pipeline(), version(), "template"),
        (facts(template_ref=None), REGISTER, pipeline(), version(), "template"),
        (facts(entrypoint="wm-register"), REGISTER, pipeline(), version(), "entrypoint"),
        (
            facts(),
            WaitingStage("register", "n", "wf.main.wm-register"),
            pipeline(),
            version(),
            "not where the platform puts it",
        ),
        (
            facts(),
            WaitingStage("cleanup", "n", "wf.wm-cleanup"),
            pipeline(),
            version(),
            "not where the platform puts it",
        ),
    ]
    for run, waiting, found_pipeline, found_version, expected in cases:
        reason = refusal(run, waiting, found_pipeline, found_version)
        assert reason is not None
        assert expected in reason, (expected, reason)


def test_tenant_of_a_namespace() -> None:
    assert tenant_of("kubeopera-data-acme") == "acme"
    assert tenant_of("kubeopera-data-") is None
    assert tenant_of("kubeopera-serve-acme") is None


def test_a_terminated_run_without_its_exit_handler_is_cleaned_up_without_a_node() -> None:
    doc = workflow(node("wf.wm-register", "wm-register", phase="Failed"), shutdown="Terminate")
    doc["status"].update(phase="Failed", storedWorkflowTemplateSpec={"onExit": "wm-cleanup"})
    assert unhandled_exit(doc) == WaitingStage("cleanup", "", "wf.onExit")
    stopped = {**doc, "spec": {**doc["spec"], "shutdown": "Stop"}}
    assert unhandled_exit(stopped) is None  # Argo runs the exit handler then
    running = {**doc, "status": {**doc["status"], "phase": "Running"}}
    assert unhandled_exit(running) is None
    theirs = {**doc, "status": {**doc["status"], "storedWorkflowTemplateSpec": {"onExit": "x"}}}
    assert unhandled_exit(theirs) is None
    ran = workflow(node("wf.onExit", "wm-cleanup", phase="Succeeded"), shutdown="Terminate")
    ran["status"].update(phase="Failed", storedWorkflowTemplateSpec={"onExit": "wm-cleanup"})
    assert unhandled_exit(ran) is None
