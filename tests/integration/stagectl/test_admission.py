"""A template that merely looks like a control stage gets nothing done: workflows a tenant
could create themselves (its own template with wm- stages, the version's template entered at a
stage, another tenant's pipeline claimed in the labels) wait at a wm- suspend node, and the
stage controller refuses them, logs and audits it once, and records and completes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.compiler.pipeline_stack import NS, headers
from tests.integration.stagectl.release_stack import (
    ReleaseStack,
    eventually,
    ml_spec,
    release,
    running_controller,
)

Obj = dict[str, Any]
TEMPLATES = ("argoproj.io", "v1alpha1", "workflowtemplates")
WORKFLOWS = ("argoproj.io", "v1alpha1", "workflows")


def stage_template(stage: str, output: str) -> Obj:
    return {
        "name": f"wm-{stage}",
        "metadata": {"annotations": {"kubeopera.io/platform-stage": stage}},
        "suspend": {},
        "outputs": {"parameters": [{"name": output, "valueFrom": {"supplied": {}}}]},
    }


LOOKALIKE: Obj = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "WorkflowTemplate",
    "metadata": {"name": "lookalike"},
    "spec": {
        "entrypoint": "wm-release-main",
        "templates": [
            {
                "name": "wm-release-main",
                "dag": {"tasks": [{"name": "wm-register", "template": "wm-register"}]},
            },
            stage_template("register", "version"),
        ],
    },
}


def create(stack: ReleaseStack, kind: tuple[str, str, str], obj: Obj) -> Obj:
    store = stack.stack.world.host.store
    created: Obj = store.create(store.resolve(*kind), NS, obj)
    return created


def claimed_labels(pipeline: str, version: int = 1) -> dict[str, str]:
    return {
        "kubeopera.io/pipeline-id": pipeline,
        "kubeopera.io/pipeline-version": str(version),
        "kubeopera.io/pipeline-kind": "ml",
        "workflows.argoproj.io/controller-instanceid": "kubeopera-data",
    }


async def refusals(stack: ReleaseStack) -> list[Obj]:
    rows = await stack.pool.fetch(
        "SELECT name, detail FROM run_actions WHERE action = 'stage_refused' ORDER BY id"
    )
    return [{"name": row["name"], **row["detail"]} for row in rows]


async def test_lookalike_stages_are_refused_once_and_nothing_is_done(
    release_stack: ReleaseStack,
) -> None:
    stack = release_stack
    pipeline = await stack.save()
    other_body = {
        "name": "theirs",
        "definition": {"type": "wizard", "spec": ml_spec(scorecard='{"auc": 1}')},
        "release": release(model="theirs"),
    }
    status, theirs = await stack.stack.call(
        "POST", "ml-pipelines", json=other_body, as_=headers("other")
    )
    assert status == 201, theirs
    template = f"p-{pipeline}-v1"
    create(stack, TEMPLATES, LOOKALIKE)
    cases = {
        "own-template": ({"workflowTemplateRef": {"name": "lookalike"}}, claimed_labels(pipeline)),
        "entered-at-stage": (
            {"workflowTemplateRef": {"name": template}, "entrypoint": "wm-register"},
            claimed_labels(pipeline),
        ),
        "other-tenant": (
            {"workflowTemplateRef": {"name": "lookalike"}},
            claimed_labels(str(theirs["id"])),
        ),
        "no-claim": (
            {"workflowTemplateRef": {"name": "lookalike"}},
            {"workflows.argoproj.io/controller-instanceid": "kubeopera-data"},
        ),
    }
    for name, (spec, labels) in cases.items():
        create(
            stack,
            WORKFLOWS,
            {"metadata": {"name": name, "labels": labels}, "spec": spec},
        )
    # One worker: the workflows are handled in the order they change, so a legitimate run
    # started after every poke below completes only once the pokes were handled too.
    async with running_controller(stack, STAGE_CONCURRENCY=1):

        async def all_refused() -> list[Obj] | None:
            found = await refusals(stack)
            return found if len(found) == len(cases) else None

        refused = await eventually(all_refused, what="not every lookalike was refused")
        reasons = {entry["name"]: entry["reason"] for entry in refused}
        assert reasons == {
            "own-template": "the workflow does not run its pipeline version's template",
            "entered-at-stage": "the workflow overrides its template's entrypoint",
            "other-tenant": "the workflow's pipeline is not one of its namespace's tenant",
            "no-claim": "the workflow names no pipeline version",
        }
        store = stack.stack.world.host.store
        for name in cases:  # each changes again: seen again, refused again, audited once
            store.patch(
                store.resolve(*WORKFLOWS),
                NS,
                name,
                {"metadata": {"labels": {"poke": "1"}}},
                content_type="application/merge-patch+json",
            )
        legit = await stack.run(pipeline)

        async def legit_registered() -> Obj | None:
            return await stack.outcome(stack.uid(legit), "register")

        await eventually(legit_registered, what="the legitimate run was not registered")
    assert len(await refusals(stack)) == len(cases)
    for name in cases:
        waiting = [
            node
            for node in stack.workflow(name)["status"]["nodes"].values()
            if node["templateName"] == "wm-register"
        ]
        assert [node["phase"] for node in waiting] == ["Running"]
        assert stack.completions(name) == {}
        uid = stack.uid(name)
        assert (
            await stack.pool.fetchval("SELECT count(*) FROM stage_outcomes WHERE run_uid = $1", uid)
            == 0
        )
    assert [v["run_name"] for v in await stack.versions()] == [legit]


@pytest.mark.parametrize("stage", ["gate", "approval"])
async def test_a_version_without_the_stage_refuses_it(
    release_stack: ReleaseStack, stage: str
) -> None:
    """A run claiming a version without an approval stage that waits at one (the tenant's own
    template, the node placed where the platform would put it) gets nothing; one waiting at a
    stage the version has, from another template, neither."""
    stack = release_stack
    pipeline = await stack.save(approval=False)
    output = {"gate": "verdict", "approval": "decision"}[stage]
    lookalike = {
        **LOOKALIKE,
        "metadata": {"name": f"lookalike-{stage}"},
        "spec": {
            "entrypoint": "wm-release-main",
            "templates": [
                {
                    "name": "wm-release-main",
                    "dag": {"tasks": [{"name": f"wm-{stage}", "template": f"wm-{stage}"}]},
                },
                stage_template(stage, output),
            ],
        },
    }
    create(stack, TEMPLATES, lookalike)
    create(
        stack,
        WORKFLOWS,
        {
            "metadata": {"name": "sneaky", "labels": claimed_labels(pipeline)},
            "spec": {"workflowTemplateRef": {"name": f"lookalike-{stage}"}},
        },
    )
    async with running_controller(stack):
        [refused] = await eventually(lambda: refusals(stack), what="not refused")
    expected = (
        "the pipeline version has no approval stage"
        if stage == "approval"
        else "the workflow does not run its pipeline version's template"
    )
    assert refused["reason"] == expected
    assert refused["stage"] == stage
