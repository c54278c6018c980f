"""compiler.pipelines.allowlist under hypothesis: no document of any shape crashes the checker, and
any hostile construct in any benign template is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.pipelines.allowlist import DISPLAY_NAME, RULES
from tests.unit.compiler._allowlist import (
    BENIGN,
    run,
)

# --- hypothesis ------------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
)
_keys = st.sampled_from(
    [
        "spec",
        "templates",
        "container",
        "securityContext",
        "privileged",
        "volumes",
        "hostPath",
        "s3",
        "key",
        "bucket",
        "namespace",
        "name",
        "serviceAccountName",
        "dag",
        "tasks",
        "inline",
        "steps",
        "outputs",
        "artifacts",
        "ports",
        "hostPort",
        "env",
        "valueFrom",
        "secretKeyRef",
        "metadata",
        "labels",
        "apiVersion",
        "kind",
        "containerSet",
        "containers",
        "executor",
        "capabilities",
        "add",
        "memoize",
        "cache",
        "configMap",
        "sysctls",
        "x",
        "claimName",
        "persistentVolumeClaim",
        "automountServiceAccountToken",
        "seLinuxOptions",
        "volumeClaimTemplates",
        "type",
        "runAsUser",
        "hooks",
        "templateRef",
        "clusterScope",
        "workflowMetadata",
        "labelsFrom",
        "artifactGC",
        "archiveLocation",
        "data",
        "source",
        "artifactPaths",
        "lifecycle",
        "httpGet",
        "host",
        "envFrom",
        "secretRef",
        "sidecars",
        "imagePullSecrets",
        "synchronization",
        "templateDefaults",
        "podMetadata",
        "script",
        "resources",
        "requests",
        "limits",
        "cpu",
        "memory",
        "nvidia.com/gpu",
        "claims",
        "annotations",
        "kubeopera.io/runs-as",
        "artifactRepositoryRef",
        "secret",
        "secretName",
        "initContainers",
        "supplied",
        "wm-register",
        "kubeopera.io/platform-stage",
        "workflows.argoproj.io/display-name",
    ]
)
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(_keys, children, max_size=5)
    ),
    max_leaves=40,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_values)
def test_arbitrary_documents_never_crash_the_checker(document: object) -> None:
    for violation in run(document):
        assert violation.rule in RULES
        assert isinstance(violation.path, str)
        assert violation.path


@settings(max_examples=200)
@given(_values, st.integers(min_value=0, max_value=len(BENIGN) - 1))
def test_arbitrary_spec_bodies_never_crash_the_checker(body: object, which: int) -> None:
    document = yaml.safe_load(BENIGN[which].read_text())
    document["spec"]["templates"].append(body)
    document["spec"]["templateDefaults"] = body
    for violation in run(document):
        assert violation.rule in RULES


# One hostile construct per entry: (rule, what it adds to a template).
HOSTILE: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("pod_spec_patch", lambda t: t.update(podSpecPatch='{"hostPID": true}')),
    ("scheduling", lambda t: t.update(nodeSelector={"node-role.kubernetes.io/control-plane": ""})),
    ("scheduling", lambda t: t.update(tolerations=[{"operator": "Exists"}])),
    ("resource_template", lambda t: t.update(resource={"action": "create", "manifest": "{}"})),
    ("http_template", lambda t: t.update(http={"url": "http://10.0.0.1"})),
    ("plugin_template", lambda t: t.update(plugin={"x": {}})),
    ("executor", lambda t: t.update(executor={"serviceAccountName": "argo"})),
    ("service_account", lambda t: t.update(serviceAccountName="default")),
    (
        "host_path",
        lambda t: t.setdefault("volumes", []).append({"name": "h", "hostPath": {"path": "/"}}),
    ),
    (
        "volume_type",
        lambda t: t.setdefault("volumes", []).append(
            {"name": "n", "nfs": {"server": "s", "path": "/"}}
        ),
    ),
    (
        "privileged",
        lambda t: t.setdefault("sidecars", []).append(
            {"name": "s", "image": "a", "securityContext": {"privileged": True}}
        ),
    ),
    (
        "host_port",
        lambda t: t.setdefault("initContainers", []).append(
            {"name": "i", "image": "a", "ports": [{"containerPort": 1, "hostPort": 1}]}
        ),
    ),
    (
        "capabilities",
        lambda t: t.setdefault("sidecars", []).append(
            {"name": "s", "image": "a", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}
        ),
    ),
    ("run_as_root", lambda t: t.update(securityContext={"runAsUser": 0})),
    (
        "artifact_location",
        lambda t: t.update(archiveLocation={"s3": {"bucket": "other", "key": "tenants/acme/x"}}),
    ),
    (
        "artifact_repository",
        lambda t: t.update(
            outputs={
                "artifacts": [{"name": "a", "path": "/a", "azure": {"container": "c", "blob": "b"}}]
            }
        ),
    ),
    (
        "reserved_label",
        lambda t: t.update(metadata={"labels": {"workflows.argoproj.io/workflow": "x"}}),
    ),
    (
        "platform_object",
        lambda t: t.update(
            memoize={"key": "k", "cache": {"configMap": {"name": "kubeopera-config"}}}
        ),
    ),
    (
        "foreign_namespace",
        lambda t: t.update(synchronization={"mutexes": [{"name": "m", "namespace": "default"}]}),
    ),
    ("unknown_field", lambda t: t.update(hostPID=True)),
    (
        "secret_reference",
        lambda t: t.setdefault("sidecars", []).append(
            {"name": "s", "image": "a", "envFrom": [{"secretRef": {"name": "db-admin"}}]}
        ),
    ),
    (
        "secret_reference",
        lambda t: t.setdefault("volumes", []).append(
            {"name": "v", "secret": {"secretName": "argo-server-sso"}}
        ),
    ),
    (
        "resource_limit",
        lambda t: t.setdefault("initContainers", []).append(
            {"name": "i", "image": "a", "resources": {"limits": {"cpu": "5"}}}
        ),
    ),
    (
        "resource_limit",
        lambda t: t.setdefault("sidecars", []).append(
            {"name": "s", "image": "a", "resources": {"requests": {"nvidia.com/gpu": 1}}}
        ),
    ),
    (
        "extended_resource",
        lambda t: t.setdefault("sidecars", []).append(
            {"name": "s", "image": "a", "resources": {"limits": {"amd.com/gpu": 1}}}
        ),
    ),
    (
        "reserved_annotation",
        lambda t: t.update(metadata={"annotations": {"workflows.argoproj.io/outputs": "{}"}}),
    ),
    (
        "security_annotation",
        lambda t: t.update(
            metadata={
                "annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}
            }
        ),
    ),
    (
        "artifact_location",
        lambda t: t.update(
            outputs={"artifacts": [{"name": "a", "s3": {"key": "tenants/acme/training/a"}}]}
        ),
    ),
    ("platform_stage", lambda t: t.update(name="wm-gate")),
    (
        "platform_stage",
        lambda t: t.update(
            outputs={"parameters": [{"name": "verdict", "valueFrom": {"supplied": {}}}]}
        ),
    ),
    (
        "platform_stage",
        lambda t: t.update(metadata={"annotations": {"kubeopera.io/platform-stage": "gate"}}),
    ),
    ("platform_stage", lambda t: t.update(annotations={DISPLAY_NAME: "wm-register"})),
]


def _templates(document: dict[str, Any]) -> list[dict[str, Any]]:
    templates: list[dict[str, Any]] = document["spec"]["templates"]
    return templates


@settings(max_examples=300)
@given(
    st.integers(min_value=0, max_value=len(BENIGN) - 1),
    st.integers(min_value=0, max_value=len(HOSTILE) - 1),
    st.integers(min_value=0, max_value=50),
)
def test_any_hostile_construct_in_any_benign_template_is_refused(
    which: int, hostile: int, index: int
) -> None:
    document = yaml.safe_load(BENIGN[which].read_text())
    templates = _templates(document)
    rule, insert = HOSTILE[hostile]
    insert(templates[index % len(templates)])
    assert rule in {violation.rule for violation in run(document)}
