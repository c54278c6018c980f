"""An ML pipeline's release: the body's field, its refusals, the stages compiled after the
allowlist (wizard and YAML), and the stages a version records."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
import yaml

from compiler.pipelines import release as R
from compiler.pipelines.compile import StepLimits
from compiler.pipelines.definitions import Rendered, Target, render
from shared import stages as S
from shared.errors import Invalid, Refused
from shared.pipelines import Release, parse_body
from tests.unit.compiler._pipelines import pipeline, step

TARGET = Target(
    tenant="acme",
    pipeline_id="churn",
    version=3,
    kind="ml",
    limits=StepLimits("4", "8Gi", 1),
    artifact_bucket="kubeopera-artifacts",
)
TRAIN = step(
    "train",
    outputs={"artifacts": [{"name": "model", "path": "/out/model"}]},
)
EVALUATE = step(
    "evaluate",
    depends_on=["train"],
    inputs={"artifacts": [{"name": "model", "path": "/in/model", "from": "train.model"}]},
    outputs={"artifacts": [{"name": "scorecard", "path": "/out/eval_scorecard.json"}]},
)


def release(**fields: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "model": "churn",
        "model_artifact": {"step": "train", "artifact": "model"},
        "scorecard": {"step": "evaluate", "artifact": "scorecard"},
        "gate": {"thresholds": [{"metric": "auc", "op": ">=", "value": 0.8}]},
    }
    value.update(fields)
    return value


def wizard_body(**fields: Any) -> dict[str, Any]:
    return {
        "name": "churn",
        "definition": {"type": "wizard", "spec": pipeline(TRAIN, EVALUATE)},
        "release": release(),
        **fields,
    }


YAML = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: churn}
spec:
  entrypoint: flow
  arguments:
    parameters:
    - {name: day, value: "2026-01-01"}
    - {name: rows, value: "10"}
  templates:
  - name: flow
    inputs:
      parameters:
      - {name: day}
      - {name: sample, value: "0.5"}
    steps:
    - - name: fit
        template: fit
    - - name: score
        template: score
  - name: fit
    container:
      image: ghcr.io/acme/fit:1
      args: ["{{workflow.parameters.day}}"]
    outputs:
      artifacts:
      - {name: model, path: /out/model}
  - name: score
    container: {image: ghcr.io/acme/score:1}
    outputs:
      artifacts:
      - {name: scorecard, path: /out/eval_scorecard.json}
"""


def yaml_body(template: str = YAML, **release_fields: Any) -> dict[str, Any]:
    fields = {
        "model_artifact": {"step": "fit", "artifact": "model"},
        "scorecard": {"step": "score", "artifact": "scorecard"},
        **release_fields,
    }
    return {
        "name": "churn",
        "definition": {"type": "yaml", "template": template},
        "release": release(**fields),
    }


def rendered(data: dict[str, Any], target: Target = TARGET) -> Rendered:
    return render(parse_body(data, target.kind), target)


def templates(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in document["spec"]["templates"]}


def errors(exc: pytest.ExceptionInfo[Invalid]) -> list[tuple[str, str]]:
    return [(e["field"], e["message"]) for e in exc.value.details["errors"]]


# --- the body ---------------------------------------------------------------------------------
def test_a_release_is_parsed_with_its_defaults_and_recorded_in_the_settings() -> None:
    body = parse_body(wizard_body(), "ml")
    assert body.release is not None
    assert body.release.approval.required is False
    assert body.release.gate.compare_to_production is None
    settings = body.settings()
    assert settings["release"]["model"] == "churn"
    assert settings["release"]["approval"] == {"required": False}
    assert settings["release"]["gate"]["thresholds"] == [
        {"metric": "auc", "op": ">=", "value": 0.8}
    ]
    assert parse_body({**wizard_body(), "release": None}).settings()["release"] is None


def test_a_data_pipeline_has_no_release() -> None:
    with pytest.raises(Invalid) as exc:
        parse_body(wizard_body(), "data")
    assert exc.value.message == "release: only ML pipelines have a release"
    assert errors(exc)[0][0] == "release"
    # The compiler refuses it too, whoever parsed the body.
    with pytest.raises(Invalid, match="only ML pipelines"):
        render(parse_body(wizard_body()), dataclasses.replace(TARGET, kind="data"))


@pytest.mark.parametrize(
    ("field", "home"),
    [
        ("deploy", "release.serving"),
        ("staging", "release.serving"),
        ("canary", "release.production.canary_steps"),
    ],
)
def test_a_deployment_setting_in_the_wrong_place_is_told_where_it_lives(
    field: str, home: str
) -> None:
    body = wizard_body(release=release(**{field: {"namespace": "x"}}))
    with pytest.raises(Invalid) as exc:
        parse_body(body, "ml")
    message = f"not a field of a release; this is set in {home}"
    assert exc.value.message == f"release.{field}: {message}"
    assert errors(exc) == [(f"release.{field}", message)]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"model": "Churn"}, "release.model"),
        ({"model": "a" * 64}, "release.model"),
        ({"model": "-churn"}, "release.model"),
        ({"gate": {"thresholds": []}}, "release.gate.thresholds"),
        (
            {"gate": {"thresholds": [{"metric": "a", "op": ">=", "value": 1}] * 21}},
            "release.gate.thresholds",
        ),
        ({"gate": {"thresholds": [{"metric": "a", "op": "=>", "value": 1}]}}, "op"),
        ({"gate": {"thresholds": [{"metric": "a", "op": ">", "value": True}]}}, "value"),
        ({"gate": {"thresholds": [{"metric": "a", "op": ">", "value": "1"}]}}, "value"),
        ({"gate": {"thresholds": [{"metric": "a", "op": ">", "value": float("nan")}]}}, "value"),
        ({"gate": {"thresholds": [{"metric": "", "op": ">", "value": 1}]}}, "metric"),
        (
            {
                "gate": {
                    "thresholds": [{"metric": "a", "op": ">", "value": 1}],
                    "compare_to_production": {"metric": "a", "max_regression": -0.1},
                }
            },
            "max_regression",
        ),
        ({"approval": {"required": "yes"}}, "release.approval.required"),
        ({"model_artifact": {"step": "train"}}, "release.model_artifact.artifact"),
        ({"scorecard": None}, "release.scorecard"),
        ({"gates": {}}, "release.gates"),
    ],
)
def test_a_malformed_release_names_its_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(Invalid) as exc:
        parse_body(wizard_body(release=release(**fields)), "ml")
    assert any(path.startswith(field) or path.endswith(field) for path, _ in errors(exc))


# --- the steps and artifacts it names --------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (
            {"model_artifact": {"step": "fit", "artifact": "model"}},
            ("release.model_artifact.step", "the template has no task or step 'fit'"),
        ),
        (
            {"scorecard": {"step": "evaluate", "artifact": "metrics"}},
            ("release.scorecard.artifact", "'evaluate' has no output artifact 'metrics'"),
        ),
        (
            # The input artifact of the same name is not an output.
            {"scorecard": {"step": "evaluate", "artifact": "model"}},
            ("release.scorecard.artifact", "'evaluate' has no output artifact 'model'"),
        ),
    ],
)
def test_the_release_names_output_artifacts_of_the_template(
    fields: dict[str, Any], error: tuple[str, str]
) -> None:
    with pytest.raises(Invalid) as exc:
        rendered(wizard_body(release=release(**fields)))
    assert errors(exc) == [error]


def _yaml_with(change: str, replacement: str) -> str:
    assert change in YAML
    return YAML.replace(change, replacement)


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (
            _yaml_with(
                "        template: score\n", "        template: score\n        withItems: [1, 2]\n"
            ),
            "'score' runs in a loop, once per item: name a step that runs once",
        ),
        (
            _yaml_with(
                "    - - name: score\n",
                "    - - name: score\n        template: fit\n    - - name: score\n",
            ),
            "2 tasks or steps are named 'score': name exactly one",
        ),
        (
            _yaml_with(
                "        template: score\n",
                "        templateRef: {name: p-other-v1, template: score}\n",
            ),
            "'score' runs a template outside this pipeline's",
        ),
    ],
)
def test_the_scorecard_step_runs_once_by_a_unique_name_in_this_template(
    template: str, message: str
) -> None:
    with pytest.raises(Invalid) as exc:
        rendered(yaml_body(template))
    assert errors(exc) == [("release.scorecard.step", message)]


# --- the compiled stages ---------------------------------------------------------------------
SERVING = {"model_format": {"name": "sklearn"}}
PASSED = "{{tasks.wm-gate.outputs.parameters.verdict}} == passed"


@pytest.mark.parametrize("serving", [False, True])
@pytest.mark.parametrize("approval", [False, True])
def test_a_wizard_pipeline_with_a_release_ends_with_the_platforms_stages(
    serving: bool, approval: bool
) -> None:
    fields: dict[str, Any] = {"approval": {"required": approval}}
    if serving:
        fields["serving"] = SERVING
    result = rendered(wizard_body(release=release(**fields)))
    spec = result.template["spec"]
    expected_stages = ["register", "gate"]
    expected_stages += ["deploy"] if serving else []
    expected_stages += ["approval"] if approval else []
    assert result.stages == [*expected_stages, "cleanup"]
    assert spec["entrypoint"] == "wm-release-main"
    assert spec["onExit"] == "wm-cleanup"
    by_name = templates(result.template)
    tasks = by_name["wm-release-main"]["dag"]["tasks"]
    # In the spec's order, each after the one before; past the gate, only when it passed.
    expected_tasks = [
        {"name": "main", "template": "pipeline"},
        {"name": "wm-register", "template": "wm-register", "depends": "main"},
        {"name": "wm-gate", "template": "wm-gate", "depends": "wm-register"},
    ]
    if serving:
        expected_tasks.append(
            {"name": "wm-deploy", "template": "wm-deploy", "depends": "wm-gate", "when": PASSED}
        )
    if approval:
        expected_tasks.append(
            {
                "name": "wm-approval",
                "template": "wm-approval",
                "depends": "wm-deploy" if serving else "wm-gate",
                "when": PASSED,
            }
        )
    assert tasks == expected_tasks
    outputs = {"register": ["version"], "gate": ["verdict", "reasons"], "cleanup": ["outcome"]}
    if serving:
        outputs["deploy"] = ["url"]
    if approval:
        outputs["approval"] = ["decision"]
    for stage, names in outputs.items():
        assert by_name[f"wm-{stage}"] == {
            "name": f"wm-{stage}",
            "metadata": {"annotations": {"kubeopera.io/platform-stage": stage}},
            "suspend": {},
            "outputs": {"parameters": [{"name": n, "valueFrom": {"supplied": {}}} for n in names]},
        }
    assert ("wm-approval" in by_name) is approval
    assert ("wm-deploy" in by_name) is serving
    # The tenant's part is as it was: its DAG and its step templates.
    assert set(by_name) - {f"wm-{s}" for s in outputs} == {
        "wm-release-main",
        "pipeline",
        "step-train",
        "step-evaluate",
    }


def test_a_yaml_pipeline_with_serving_deploys_after_the_gate_and_passes_argos_schema() -> None:
    # render() runs Argo's schema on the final template: a YAML pipeline with every stage of
    # today passes it, and the version records them in run order.
    result = rendered(yaml_body(approval={"required": True}, serving=SERVING))
    assert result.stages == ["register", "gate", "deploy", "approval", "cleanup"]
    assert R.stages_of(result.template) == result.stages
    names = [t["name"] for t in templates(result.template)["wm-release-main"]["dag"]["tasks"]]
    assert names == ["main", "wm-register", "wm-gate", "wm-deploy", "wm-approval"]


# --- what part three compiles: the stages that touch production --------------------------------
def _release(**fields: Any) -> Release:
    return Release.model_validate(release(serving=SERVING, **fields))


def test_production_runs_only_when_the_gate_passed_and_the_approval_approved() -> None:
    approved = _release(approval={"required": True})
    condition = (
        "{{tasks.wm-gate.outputs.parameters.verdict}} == passed"
        " && {{tasks.wm-approval.outputs.parameters.decision}} == approved"
    )
    assert R.production_condition(approved) == condition
    assert R.approved_condition() == "{{tasks.wm-approval.outputs.parameters.decision}} == approved"
    # Without an approval, the gate's verdict alone.
    assert R.production_condition(_release()) == PASSED


@pytest.mark.parametrize("stage", [S.CANARY, S.ANALYSIS, S.PROMOTION])
def test_a_stage_touching_production_waits_for_success_and_both_conditions(stage: str) -> None:
    approved = _release(approval={"required": True})
    assert R.stage_task(stage, "wm-approval", approved) == {
        "name": f"wm-{stage}",
        "template": f"wm-{stage}",
        # A skipped approval (the gate failed) never lets it run, nor reads a decision it has not.
        "depends": "wm-approval.Succeeded",
        "when": R.production_condition(approved),
    }
    assert R.stage_task(stage, "wm-deploy", _release())["depends"] == "wm-deploy.Succeeded"
    assert R.stage_task(stage, "wm-deploy", _release())["when"] == PASSED


def test_stages_up_to_approval_follow_the_one_before_and_past_the_gate_need_it_passed() -> None:
    plain = _release()
    assert R.stage_task(S.GATE, "wm-register", plain) == {
        "name": "wm-gate",
        "template": "wm-gate",
        "depends": "wm-register",
    }
    for stage in (S.DEPLOY, S.APPROVAL):
        assert R.stage_task(stage, "x", plain)["when"] == PASSED
        assert R.stage_task(stage, "x", plain)["depends"] == "x"


def test_a_release_compiles_no_stage_that_touches_production_today() -> None:
    # production is refused at save (CANARY_RELEASES is off); a Release carrying it anyway
    # compiles to no canary node that nobody would complete.
    production = {"canary_steps": [10, 50]}
    carried = Release.model_validate(release(serving=SERVING, production=production))
    assert R.stage_list(carried) == ["register", "gate", "deploy", "cleanup"]


def test_a_yaml_pipeline_with_a_release_passes_its_entrypoints_inputs_on() -> None:
    result = rendered(yaml_body(approval={"required": True}))
    assert result.stages == ["register", "gate", "approval", "cleanup"]
    main = templates(result.template)["wm-release-main"]["dag"]["tasks"][0]
    # day is a workflow parameter and reaches the entrypoint's input as Argo would pass it;
    # sample is not one and keeps its default.
    assert main == {
        "name": "main",
        "template": "flow",
        "arguments": {"parameters": [{"name": "day", "value": "{{workflow.parameters.day}}"}]},
    }
    assert result.parameters == [
        {"name": "day", "default": "2026-01-01"},
        {"name": "rows", "default": "10"},
    ]


def test_pipelines_without_a_release_have_no_stages() -> None:
    body = wizard_body()
    del body["release"]
    for kind in ("ml", "data"):
        result = rendered(body, dataclasses.replace(TARGET, kind=kind))
        assert result.stages == []
        assert result.template["spec"]["entrypoint"] == "pipeline"
        assert not any(t["name"].startswith("wm-") for t in result.template["spec"]["templates"])


def test_the_stages_are_added_after_the_allowlist_judged_the_tenants_part() -> None:
    # The same compiled document, as tenant YAML, is refused: it has the platform's stages.
    compiled = rendered(wizard_body()).template
    body = {"name": "x", "definition": {"type": "yaml", "template": yaml.safe_dump(compiled)}}
    with pytest.raises(Refused) as exc:
        rendered(body)
    rules = {v["rule"] for v in exc.value.details["violations"]}
    assert rules == {"platform_stage"}
    paths = {v["path"] for v in exc.value.details["violations"]}
    assert "spec.entrypoint" in paths
    assert "spec.onExit" in paths
    assert 'spec.templates[4].metadata.annotations["kubeopera.io/platform-stage"]' in paths
    assert "spec.templates[4].outputs.parameters[0].valueFrom.supplied" in paths


@pytest.mark.parametrize(
    ("addition", "path"),
    [
        ("  onExit: bye\n", "spec.onExit"),
        ("  hooks:\n    exit: {template: bye}\n", "spec.hooks.exit"),
        ("  templateDefaults: {timeout: 1h}\n", "spec.templateDefaults"),
    ],
)
def test_a_template_with_a_release_may_not_bring_its_own_exit_handler_or_defaults(
    addition: str, path: str
) -> None:
    template = YAML.replace("  entrypoint: flow\n", f"  entrypoint: flow\n{addition}")
    template += "  - name: bye\n    container: {image: alpine:3.20}\n"
    with pytest.raises(Refused) as exc:
        rendered(yaml_body(template))
    assert [(v["path"], v["rule"]) for v in exc.value.details["violations"]] == [
        (path, "platform_stage")
    ]
    # Without a release they are the tenant's to use.
    body = yaml_body(template)
    del body["release"]
    assert rendered(body).stages == []


def test_wizard_steps_may_not_take_a_platform_name() -> None:
    spec = pipeline(step("wm-train"), step("gate"))
    with pytest.raises(Invalid) as exc:
        rendered({"name": "x", "definition": {"type": "wizard", "spec": spec}})
    assert errors(exc) == [
        ("steps[0].name", "'wm-train' is reserved: wm- names are the platform's control stages")
    ]


def test_the_stages_of_a_template_are_its_annotated_wm_templates_in_run_order() -> None:
    document = rendered(wizard_body(release=release(approval={"required": True}))).template
    compiled = [S.REGISTER, S.GATE, S.APPROVAL, S.CLEANUP]
    assert R.stages_of(document) == compiled
    shuffled = copy.deepcopy(document)
    shuffled["spec"]["templates"].reverse()
    assert R.stages_of(shuffled) == compiled
    # An annotation on a template not named as its stage is no stage.
    renamed = copy.deepcopy(document)
    for template in renamed["spec"]["templates"]:
        if template["name"] == "wm-gate":
            template["name"] = "gate"
    assert R.stages_of(renamed) == ["register", "approval", "cleanup"]
    assert R.stages_of({"spec": "junk"}) == []
    assert R.stages_of({}) == []


def test_main_names_the_entrypoint_and_no_other_task_may_then_be_called_main() -> None:
    single = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: single}
spec:
  entrypoint: fit
  templates:
  - name: fit
    container: {image: ghcr.io/acme/fit:1}
    outputs:
      artifacts:
      - {name: model, path: /out/model}
      - {name: scorecard, path: /out/eval_scorecard.json}
"""
    one_node = {
        "model_artifact": {"step": "main", "artifact": "model"},
        "scorecard": {"step": "main", "artifact": "scorecard"},
    }
    assert rendered(yaml_body(single, **one_node)).stages == ["register", "gate", "cleanup"]
    # A task of the tenant's named main would be a second node of that name in each run.
    clash = _yaml_with("    - - name: fit\n", "    - - name: main\n")
    with pytest.raises(Invalid) as exc:
        rendered(yaml_body(clash, model_artifact={"step": "main", "artifact": "model"}))
    assert errors(exc) == [
        ("release.model_artifact.step", "2 tasks or steps are named 'main': name exactly one")
    ]
