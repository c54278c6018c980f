"""compiler.pipelines.stamping: identity set by us, the tenant's identity fields removed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler.pipelines.stamping import stamp, template_name

BENIGN = sorted((Path(__file__).parent / "benign_corpus").glob("*.yaml"))
OURS = {
    "kubeopera.io/pipeline-id": "0b5e7c1e-6b0f-4a47-9a51-53f2c1d7e9aa",
    "kubeopera.io/pipeline-version": "7",
    "kubeopera.io/pipeline-kind": "ml",
}


def stamped(document: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "tenant": "acme",
        "namespace": "kubeopera-data-acme",
        "pipeline_id": "0b5e7c1e-6b0f-4a47-9a51-53f2c1d7e9aa",
        "version": 7,
        "kind": "ml",
        "service_account": "kubeopera-workload",
    }
    return stamp(document, **{**arguments, **overrides})


def hostile() -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {
            "name": "mine",
            "generateName": "x-",
            "namespace": "kube-system",
            "uid": "u",
            "resourceVersion": "1",
            "ownerReferences": [{"kind": "Namespace", "name": "kube-system"}],
            "finalizers": ["x"],
            "labels": {
                "team": "a",
                "kubeopera.io/pipeline-id": "someone-else",
                "workflows.argoproj.io/controller-instanceid": "cicd",
            },
            "annotations": {"note": "n", "kubeopera.io/owner": "me"},
        },
        "spec": {
            "serviceAccountName": "default",
            "automountServiceAccountToken": True,
            "executor": {"serviceAccountName": "argo"},
            "workflowMetadata": {
                "labels": {"team": "a", "workflows.argoproj.io/controller-instanceid": "cicd"},
                "annotations": {"a": "b"},
            },
            "templates": [{"name": "main", "container": {"image": "alpine"}}],
        },
    }


def test_identity_is_ours_and_the_tenants_is_gone() -> None:
    document = hostile()
    before = copy.deepcopy(document)
    result = stamped(document)
    assert document == before  # the input is not modified
    assert result["metadata"] == {
        "name": "p-0b5e7c1e-6b0f-4a47-9a51-53f2c1d7e9aa-v7",
        "namespace": "kubeopera-data-acme",
        "labels": {"team": "a", **OURS},
        "annotations": {"note": "n"},
    }
    spec = result["spec"]
    assert spec["serviceAccountName"] == "kubeopera-workload"
    assert spec["automountServiceAccountToken"] is False
    assert spec["executor"] == {"serviceAccountName": "kubeopera-executor"}
    assert spec["workflowMetadata"] == {"labels": {"team": "a", **OURS}, "annotations": {"a": "b"}}
    assert spec["templates"] == before["spec"]["templates"]


@pytest.mark.parametrize(
    "key",
    [
        "events.argoproj.io/sensor",
        "argoproj.io/x",
        "argocd.argoproj.io/instance",
        "serving.kubeopera.io/model",
        "KubeOpera.IO/pipeline-id",
    ],
)
def test_keys_under_a_reserved_domain_or_its_subdomains_are_removed(key: str) -> None:
    document = hostile()
    document["metadata"]["labels"][key] = "forged"
    document["metadata"]["annotations"][key] = "forged"
    document["spec"]["workflowMetadata"]["labels"][key] = "forged"
    result = stamped(document)
    assert key not in result["metadata"]["labels"]
    assert key not in result["metadata"]["annotations"]
    assert key not in result["spec"]["workflowMetadata"]["labels"]
    # Only the reserved domains themselves: look-alikes are the tenant's.
    document["metadata"]["labels"] = {"notkubeopera.io/x": "a", "argoproj.io.example/x": "b"}
    assert stamped(document)["metadata"]["labels"] == {
        "notkubeopera.io/x": "a",
        "argoproj.io.example/x": "b",
        **OURS,
    }


_IDENTITY_SPEC_FIELDS = {
    "serviceAccountName",
    "automountServiceAccountToken",
    "executor",
    "workflowMetadata",
}


@pytest.mark.parametrize("path", BENIGN, ids=lambda path: path.stem)
def test_stamping_a_benign_template_changes_only_identity_fields(path: Path) -> None:
    document = yaml.safe_load(path.read_text())
    result = stamped(document)
    assert {key: value for key, value in result.items() if key != "metadata"}.keys() == {
        key for key in document if key != "metadata"
    }
    assert document["apiVersion"] == result["apiVersion"]
    assert document["kind"] == result["kind"]
    for key, value in document["spec"].items():
        if key not in _IDENTITY_SPEC_FIELDS and key != "templates":
            assert result["spec"][key] == value, key
    assert set(result["spec"]) - set(document["spec"]) <= _IDENTITY_SPEC_FIELDS
    for before, after in zip(
        document["spec"]["templates"], result["spec"]["templates"], strict=True
    ):
        changed = {key for key in after if before.get(key) != after.get(key)}
        assert changed <= {"serviceAccountName", "automountServiceAccountToken"}
    # Tenant metadata outside the reserved prefixes survives.
    for key, value in (document["metadata"].get("labels") or {}).items():
        assert result["metadata"]["labels"][key] == value


def test_runs_as_annotation_sets_the_platform_account() -> None:
    document = yaml.safe_load(
        (Path(__file__).parent / "benign_corpus" / "06_pytorch_training.yaml").read_text()
    )
    template = stamped(document)["spec"]["templates"][0]
    assert template["serviceAccountName"] == "kubeopera-training"
    assert template["automountServiceAccountToken"] is True


def test_stamping_is_deterministic_and_idempotent() -> None:
    once = stamped(hostile())
    assert stamped(hostile()) == once
    assert stamped(once) == once


@pytest.mark.parametrize(
    ("pipeline_id", "version", "name"),
    [
        ("nightly", 1, "p-nightly-v1"),
        ("0b5e7c1e-6b0f-4a47-9a51-53f2c1d7e9aa", 12, "p-0b5e7c1e-6b0f-4a47-9a51-53f2c1d7e9aa-v12"),
        ("Nightly ETL", 2, "p-nightly-etl-422a4ac9-v2"),
    ],
)
def test_template_names(pipeline_id: str, version: int, name: str) -> None:
    assert template_name(pipeline_id, version) == name


def test_template_names_stay_short_and_distinct() -> None:
    long_a, long_b = "a" * 200 + "1", "a" * 200 + "2"
    assert template_name(long_a, 99999) != template_name(long_b, 99999)
    assert len(template_name(long_a, 99999)) <= 63
    assert template_name("x_y", 1) != template_name("x-y", 1)
    assert template_name("", 1).startswith("p-")
    with pytest.raises(ValueError, match="positive"):
        template_name("x", 0)


def test_a_namespace_outside_the_tenant_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="data namespace"):
        stamped(hostile(), namespace="kube-system")
    with pytest.raises(ValueError, match="kind"):
        stamped(hostile(), kind="batch")


def test_a_document_without_a_spec_is_stamped_and_left_for_the_allowlist() -> None:
    result = stamped({"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate"})
    assert result["metadata"]["namespace"] == "kubeopera-data-acme"
    assert "spec" not in result
