"""What an ML pipeline's containers get for experiment tracking, and that it is added only after
the allowlist judged the tenant's document (a tenant writing it is still refused)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compiler.pipelines.compile import StepLimits
from compiler.pipelines.definitions import Target, render
from compiler.pipelines.stamping import with_tracking_credentials
from compiler.tracking import accounts
from shared.errors import Refused
from shared.pipelines import parse_body
from tests.unit.compiler._pipelines import pipeline, step

LIMITS = StepLimits(max_cpu="4", max_memory="8Gi", max_gpu=0)
SECRET_REF = {"secretRef": {"name": "kubeopera-mlflow"}}


def target(kind: Any = "ml", *, tracking: bool = True) -> Target:
    return Target(
        tenant="acme",
        pipeline_id="p1",
        version=1,
        kind=kind,
        limits=LIMITS,
        artifact_bucket="artifacts",
        tracking=tracking,
    )


def wizard_body(*steps: dict[str, Any]) -> Any:
    spec = pipeline(*(steps or (step("train"), step("evaluate", depends_on=["train"]))))
    return parse_body({"name": "trainer", "definition": {"type": "wizard", "spec": spec}})


def yaml_body(container: str) -> Any:
    text = f"""
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {{name: t}}
spec:
  entrypoint: main
  templates:
    - name: main
      container: {container}
"""
    return parse_body({"name": "y", "definition": {"type": "yaml", "template": text}})


def containers(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [t["container"] for t in document["spec"]["templates"] if "container" in t]


def test_every_container_of_an_ml_pipeline_gets_the_account_and_its_experiment() -> None:
    rendered = render(wizard_body(), target())
    found = containers(rendered.template)
    assert len(found) == 2
    for container in found:
        assert container["envFrom"] == [SECRET_REF]
        assert container["env"][0] == {"name": "MLFLOW_EXPERIMENT_NAME", "value": "acme/p1"}


@pytest.mark.parametrize(("kind", "tracking"), [("data", True), ("ml", False)])
def test_data_pipelines_and_unconfigured_tracking_get_nothing(kind: str, tracking: bool) -> None:
    rendered = render(wizard_body(), target(kind, tracking=tracking))
    for container in containers(rendered.template):
        assert "envFrom" not in container
        assert "MLFLOW_EXPERIMENT_NAME" not in str(container.get("env"))


@pytest.mark.parametrize(
    "container",
    [
        "{image: alpine, envFrom: [{secretRef: {name: kubeopera-mlflow}}]}",
        "{image: alpine, env: [{name: P, valueFrom: {secretKeyRef: "
        "{name: kubeopera-mlflow, key: MLFLOW_TRACKING_PASSWORD}}}]}",
    ],
)
def test_a_tenant_referencing_the_account_secret_itself_is_still_refused(container: str) -> None:
    with pytest.raises(Refused) as refused:
        render(yaml_body(container), target())
    rules = {v["rule"] for v in refused.value.details["violations"]}
    assert rules == {"platform_secret"}


def test_what_the_tenant_wrote_stays_and_wins() -> None:
    rendered = render(
        yaml_body(
            "{image: alpine, env: [{name: MLFLOW_EXPERIMENT_NAME, value: other}, "
            "{name: A, value: b}], envFrom: [{configMapRef: {name: settings}}]}"
        ),
        target(),
    )
    (container,) = containers(rendered.template)
    assert container["envFrom"] == [SECRET_REF, {"configMapRef": {"name": "settings"}}]
    assert container["env"] == [
        {"name": "MLFLOW_EXPERIMENT_NAME", "value": "other"},
        {"name": "A", "value": "b"},
    ]


def test_scripts_and_container_sets_get_it_and_other_templates_do_not() -> None:
    template = {
        "spec": {
            "templates": [
                {"name": "s", "script": {"image": "python", "source": "print(1)"}},
                {"name": "c", "containerSet": {"containers": [{"name": "a"}, {"name": "b"}]}},
                {"name": "wait", "suspend": {}},
                {"name": "flow", "dag": {"tasks": []}},
                {"name": "k", "resource": {"action": "create", "manifest": "{}"}},
                "not a template",
            ]
        }
    }
    done = with_tracking_credentials(template, secret="kubeopera-mlflow", experiment="acme/p1")
    script, container_set, *others = done["spec"]["templates"]
    assert script["script"]["envFrom"] == [SECRET_REF]
    assert [c["envFrom"] for c in container_set["containerSet"]["containers"]] == [[SECRET_REF]] * 2
    assert others == template["spec"]["templates"][2:]
    assert "envFrom" not in template["spec"]["templates"][0]["script"]  # the input is untouched


@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=5),
        lambda c: (
            st.lists(c, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "spec",
                        "templates",
                        "container",
                        "script",
                        "containerSet",
                        "containers",
                        "env",
                        "envFrom",
                        "name",
                    ]
                ),
                c,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_any_shape_is_tolerated(document: Any) -> None:
    wrapped = {"spec": document} if not isinstance(document, dict) else document
    with_tracking_credentials(wrapped, secret="s", experiment="e")


def test_the_secret_holds_the_account_and_reads_back() -> None:
    manifest = accounts.secret_manifest(
        "acme", username="tenant-acme", password="p4ss", uri="http://mlflow:5000"
    )
    assert manifest["metadata"]["name"] == "kubeopera-mlflow"
    assert manifest["metadata"]["namespace"] == "kubeopera-data-acme"
    assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "workflow-manager"
    assert accounts.secret_values(manifest) == {
        "MLFLOW_TRACKING_USERNAME": "tenant-acme",
        "MLFLOW_TRACKING_PASSWORD": "p4ss",
        "MLFLOW_TRACKING_URI": "http://mlflow:5000",
    }
    damaged = {
        "data": {
            "MLFLOW_TRACKING_PASSWORD": "%%%",
            "MLFLOW_TRACKING_URI": base64.b64encode(b"\xff").decode(),
            "OTHER": base64.b64encode(b"x").decode(),
        }
    }
    assert accounts.secret_values(damaged) == {}
    assert accounts.secret_values({"data": None}) == {}
