"""compiler.pipelines.allowlist: the escape corpus is refused rule by rule, the benign corpus
accepted unchanged, and single constructs are judged as the table says."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler.pipelines.allowlist import RULES, Violation, check, raise_if_refused
from compiler.pipelines.stamping import stamp
from shared.errors import Refused
from tests.unit.compiler._allowlist import (
    BENIGN,
    CONTEXT,
    ESCAPES,
    EXPECT,
    HERE,
    C,
    container,
    doc,
    found,
    kind_of,
    run,
)


def test_the_corpora_are_large_enough() -> None:
    assert len(ESCAPES) >= 40
    assert len(BENIGN) >= 8


@pytest.mark.parametrize("path", ESCAPES, ids=lambda path: path.stem)
def test_escape_is_refused_for_exactly_the_expected_rules(path: Path) -> None:
    text = path.read_text()
    expected = {(match["rule"], match["path"]) for match in EXPECT.finditer(text)}
    assert expected, f"{path.name} names no expected rule in its header"
    assert all(rule in RULES for rule, _ in expected)
    assert found(yaml.safe_load(text), kind=kind_of(text)) == expected


@pytest.mark.parametrize("path", BENIGN, ids=lambda path: path.stem)
def test_benign_template_is_accepted_unchanged(path: Path) -> None:
    text = path.read_text()
    document = yaml.safe_load(text)
    before = copy.deepcopy(document)
    assert run(document, kind=kind_of(text)) == []
    assert document == before


@pytest.mark.parametrize("path", BENIGN, ids=lambda path: path.stem)
def test_stamped_benign_template_is_accepted(path: Path) -> None:
    text = path.read_text()
    kind = "ml" if kind_of(text) == "ml" else "data"
    stamped = stamp(
        yaml.safe_load(text),
        tenant="acme",
        namespace="kubeopera-data-acme",
        pipeline_id="p1",
        version=1,
        kind=kind,
    )
    assert run(stamped, kind=kind) == []


@pytest.mark.parametrize(
    ("document", "rule", "path"),
    [
        (
            container(securityContext={"privileged": "yes"}),
            "privileged",
            f"{C}.securityContext.privileged",
        ),
        (
            container(securityContext={"runAsUser": "0"}),
            "run_as_root",
            f"{C}.securityContext.runAsUser",
        ),
        (
            container(ports=[{"containerPort": 1, "hostIP": "0.0.0.0"}]),
            "host_port",
            f"{C}.ports[0].hostIP",
        ),
        (
            container(envFrom=[{"secretRef": {"name": "kubeopera-storage"}}]),
            "platform_secret",
            f"{C}.envFrom[0].secretRef.name",
        ),
        (
            container(
                volumeMounts=[{"name": "v", "mountPath": "/v", "mountPropagation": "Bidirectional"}]
            ),
            "security_context",
            f"{C}.volumeMounts[0].mountPropagation",
        ),
        (
            container(lifecycle={"preStop": {"httpGet": {"host": "10.0.0.1", "port": 80}}}),
            "probe_host",
            f"{C}.lifecycle.preStop.httpGet.host",
        ),
        (
            container(volumeDevices=[{"name": "d", "devicePath": "/dev/xvda"}]),
            "volume_type",
            f"{C}.volumeDevices",
        ),
        (
            container(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
            "security_context",
            f"{C}.securityContext.appArmorProfile.type",
        ),
        (doc(serviceAccountName="kubeopera-spark"), "service_account", "spec.serviceAccountName"),
        (doc(schedulerName="my-scheduler"), "scheduling", "spec.schedulerName"),
        (
            doc(podPriorityClassName="system-cluster-critical"),
            "scheduling",
            "spec.podPriorityClassName",
        ),
        (
            doc(imagePullSecrets=[{"name": "kubeopera-registry"}]),
            "platform_secret",
            "spec.imagePullSecrets[0].name",
        ),
        (
            doc(volumes=[{"name": "c", "csi": {"driver": "x"}}]),
            "volume_type",
            "spec.volumes[0].csi",
        ),
        (
            doc(
                volumeClaimTemplates=[
                    {
                        "metadata": {"name": "w"},
                        "spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "other"}},
                    }
                ]
            ),
            "pvc_claim",
            "spec.volumeClaimTemplates[0].spec.dataSource",
        ),
        (
            doc(arguments={"artifacts": [{"name": "a", "http": {"url": "http://10.0.0.1/"}}]}),
            "artifact_repository",
            "spec.arguments.artifacts[0].http",
        ),
        (
            doc(arguments={"artifacts": [{"name": "a", "s3": {"key": "tenants/acme/../other/x"}}]}),
            "artifact_location",
            "spec.arguments.artifacts[0].s3.key",
        ),
        (
            doc(arguments={"artifacts": [{"name": "a", "s3": {"bucket": "kubeopera-artifacts"}}]}),
            "artifact_location",
            "spec.arguments.artifacts[0].s3",
        ),
        (
            doc(arguments={"artifacts": [{"name": "a", "s3": {"key": "tenants/acmeevil/x"}}]}),
            "artifact_location",
            "spec.arguments.artifacts[0].s3.key",
        ),
        (
            doc(workflowMetadata={"labels": {"kubeopera.io/pipeline-id": "someone-else"}}),
            "reserved_label",
            'spec.workflowMetadata.labels["kubeopera.io/pipeline-id"]',
        ),
        (
            doc(
                workflowMetadata={
                    "labelsFrom": {"kubeopera.io/pipeline-kind": {"expression": "'ml'"}}
                }
            ),
            "reserved_label",
            'spec.workflowMetadata.labelsFrom["kubeopera.io/pipeline-kind"]',
        ),
        (doc(artifactGC={"podSpecPatch": "x"}), "pod_spec_patch", "spec.artifactGC.podSpecPatch"),
        (
            doc(
                templates=[
                    {
                        "name": "m",
                        "serviceAccountName": "kubeopera-training",
                        "automountServiceAccountToken": "true",
                    }
                ]
            ),
            "service_account",
            "spec.templates[0].automountServiceAccountToken",
        ),
        (
            doc(templates=[{"name": "m", "automountServiceAccountToken": True}]),
            "service_account",
            "spec.templates[0].automountServiceAccountToken",
        ),
        (
            doc(
                templates=[
                    {
                        "name": "m",
                        "dag": {
                            "tasks": [
                                {
                                    "name": "t",
                                    "hooks": {
                                        "h": {"templateRef": {"name": "x", "clusterScope": 1}}
                                    },
                                }
                            ]
                        },
                    }
                ]
            ),
            "cluster_template_ref",
            "spec.templates[0].dag.tasks[0].hooks.h.templateRef.clusterScope",
        ),
        (
            doc(volumeClaimTemplates=[{"metadata": {"name": "w", "namespace": "default"}}]),
            "foreign_namespace",
            "spec.volumeClaimTemplates[0].metadata.namespace",
        ),
        (
            {"apiVersion": "argoproj.io/v1", "kind": "WorkflowTemplate", "spec": {}},
            "document_kind",
            "apiVersion",
        ),
        ({"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate"}, "malformed", "spec"),
        (
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "WorkflowTemplate",
                "status": {},
                "spec": {},
            },
            "unknown_field",
            "status",
        ),
    ],
)
def test_construct_is_refused(document: dict[str, Any], rule: str, path: str) -> None:
    assert (rule, path) in found(document)


@pytest.mark.parametrize(
    "document",
    [
        container(securityContext={"privileged": False, "runAsUser": 1000, "runAsNonRoot": True}),
        container(ports=[{"containerPort": 8080, "hostPort": 0}]),
        container(volumeMounts=[{"name": "v", "mountPath": "/v", "mountPropagation": "None"}]),
        doc(hostNetwork=False, automountServiceAccountToken=False),
        doc(executor={"serviceAccountName": "kubeopera-executor"}),
        doc(serviceAccountName="kubeopera-workload"),
        doc(synchronization={"mutexes": [{"name": "m", "namespace": "kubeopera-data-acme"}]}),
        doc(workflowMetadata={"labels": {"team": "x"}, "annotations": {"owner": "y"}}),
        doc(securityContext={"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]}),
        # "namespace" as a label key or loop item is data, not a field.
        doc(workflowMetadata={"labelsFrom": {"namespace": {"expression": "workflow.namespace"}}}),
        doc(podMetadata={"labels": {"namespace": "x"}}),
        doc(
            templates=[
                {"name": "m", "steps": [[{"name": "s", "withItems": [{"namespace": "other"}]}]]}
            ]
        ),
    ],
)
def test_harmless_settings_are_accepted(document: dict[str, Any]) -> None:
    assert run(document) == []


def test_violations_carry_a_message_and_serialise_for_the_api() -> None:
    violations = run(container(securityContext={"privileged": True}))
    assert violations == [
        Violation(f"{C}.securityContext.privileged", "privileged", RULES["privileged"])
    ]
    with pytest.raises(Refused) as refused:
        raise_if_refused(violations)
    assert refused.value.status == 422
    assert refused.value.details["violations"] == [violations[0].as_json()]
    raise_if_refused([])  # nothing to refuse: no error


def test_every_rule_is_documented_in_security_md() -> None:
    text = (HERE.parents[2] / "docs" / "security.md").read_text()
    missing = [rule for rule in RULES if f"`{rule}`" not in text]
    assert missing == []


def test_checking_against_a_namespace_of_another_tenant_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="data namespace"):
        check(doc(), **{**CONTEXT, "tenant": "other"})


def test_inline_templates_nested_absurdly_deep_are_refused_not_crashed() -> None:
    inner: dict[str, Any] = {"container": {"image": "alpine"}}
    for _ in range(2000):
        inner = {"dag": {"tasks": [{"name": "t", "inline": inner}]}}
    violations = run(doc(templates=[{"name": "m", **inner}]))
    assert [violation.rule for violation in violations] == ["malformed"]
