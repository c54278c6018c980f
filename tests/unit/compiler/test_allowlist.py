"""compiler.allowlist: the escape corpus is refused rule by rule, the benign corpus accepted
unchanged, and no document of any shape crashes the checker."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.allowlist import RULES, Violation, check, raise_if_refused
from compiler.compile import StepLimits
from compiler.stamping import stamp
from shared import quantity
from shared.errors import Refused

HERE = Path(__file__).parent
ESCAPES = sorted((HERE / "escape_corpus").glob("*.yaml"))
BENIGN = sorted((HERE / "benign_corpus").glob("*.yaml"))
LIMITS = StepLimits(max_cpu="4", max_memory="8Gi", max_gpu=2)
# The benign corpus reads one data secret of the tenant's, warehouse-credentials.
DATA_SECRETS = frozenset({"warehouse-credentials"})
CONTEXT: dict[str, Any] = {
    "namespace": "kubeopera-data-acme",
    "tenant": "acme",
    "artifact_bucket": "kubeopera-artifacts",
    "kind": "data",
    "limits": LIMITS,
    "data_secrets": DATA_SECRETS,
}
_EXPECT = re.compile(r"^# expect: (?P<rule>[a-z_]+) @ (?P<path>.+)$", re.MULTILINE)
# A corpus document is judged as a data pipeline unless its header says "# kind: ml".
_KIND = re.compile(r"^# kind: (?P<kind>data|ml)$", re.MULTILINE)


def run(document: object, **context: Any) -> list[Violation]:
    return check(document, **{**CONTEXT, **context})


def found(document: object, **context: Any) -> set[tuple[str, str]]:
    return {(violation.rule, violation.path) for violation in run(document, **context)}


def kind_of(text: str) -> str:
    match = _KIND.search(text)
    return match["kind"] if match else "data"


def test_the_corpora_are_large_enough() -> None:
    assert len(ESCAPES) >= 40
    assert len(BENIGN) >= 8


@pytest.mark.parametrize("path", ESCAPES, ids=lambda path: path.stem)
def test_escape_is_refused_for_exactly_the_expected_rules(path: Path) -> None:
    text = path.read_text()
    expected = {(match["rule"], match["path"]) for match in _EXPECT.finditer(text)}
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


# --- table-driven checks of single constructs ------------------------------------------------


def _doc(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "entrypoint": "main",
        "templates": [{"name": "main", "container": {"image": "alpine", "command": ["true"]}}],
    }
    body.update(spec)
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate", "spec": body}


def _container(**fields: Any) -> dict[str, Any]:
    return _doc(templates=[{"name": "main", "container": {"image": "alpine", **fields}}])


C = "spec.templates[0].container"


@pytest.mark.parametrize(
    ("document", "rule", "path"),
    [
        (
            _container(securityContext={"privileged": "yes"}),
            "privileged",
            f"{C}.securityContext.privileged",
        ),
        (
            _container(securityContext={"runAsUser": "0"}),
            "run_as_root",
            f"{C}.securityContext.runAsUser",
        ),
        (
            _container(ports=[{"containerPort": 1, "hostIP": "0.0.0.0"}]),
            "host_port",
            f"{C}.ports[0].hostIP",
        ),
        (
            _container(envFrom=[{"secretRef": {"name": "kubeopera-storage"}}]),
            "platform_secret",
            f"{C}.envFrom[0].secretRef.name",
        ),
        (
            _container(
                volumeMounts=[{"name": "v", "mountPath": "/v", "mountPropagation": "Bidirectional"}]
            ),
            "security_context",
            f"{C}.volumeMounts[0].mountPropagation",
        ),
        (
            _container(lifecycle={"preStop": {"httpGet": {"host": "10.0.0.1", "port": 80}}}),
            "probe_host",
            f"{C}.lifecycle.preStop.httpGet.host",
        ),
        (
            _container(volumeDevices=[{"name": "d", "devicePath": "/dev/xvda"}]),
            "volume_type",
            f"{C}.volumeDevices",
        ),
        (
            _container(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
            "security_context",
            f"{C}.securityContext.appArmorProfile.type",
        ),
        (_doc(serviceAccountName="kubeopera-spark"), "service_account", "spec.serviceAccountName"),
        (_doc(schedulerName="my-scheduler"), "scheduling", "spec.schedulerName"),
        (
            _doc(podPriorityClassName="system-cluster-critical"),
            "scheduling",
            "spec.podPriorityClassName",
        ),
        (
            _doc(imagePullSecrets=[{"name": "kubeopera-registry"}]),
            "platform_secret",
            "spec.imagePullSecrets[0].name",
        ),
        (
            _doc(volumes=[{"name": "c", "csi": {"driver": "x"}}]),
            "volume_type",
            "spec.volumes[0].csi",
        ),
        (
            _doc(
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
            _doc(arguments={"artifacts": [{"name": "a", "http": {"url": "http://10.0.0.1/"}}]}),
            "artifact_repository",
            "spec.arguments.artifacts[0].http",
        ),
        (
            _doc(
                arguments={"artifacts": [{"name": "a", "s3": {"key": "tenants/acme/../other/x"}}]}
            ),
            "artifact_location",
            "spec.arguments.artifacts[0].s3.key",
        ),
        (
            _doc(arguments={"artifacts": [{"name": "a", "s3": {"bucket": "kubeopera-artifacts"}}]}),
            "artifact_location",
            "spec.arguments.artifacts[0].s3",
        ),
        (
            _doc(arguments={"artifacts": [{"name": "a", "s3": {"key": "tenants/acmeevil/x"}}]}),
            "artifact_location",
            "spec.arguments.artifacts[0].s3.key",
        ),
        (
            _doc(workflowMetadata={"labels": {"kubeopera.io/pipeline-id": "someone-else"}}),
            "reserved_label",
            'spec.workflowMetadata.labels["kubeopera.io/pipeline-id"]',
        ),
        (
            _doc(
                workflowMetadata={
                    "labelsFrom": {"kubeopera.io/pipeline-kind": {"expression": "'ml'"}}
                }
            ),
            "reserved_label",
            'spec.workflowMetadata.labelsFrom["kubeopera.io/pipeline-kind"]',
        ),
        (_doc(artifactGC={"podSpecPatch": "x"}), "pod_spec_patch", "spec.artifactGC.podSpecPatch"),
        (
            _doc(
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
            _doc(templates=[{"name": "m", "automountServiceAccountToken": True}]),
            "service_account",
            "spec.templates[0].automountServiceAccountToken",
        ),
        (
            _doc(
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
            _doc(volumeClaimTemplates=[{"metadata": {"name": "w", "namespace": "default"}}]),
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
        _container(securityContext={"privileged": False, "runAsUser": 1000, "runAsNonRoot": True}),
        _container(ports=[{"containerPort": 8080, "hostPort": 0}]),
        _container(volumeMounts=[{"name": "v", "mountPath": "/v", "mountPropagation": "None"}]),
        _doc(hostNetwork=False, automountServiceAccountToken=False),
        _doc(executor={"serviceAccountName": "kubeopera-executor"}),
        _doc(serviceAccountName="kubeopera-workload"),
        _doc(synchronization={"mutexes": [{"name": "m", "namespace": "kubeopera-data-acme"}]}),
        _doc(workflowMetadata={"labels": {"team": "x"}, "annotations": {"owner": "y"}}),
        _doc(securityContext={"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]}),
        # "namespace" as a label key or loop item is data, not a field.
        _doc(workflowMetadata={"labelsFrom": {"namespace": {"expression": "workflow.namespace"}}}),
        _doc(podMetadata={"labels": {"namespace": "x"}}),
        _doc(
            templates=[
                {"name": "m", "steps": [[{"name": "s", "withItems": [{"namespace": "other"}]}]]}
            ]
        ),
    ],
)
def test_harmless_settings_are_accepted(document: dict[str, Any]) -> None:
    assert run(document) == []


def test_violations_carry_a_message_and_serialise_for_the_api() -> None:
    violations = run(_container(securityContext={"privileged": True}))
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
        check(_doc(), **{**CONTEXT, "tenant": "other"})


def test_inline_templates_nested_absurdly_deep_are_refused_not_crashed() -> None:
    inner: dict[str, Any] = {"container": {"image": "alpine"}}
    for _ in range(2000):
        inner = {"dag": {"tasks": [{"name": "t", "inline": inner}]}}
    violations = run(_doc(templates=[{"name": "m", **inner}]))
    assert [violation.rule for violation in violations] == ["malformed"]


# --- secret references: an allowlist of the tenant's data secrets -----------------------------

SECRET_REFERENCES = [
    (
        _container(env=[{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
        f"{C}.env[0].valueFrom.secretKeyRef.name",
    ),
    (_container(envFrom=[{"secretRef": {"name": "s"}}]), f"{C}.envFrom[0].secretRef.name"),
    (
        _doc(volumes=[{"name": "v", "secret": {"secretName": "s"}}]),
        "spec.volumes[0].secret.secretName",
    ),
    (_doc(imagePullSecrets=[{"name": "s"}]), "spec.imagePullSecrets[0].name"),
    (
        _doc(templateDefaults={"volumes": [{"name": "v", "secret": {"secretName": "s"}}]}),
        "spec.templateDefaults.volumes[0].secret.secretName",
    ),
]


@pytest.mark.parametrize(("document", "path"), SECRET_REFERENCES)
def test_a_secret_is_referenced_only_when_it_is_one_of_the_tenants_data_secrets(
    document: dict[str, Any], path: str
) -> None:
    assert run(document, data_secrets=frozenset({"s"})) == []
    assert found(document, data_secrets=frozenset({"other"})) == {("secret_reference", path)}
    # Today no tenant has data secrets: every reference is refused, and the message says why.
    violations = run(document, data_secrets=frozenset())
    assert [(v.rule, v.path) for v in violations] == [("secret_reference", path)]
    assert "has none yet" in violations[0].message


def _renamed(value: Any, name: str) -> Any:
    """``value`` with the Secret named ``s`` (in SECRET_REFERENCES) renamed ``name``."""
    if isinstance(value, dict):
        return {
            key: name if key in ("name", "secretName") and item == "s" else _renamed(item, name)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_renamed(item, name) for item in value]
    return value


_secret_names = st.from_regex(r"(kubeopera-)?[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True)


@settings(max_examples=200)
@given(_secret_names, st.frozensets(_secret_names, max_size=4), st.integers(0, 4))
def test_a_reference_is_accepted_exactly_when_it_names_a_data_secret_of_the_tenants(
    name: str, data_secrets: frozenset[str], where: int
) -> None:
    document, path = SECRET_REFERENCES[where]
    violations = found(_renamed(document, name), data_secrets=data_secrets)
    if name.startswith("kubeopera-"):
        assert violations == {("platform_secret", path)}
    elif name in data_secrets:
        assert violations == set()
    else:
        assert violations == {("secret_reference", path)}


def test_a_platform_secret_stays_refused_even_if_named_as_a_data_secret() -> None:
    document = _container(envFrom=[{"secretRef": {"name": "kubeopera-artifact-credentials"}}])
    context = {"data_secrets": frozenset({"kubeopera-artifact-credentials"})}
    assert found(document, **context) == {("platform_secret", f"{C}.envFrom[0].secretRef.name")}


def test_the_benign_corpus_reads_secrets_only_as_data_secrets() -> None:
    """Without the data secret, exactly the benign documents that read it are refused."""
    for path in BENIGN:
        text = path.read_text()
        rules = {
            v.rule for v in run(yaml.safe_load(text), kind=kind_of(text), data_secrets=frozenset())
        }
        assert rules == ({"secret_reference"} if "warehouse-credentials" in text else set()), path


# --- resources: within the largest step, named by its setting ----------------------------------


@pytest.mark.parametrize(
    ("resources", "kind", "path", "message"),
    [
        ({"limits": {"cpu": "4001m"}}, "data", "limits.cpu", "4001m is above DATA_MAX_CPU (4)"),
        ({"requests": {"cpu": 5}}, "ml", "requests.cpu", "5 is above DATA_MAX_CPU (4)"),
        (
            {"limits": {"memory": "8589934593"}},
            "data",
            "limits.memory",
            "8589934593 is above DATA_MAX_MEMORY (8Gi)",
        ),
        (
            {"limits": {"nvidia.com/gpu": 3}},
            "ml",
            'limits["nvidia.com/gpu"]',
            "3 is above ML_MAX_GPU (2)",
        ),
        (
            {"limits": {"nvidia.com/gpu": 1}},
            "data",
            'limits["nvidia.com/gpu"]',
            "1 is above the 0 GPUs of a data pipeline",
        ),
        (
            {"limits": {"nvidia.com/gpu": "{{inputs.parameters.n}}"}},
            "data",
            'limits["nvidia.com/gpu"]',
            "none may be asked for: the 0 GPUs of a data pipeline",
        ),
    ],
)
def test_resources_above_the_largest_step_are_refused_naming_the_limit(
    resources: dict[str, Any], kind: str, path: str, message: str
) -> None:
    violations = run(_container(resources=resources), kind=kind)
    assert [(v.rule, v.path) for v in violations] == [("resource_limit", f"{C}.resources.{path}")]
    assert violations[0].message.startswith(message)


def test_ml_max_gpu_of_zero_allows_no_gpu_on_ml_pipelines_either() -> None:
    document = _container(resources={"limits": {"nvidia.com/gpu": 1}})
    limits = StepLimits(max_cpu="4", max_memory="8Gi", max_gpu=0)
    violations = run(document, kind="ml", limits=limits)
    assert [v.message for v in violations] == ["1 is above ML_MAX_GPU (0)"]


_cpu_amounts = st.one_of(
    st.integers(min_value=0, max_value=10_000).map(lambda millis: f"{millis}m"),
    st.integers(min_value=0, max_value=10).map(str),
    st.decimals(min_value=0, max_value=10, places=4, allow_nan=False).map(str),
    st.integers(min_value=0, max_value=10).map(lambda whole: f"{whole}e0"),
)


@settings(max_examples=200)
@given(_cpu_amounts, st.sampled_from(["requests", "limits"]))
def test_a_cpu_amount_is_accepted_exactly_when_it_is_within_data_max_cpu(
    amount: str, side: str
) -> None:
    violations = found(_container(resources={side: {"cpu": amount}}))
    within = quantity.parse(amount) <= 4
    assert violations == (set() if within else {("resource_limit", f"{C}.resources.{side}.cpu")})


# --- labels and annotations under the reserved domains ----------------------------------------

_names = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)


@settings(max_examples=200)
@given(
    st.lists(_names, max_size=3),
    st.sampled_from(["kubeopera.io", "argoproj.io"]),
    _names,
    st.sampled_from(["podMetadata", "template", "workflowMetadata"]),
)
def test_any_key_under_a_reserved_domain_or_subdomain_is_refused(
    subdomains: list[str], domain: str, name: str, where: str
) -> None:
    key = ".".join([*subdomains, domain]) + f"/{name}"
    metadata = {"labels": {key: "x"}, "annotations": {key: "x"}}
    if where == "podMetadata":
        document, path = _doc(podMetadata=metadata), "spec.podMetadata"
    elif where == "template":
        document = _doc(
            templates=[{"name": "m", "metadata": metadata, "container": {"image": "a"}}]
        )
        path = "spec.templates[0].metadata"
    else:
        document, path = _doc(workflowMetadata=metadata), "spec.workflowMetadata"
    assert found(document) == {
        ("reserved_label", f'{path}.labels["{key}"]'),
        ("reserved_annotation", f'{path}.annotations["{key}"]'),
    }


@settings(max_examples=200)
@given(_names, _names, st.sampled_from(["kubeopera.io", "argoproj.io"]))
def test_keys_that_only_resemble_a_reserved_domain_are_accepted(
    prefix: str, name: str, domain: str
) -> None:
    # "<x>kubeopera.io" without the dot is another domain; so is "kubeopera.io.<x>".
    keys = [f"{prefix}{domain}/{name}", f"{domain}.{prefix}/{name}", f"{domain}-{name}"]
    metadata = {"labels": dict.fromkeys(keys, "x"), "annotations": dict.fromkeys(keys, "x")}
    assert run(_doc(podMetadata=metadata, workflowMetadata=metadata)) == []


def test_the_stamped_workflow_labels_are_the_only_reserved_ones_accepted() -> None:
    document = stamp(
        _doc(workflowMetadata={"labels": {"kubeopera.io/pipeline-id": "forged", "team": "a"}}),
        tenant="acme",
        namespace="kubeopera-data-acme",
        pipeline_id="p1",
        version=1,
        kind="data",
    )
    assert document["spec"]["workflowMetadata"]["labels"]["kubeopera.io/pipeline-id"] == "p1"
    assert run(document) == []
    # A reserved label equal on both sides, but not one stamping sets, is still the tenant's.
    document["metadata"]["labels"]["kubeopera.io/tenant"] = "other"
    document["spec"]["workflowMetadata"]["labels"]["kubeopera.io/tenant"] = "other"
    assert found(document) == {
        ("reserved_label", 'spec.workflowMetadata.labels["kubeopera.io/tenant"]')
    }


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
