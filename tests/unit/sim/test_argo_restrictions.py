"""Instance IDs and Strict template referencing, as Argo words and decides them (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from sim.argo.restrictions import (
    REFERENCE_MODE_MESSAGE,
    instance_selector,
    label_instance,
    manages,
    not_managed_message,
    override_violations,
    reference_mode_error,
    sanitize_user_spec,
)

LABEL = "workflows.argoproj.io/controller-instanceid"
REF = {"workflowTemplateRef": {"name": "etl"}}


def test_the_selector_a_controller_lists_and_watches_with() -> None:
    assert instance_selector("kubeopera-data") == f"{LABEL}=kubeopera-data"
    assert instance_selector(None) == f"!{LABEL}"
    assert instance_selector("") == f"!{LABEL}"


@pytest.mark.parametrize(
    ("labels", "instance_id", "expected"),
    [
        (None, None, True),
        ({}, None, True),
        ({"team": "a"}, None, True),
        ({LABEL: "kubeopera-data"}, None, False),
        ({LABEL: ""}, None, False),  # the label exists: `!label` does not match
        ({LABEL: "kubeopera-data"}, "kubeopera-data", True),
        ({LABEL: "cicd"}, "kubeopera-data", False),
        ({}, "kubeopera-data", False),
        (None, "kubeopera-data", False),
    ],
)
def test_a_controller_with_an_id_takes_its_label_one_without_takes_unlabelled_only(
    labels: dict[str, str] | None, instance_id: str | None, expected: bool
) -> None:
    assert manages(labels, instance_id) is expected


def test_a_server_labels_what_it_creates_with_its_id_or_removes_any() -> None:
    workflow: dict[str, Any] = {"metadata": {"labels": {LABEL: "cicd", "team": "a"}}}
    label_instance(workflow, "kubeopera-data")
    assert workflow["metadata"]["labels"] == {LABEL: "kubeopera-data", "team": "a"}
    label_instance(workflow, None)
    assert workflow["metadata"]["labels"] == {"team": "a"}
    bare: dict[str, Any] = {}
    label_instance(bare, "kubeopera-data")
    assert bare == {"metadata": {"labels": {LABEL: "kubeopera-data"}}}
    assert not_managed_message("wf-1") == "'wf-1' is not managed by the current Argo Server"


def test_strict_refuses_a_workflow_without_a_template_reference() -> None:
    inline = {"entrypoint": "main", "templates": [{"name": "main", "container": {}}]}
    assert reference_mode_error(inline) == REFERENCE_MODE_MESSAGE
    assert reference_mode_error({}) == REFERENCE_MODE_MESSAGE
    assert reference_mode_error({"workflowTemplateRef": None}) == REFERENCE_MODE_MESSAGE
    assert REFERENCE_MODE_MESSAGE == (
        "workflows must use workflowTemplateRef to be executed when the controller is in "
        "reference mode"
    )


def test_strict_lets_through_the_overrides_argo_allows() -> None:
    allowed = {
        **REF,
        "arguments": {"parameters": [{"name": "day", "value": "2026-01-01"}]},
        "entrypoint": "main",
        "shutdown": "Stop",
        "suspend": True,
        "activeDeadlineSeconds": 60,
        "priority": 3,
        "ttlStrategy": {"secondsAfterCompletion": 10},
        "podGC": {"strategy": "OnPodSuccess"},
        "volumeClaimGC": {"strategy": "OnWorkflowCompletion"},
        "archiveLogs": True,
        "workflowMetadata": {"labels": {"team": "a"}},
        "metrics": {"prometheus": []},
        "artifactGC": {"strategy": "OnWorkflowDeletion", "forceFinalizerRemoval": True},
        "notAField": {"ignored": "by Argo's decoding"},
    }
    assert reference_mode_error(allowed) is None
    assert sanitize_user_spec(allowed) == {k: v for k, v in allowed.items() if k != "notAField"}


def test_strict_names_every_other_field_set_by_go_name_sorted() -> None:
    spec: dict[str, Any] = {
        **REF,
        "serviceAccountName": "admin",
        "podSpecPatch": "{}",
        "hostNetwork": False,  # a *bool: false is set
        "templates": [],  # a slice: empty is set
        "nodeSelector": {},
        "onExit": "",  # a string: "" is its zero value
        "volumes": None,  # null: not set
        "artifactGC": {"serviceAccountName": "gc", "podMetadata": {}, "strategy": "x"},
    }
    violations = [
        "ArtifactGC.PodMetadata",
        "ArtifactGC.ServiceAccountName",
        "HostNetwork",
        "NodeSelector",
        "PodSpecPatch",
        "ServiceAccountName",
        "Templates",
    ]
    assert override_violations(spec) == violations
    assert reference_mode_error(spec) == (
        f"fields [{' '.join(violations)}] are not permitted when using workflowTemplateRef "
        "with templateReferencing restriction"
    )


def test_sanitizing_keeps_the_overridable_fields_and_strips_artifact_gc_pod_fields() -> None:
    spec = {
        **REF,
        "serviceAccountName": "admin",
        "artifactGC": {"strategy": "OnWorkflowDeletion", "podSpecPatch": "{}"},
    }
    clean = sanitize_user_spec(spec)
    assert clean == {**REF, "artifactGC": {"strategy": "OnWorkflowDeletion"}}
    assert spec["artifactGC"] == {"strategy": "OnWorkflowDeletion", "podSpecPatch": "{}"}
