"""The chart runs: for its default values and for combinations that switch on or change what
values.yaml offers, every rendered object is valid for the oldest and the newest Kubernetes it
supports (strict: no unknown field; quantities parsed; custom resources by their CRDs), no kind
goes unchecked, and ``helm lint`` through the same Helm library is clean."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import helm_python as helm
import pytest

from tests.unit._kube_schemas import Invalid, Unchecked
from tests.unit.chart._kinds import CUSTOM, VERSIONS, validate
from tests.unit.chart._render import CHART, RELEASE, RELEASE_NAMESPACE, find, render

DEPLOYABLES = ("watcher", "apiserver", "compiler", "stagectl", "inference-auth")
Documents = list[dict[str, Any]]


@dataclass(frozen=True)
class Combination:
    name: str
    values: dict[str, Any]
    # What the combination changes in the rendered chart: it must show, or the combination
    # proves nothing.
    shows: Callable[[Documents], bool]


def _kinds(documents: Documents) -> set[str]:
    return {document["kind"] for document in documents}


def _pod(documents: Documents, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = find(documents, "Deployment", f"{RELEASE}-{name}")["spec"]["template"]
    return spec


def _per_deployable(**values: Any) -> dict[str, Any]:
    return {"deployables": {name: copy.deepcopy(values) for name in DEPLOYABLES}}


NETWORK_POLICY = {
    "enabled": True,
    "ingress": {
        "apiserver": {"namespaces": ["kubeopera", "platform"]},
        "inference-auth": {
            "namespaces": [],
            "peers": [{"namespaceSelector": {"matchLabels": {"gateway": "true"}}}],
        },
        "health": {"namespaces": ["monitoring"], "cidrs": ["192.168.0.0/24"]},
    },
    "egress": {
        "dns": {"namespaces": ["kube-system"], "cidrs": ["169.254.20.10/32"]},
        "postgresql": {"cidrs": ["10.50.0.10/32"], "ports": [5432, 6432]},
        "redis": {"namespaces": ["redis"], "podLabels": {"app": "redis"}},
        "kubernetesApi": {"cidrs": ["172.18.0.2/32", "fd00::1/128"]},
        "clusters": {"cidrs": ["203.0.113.0/24"]},
        "s3": {"cidrs": ["52.95.0.0/16"]},
        "iam": {"cidrs": ["52.94.225.0/24"]},
        "mlflow": {"namespaces": ["kubeopera-mlflow"]},
        "git": {"peers": [{"ipBlock": {"cidr": "140.82.112.0/20", "except": ["140.82.112.1/32"]}}]},
        "notifications": {"cidrs": ["3.120.0.0/16", "44.200.0.0/16"]},
    },
}
SCHEDULING = {
    "priorityClassName": "platform-high",
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [
        {"key": "platform", "operator": "Equal", "value": "wm", "effect": "NoSchedule"}
    ],
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": RELEASE}},
                    },
                }
            ]
        }
    },
    "podAnnotations": {"example.com/owner": "platform"},
    "podLabels": {"team": "platform"},
}

COMBINATIONS = [
    Combination("defaults", {}, lambda d: {"Deployment", "ValidatingAdmissionPolicy"} <= _kinds(d)),
    Combination(
        "network policies",
        {"networkPolicy": NETWORK_POLICY},
        lambda d: sum(x["kind"] == "NetworkPolicy" for x in d) == 1 + len(DEPLOYABLES),
    ),
    Combination(
        "autoscaling",
        {
            "deployables": {
                "apiserver": {"autoscaling": {"enabled": True}},
                "inference-auth": {
                    "autoscaling": {"enabled": True, "minReplicas": 4, "maxReplicas": 20},
                },
            }
        },
        lambda d: (
            sum(x["kind"] == "HorizontalPodAutoscaler" for x in d) == 2
            and "replicas" not in find(d, "Deployment", f"{RELEASE}-apiserver")["spec"]
        ),
    ),
    Combination(
        "a priority class for every pod",
        {"priorityClassName": "platform-critical"},
        lambda d: all(
            _pod(d, name)["spec"]["priorityClassName"] == "platform-critical"
            for name in DEPLOYABLES
        ),
    ),
    Combination(
        "scheduling per deployable",
        _per_deployable(**SCHEDULING) | {"priorityClassName": "platform-critical"},
        lambda d: all(
            _pod(d, name)["spec"]["priorityClassName"] == "platform-high"
            and _pod(d, name)["spec"]["tolerations"]
            for name in DEPLOYABLES
        ),
    ),
    Combination(
        "topology spread replaced or removed",
        {
            "deployables": {
                "watcher": {"topologySpreadConstraints": []},
                "apiserver": {
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 2,
                            "topologyKey": "topology.kubernetes.io/zone",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {
                                "matchLabels": {"app.kubernetes.io/component": "apiserver"}
                            },
                        }
                    ]
                },
            }
        },
        lambda d: (
            "topologySpreadConstraints" not in _pod(d, "watcher")["spec"]
            and _pod(d, "apiserver")["spec"]["topologySpreadConstraints"][0]["maxSkew"] == 2
        ),
    ),
    Combination(
        "replicas and disruption budgets changed",
        {
            "deployables": {
                "watcher": {"replicas": 3, "pdb": {"minAvailable": None, "maxUnavailable": 1}},
                "apiserver": {"replicas": 4, "pdb": {"maxUnavailable": "50%"}},
                "compiler": {"replicas": 1, "pdb": {"enabled": False}},
                "stagectl": {"replicas": 3, "pdb": {"minAvailable": 2}},
                "inference-auth": {"replicas": 5, "pdb": {"maxUnavailable": "20%"}},
            }
        },
        lambda d: (
            [find(d, "Deployment", f"{RELEASE}-{n}")["spec"]["replicas"] for n in DEPLOYABLES]
            == [3, 4, 1, 3, 5]
            and sum(x["kind"] == "PodDisruptionBudget" for x in d) == 4
        ),
    ),
    Combination(
        "no budgets, no replicas",
        _per_deployable(replicas=0, pdb={"enabled": False}),
        lambda d: "PodDisruptionBudget" not in _kinds(d),
    ),
    Combination(
        "stagectl's admission policy off, the compiler's prefix changed",
        {"admission": {"confine": {"compiler": "tenants-", "stagectl": ""}}},
        lambda d: sum(x["kind"] == "ValidatingAdmissionPolicy" for x in d) == 1,
    ),
    Combination(
        "services, stops and resources",
        {
            "deployables": {
                "apiserver": {
                    "service": {
                        "type": "LoadBalancer",
                        "port": 443,
                        "annotations": {
                            "service.beta.kubernetes.io/aws-load-balancer-internal": "true"
                        },
                    },
                    "preStopSleepSeconds": 0,
                    "terminationGracePeriodSeconds": 60,
                },
                "compiler": {
                    "service": {"type": "NodePort", "port": 9000},
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "1G"},
                        "limits": {"cpu": 2, "memory": "1.5Gi"},
                    },
                },
                "inference-auth": {"preStopSleepSeconds": 15, "terminationGracePeriodSeconds": 45},
            },
            "gitSync": {"workdirSize": "300Mi"},
        },
        lambda d: (
            find(d, "Service", f"{RELEASE}-apiserver")["spec"]["type"] == "LoadBalancer"
            and "lifecycle" not in _pod(d, "apiserver")["spec"]["containers"][0]
        ),
    ),
    Combination(
        "security contexts per deployable",
        {
            "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 20000, "fsGroup": 20000},
            "deployables": {
                "watcher": {
                    "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 30000},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            },
        },
        lambda d: (
            _pod(d, "watcher")["spec"]["securityContext"]["runAsUser"] == 30000
            and _pod(d, "compiler")["spec"]["securityContext"]["runAsUser"] == 20000
        ),
    ),
    Combination(
        "image, secrets, environment, events and the IAM policy",
        {
            "image": {
                "repository": "registry.example.com/wm",
                "tag": "1.2.3",
                "pullPolicy": "Always",
                "pullSecrets": ["registry-credentials"],
            },
            "env": {"LOG_LEVEL": "debug", "GIT_FETCH_MAX_BYTES": 33554432, "LOG_JSON": True},
            "deployables": {
                "inference-auth": {"secret": "wm-inference-auth-login"},
                "compiler": {"env": {"LOG_LEVEL": "info"}},
            },
            "events": {"namespace": "pipeline-events", "publicHost": "hooks.example.com"},
            "iam": {
                "bucket": "wm-artifacts",
                "boundaryArn": "arn:aws:iam::123456789012:policy/wm-tenant-boundary",
                "accountId": "123456789012",
            },
        },
        lambda d: (
            "ConfigMap" in _kinds(d)
            and find(d, "Namespace", "pipeline-events")["kind"] == "Namespace"
        ),
    ),
    Combination(
        # The ServiceMonitors and the PrometheusRule are checked by the Prometheus Operator's
        # CRDs (tests/unit/chart/crds/), the dashboard's ConfigMap by kubernetes-validate.
        "monitoring on",
        {
            "monitoring": {
                "serviceMonitor": {
                    "enabled": True,
                    "interval": "15s",
                    "labels": {"release": "kps"},
                },
                "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
                "dashboard": {"enabled": True, "labels": {"grafana_dashboard": "1"}},
            }
        },
        lambda d: (
            sum(x["kind"] == "ServiceMonitor" for x in d) == len(DEPLOYABLES)
            and sum(x["kind"] == "PrometheusRule" for x in d) == 1
            and sum(x["kind"] == "ConfigMap" for x in d) == 1
        ),
    ),
]
_IDS = [combination.name for combination in COMBINATIONS]


@pytest.fixture(scope="module", params=COMBINATIONS, ids=_IDS)
def combination(request: pytest.FixtureRequest) -> tuple[Combination, Documents]:
    chosen: Combination = request.param
    return chosen, render(chosen.values)


def test_each_combination_changes_what_it_says(combination: tuple[Combination, Documents]) -> None:
    chosen, documents = combination
    assert chosen.shows(documents), chosen.name


@pytest.mark.parametrize("version", VERSIONS)
def test_every_rendered_object_is_valid(
    combination: tuple[Combination, Documents], version: str
) -> None:
    """Strict: an unknown or misspelt field is refused, and a kind nothing can check too."""
    _, documents = combination
    for document in documents:
        try:
            validate(document, version)
        except Invalid as error:
            name = f"{document['kind']} {document['metadata']['name']}"
            raise AssertionError(f"{name}: {error}") from error


@pytest.mark.parametrize("combination", COMBINATIONS, ids=_IDS)
def test_helm_lint_is_clean(combination: Combination) -> None:
    report: dict[str, Any] = helm.lint(
        CHART,
        combination.values or None,
        strict=True,
        namespace=RELEASE_NAMESPACE,
        kube_version=f"v{VERSIONS[0]}",
    )
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []  # warnings and errors


def test_helm_lint_reports_values_the_schema_refuses() -> None:
    """The lint above can fail: it applies values.schema.json to the values it is given."""
    report = helm.lint(
        CHART,
        {"deployables": {"watcher": {"replicas": "two"}}},
        strict=True,
        namespace=RELEASE_NAMESPACE,
        kube_version=f"v{VERSIONS[0]}",
    )
    assert any("/deployables/watcher/replicas" in error for error in report["errors"])


# What the chart's ServiceMonitors and PrometheusRule look like, for the checks of the CRD
# schemas themselves: each refuses what its CRD refuses.
SERVICE_MONITOR: dict[str, Any] = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "ServiceMonitor",
    "metadata": {
        "name": f"{RELEASE}-watcher",
        "namespace": RELEASE_NAMESPACE,
        "labels": {"app.kubernetes.io/component": "watcher", "release": "kps"},
    },
    "spec": {
        "selector": {"matchLabels": {"app.kubernetes.io/component": "watcher"}},
        "namespaceSelector": {"matchNames": [RELEASE_NAMESPACE]},
        "endpoints": [{"port": "health", "path": "/metrics", "scheme": "http", "interval": "30s"}],
    },
}
PROMETHEUS_RULE: dict[str, Any] = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "PrometheusRule",
    "metadata": {"name": RELEASE, "namespace": RELEASE_NAMESPACE},
    "spec": {
        "groups": [
            {
                "name": "workflow-manager.watcher",
                "rules": [
                    {
                        "alert": "WorkflowManagerWatcherDown",
                        "expr": 'up{job="wm-watcher-metrics"} == 0',
                        "for": "5m",
                        "labels": {"severity": "critical"},
                        "annotations": {"summary": "The watcher is down"},
                    }
                ],
            }
        ]
    },
}


def _changed(document: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    change(changed)
    return changed


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("document", [SERVICE_MONITOR, PROMETHEUS_RULE], ids=lambda d: d["kind"])
def test_a_monitoring_object_is_checked_by_its_crd(document: dict[str, Any], version: str) -> None:
    assert (document["apiVersion"], document["kind"]) in CUSTOM
    validate(document, version)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            _changed(SERVICE_MONITOR, lambda d: d["spec"]["endpoints"][0].update(intervall="1m")),
            r"\.spec\.endpoints\[0\]\.intervall: not in the schema",
        ),
        (
            _changed(SERVICE_MONITOR, lambda d: d["spec"]["endpoints"][0].update(port=8121)),
            r"8121 is not of type 'string'",
        ),
        (
            _changed(SERVICE_MONITOR, lambda d: d["spec"]["endpoints"][0].update(interval="30")),
            r"'30' does not match",
        ),
        (
            _changed(SERVICE_MONITOR, lambda d: d["spec"].pop("selector")),
            r"'selector' is a required",
        ),
        (
            _changed(SERVICE_MONITOR, lambda d: d["metadata"].pop("namespace")),
            r"metadata\.namespace",
        ),
        (
            _changed(PROMETHEUS_RULE, lambda d: d["spec"]["groups"][0]["rules"][0].pop("expr")),
            r"'expr' is a required",
        ),
        (
            _changed(PROMETHEUS_RULE, lambda d: d["spec"]["groups"][0]["rules"][0].update(fo="5m")),
            r"\.rules\[0\]\.fo: not in the schema",
        ),
    ],
)
def test_a_monitoring_object_its_crd_refuses_is_refused(
    document: dict[str, Any], message: str
) -> None:
    with pytest.raises(Invalid, match=message):
        validate(document, VERSIONS[-1])


def test_a_kind_nothing_can_check_is_refused_never_passed() -> None:
    template = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "x", "namespace": RELEASE_NAMESPACE},
        "spec": {},
    }
    with pytest.raises(Unchecked, match="WorkflowTemplate"):
        validate(template, VERSIONS[-1])


@pytest.mark.parametrize(
    ("memory", "valid"),
    [("512Mi", True), ("0.5Gi", True), ("1e9", True), ("512MB", False), ("1 Gi", False)],
)
def test_a_quantity_kubernetes_would_not_parse_is_refused(memory: str, valid: bool) -> None:
    """kubernetes-validate takes any string for a Quantity; the checker does not."""
    documents = render({"deployables": {"watcher": {"resources": {"limits": {"memory": memory}}}}})
    deployment = find(documents, "Deployment", f"{RELEASE}-watcher")
    if valid:
        validate(deployment, VERSIONS[0])
    else:
        with pytest.raises(Invalid, match=r"resources\.limits\.memory: .* is not a quantity"):
            validate(deployment, VERSIONS[0])
