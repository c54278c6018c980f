"""The chart's NetworkPolicies, evaluated: who may reach each deployable, and where each may go.

The policies are rendered by Helm's engine and judged by the evaluator in
``tests/unit/_network_policy.py`` in a small world: the release's pods as the Deployments label
them, the pods around them (kubeopera-api, the ingress controller and the gateway, Prometheus,
cluster DNS, Redis, MLflow, a tenant's pod) and addresses outside the cluster (the database, the
API servers, S3, IAM, a Git host, Slack, somewhere else on the internet)."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from tests.unit._network_policy import Address, Endpoint, NetworkPolicies, Pod
from tests.unit.chart._render import CHART, RELEASE, RELEASE_NAMESPACE, render, rendered

DEPLOYABLES = ("watcher", "apiserver", "compiler", "stagectl", "inference-auth")
VALUES: dict[str, Any] = {
    "networkPolicy": {
        "enabled": True,
        "egress": {
            "postgresql": {"cidrs": ["10.50.0.10/32"]},
            "redis": {"namespaces": ["redis"], "podLabels": {"app": "redis"}},
            "kubernetesApi": {"cidrs": ["172.18.0.2/32"]},
            "clusters": {"cidrs": ["203.0.113.0/24"]},
            "s3": {"cidrs": ["52.95.0.0/16"]},
            "iam": {"cidrs": ["52.94.225.0/24"]},
            "mlflow": {"namespaces": ["kubeopera-mlflow"]},
            "git": {"cidrs": ["140.82.112.0/20"]},
            "notifications": {"cidrs": ["3.120.0.0/16", "44.200.0.0/16"]},
        },
    }
}

KUBEOPERA_API = Pod("kubeopera", {"app": "kubeopera-api"}, {"http": 8080})
INGRESS_NGINX = Pod("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"})
ENVOY = Pod("envoy-gateway-system", {"app.kubernetes.io/name": "envoy"})
PROMETHEUS = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})
TENANT = Pod("kubeopera-data-acme", {"app": "step"}, {"http": 8120, "health": 8121})
KUBE_DNS = Pod("kube-system", {"k8s-app": "kube-dns"}, {"dns": 53})
REDIS = Pod("redis", {"app": "redis"})
OTHER_REDIS = Pod("redis", {"app": "redis-sentinel"})
MLFLOW = Pod("kubeopera-mlflow", {"app": "mlflow"})
INTERNET = Address("198.51.100.7")
OUTSIDERS: dict[str, Endpoint] = {
    "kubeopera-api": KUBEOPERA_API,
    "ingress-nginx": INGRESS_NGINX,
    "envoy": ENVOY,
    "prometheus": PROMETHEUS,
    "tenant": TENANT,
    "internet": INTERNET,
}

# Each destination as a deployable reaches it: the endpoint, the port, the protocol.
DESTINATIONS: dict[str, tuple[Endpoint, int, str]] = {
    "dns-udp": (KUBE_DNS, 53, "UDP"),
    "dns-tcp": (KUBE_DNS, 53, "TCP"),
    "postgresql": (Address("10.50.0.10"), 5432, "TCP"),
    "redis": (REDIS, 6379, "TCP"),
    "kubernetes-api": (Address("172.18.0.2"), 6443, "TCP"),
    "cluster-api": (Address("203.0.113.10"), 443, "TCP"),
    "kubeopera-api": (KUBEOPERA_API, 8080, "TCP"),
    "s3": (Address("52.95.1.1"), 443, "TCP"),
    "iam": (Address("52.94.225.10"), 443, "TCP"),
    "mlflow": (MLFLOW, 5000, "TCP"),
    "git": (Address("140.82.112.3"), 443, "TCP"),
    "slack": (Address("3.120.5.6"), 443, "TCP"),
    "pagerduty": (Address("44.200.1.2"), 443, "TCP"),
}
DNS_DB = {"dns-udp", "dns-tcp", "postgresql"}
# What each deployable connects to, read from its code (the variables it reads: DATABASE_URL,
# REDIS_URL, HOST_KUBECONFIG, KUBEOPERA_API_*, ARTIFACT_BUCKET, IAM_ENDPOINT_URL, MLFLOW_URL,
# GIT_ALLOW_REMOTES, SLACK_WEBHOOK_URL_PREFIXES / PAGERDUTY_EVENTS_URL, COMPILER_URL).
USES: dict[str, set[str]] = {
    "watcher": DNS_DB | {"kubernetes-api", "cluster-api", "kubeopera-api"},
    "apiserver": DNS_DB
    | {"kubernetes-api", "cluster-api", "kubeopera-api", "s3", "mlflow", "compiler"},
    "compiler": DNS_DB | {"kubernetes-api", "s3", "iam", "mlflow", "git", "slack", "pagerduty"},
    "stagectl": DNS_DB | {"kubernetes-api", "s3", "iam"},  # IAM: the model readers
    "inference-auth": DNS_DB | {"redis"},
}


def pods(documents: list[dict[str, Any]]) -> dict[str, Pod]:
    """Each deployable's pod as its Deployment makes it: labels and named ports."""
    found = {}
    for document in documents:
        if document["kind"] != "Deployment":
            continue
        template = document["spec"]["template"]
        (container,) = template["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        found[container["name"]] = Pod(
            document["metadata"]["namespace"], template["metadata"]["labels"], ports
        )
    return found


def world(values: dict[str, Any] = VALUES) -> tuple[NetworkPolicies, dict[str, Pod]]:
    documents = render(values)
    return NetworkPolicies(documents), pods(documents)


def destinations(ours: dict[str, Pod]) -> dict[str, tuple[Endpoint, int, str]]:
    """DESTINATIONS and the compiler's internal API."""
    return {**DESTINATIONS, "compiler": (ours["compiler"], 8120, "TCP")}


def test_the_policies_are_off_by_default() -> None:
    assert [d for d in rendered() if d["kind"] == "NetworkPolicy"] == []


def test_on_there_is_a_default_deny_and_one_policy_per_deployable() -> None:
    documents = render(VALUES)
    names = {d["metadata"]["name"] for d in documents if d["kind"] == "NetworkPolicy"}
    assert names == {f"{RELEASE}-default-deny", *(f"{RELEASE}-{d}" for d in DEPLOYABLES)}


def test_helm_lint_is_clean_with_the_policies_on() -> None:
    report: dict[str, Any] = helm.lint(
        CHART, VALUES, strict=True, namespace=RELEASE_NAMESPACE, kube_version="v1.30.0"
    )
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("version", ["1.30.0", "1.37.0"])
def test_every_policy_is_valid_against_the_kubernetes_schema(version: str) -> None:
    for document in render(VALUES):
        if document["kind"] == "NetworkPolicy":
            kubernetes_validate.validate(document, version, strict=True)


@pytest.mark.parametrize("deployable", DEPLOYABLES)
def test_each_deployable_reaches_exactly_what_it_uses(deployable: str) -> None:
    policies, ours = world()
    assert set(ours) == set(DEPLOYABLES)
    reached = {
        name
        for name, (endpoint, port, protocol) in destinations(ours).items()
        if policies.allows(ours[deployable], endpoint, port, protocol)
    }
    assert reached == USES[deployable]


@pytest.mark.parametrize("deployable", DEPLOYABLES)
def test_nothing_else_is_reached(deployable: str) -> None:
    policies, ours = world()
    me = ours[deployable]
    for port in (53, 80, 443, 5432, 6443):
        assert not policies.allows(me, INTERNET, port)
    # A destination on another port than its own, and pods next to those allowed.
    assert not policies.allows(me, Address("10.50.0.10"), 5433)
    assert not policies.allows(me, Address("10.50.0.11"), 5432)
    assert not policies.allows(me, KUBE_DNS, 8080)
    assert not policies.allows(me, OTHER_REDIS, 6379)
    assert not policies.allows(me, TENANT, 8120)
    for other in DEPLOYABLES:
        if other != "compiler":
            assert not policies.allows(me, ours[other], 8120)
            assert not policies.allows(me, ours[other], 8121)


@pytest.mark.parametrize(
    ("deployable", "allowed"),
    [
        ("apiserver", {"kubeopera-api"}),
        ("inference-auth", {"ingress-nginx", "envoy"}),
        ("compiler", {"apiserver"}),
        ("watcher", set()),
        ("stagectl", set()),
    ],
)
def test_who_reaches_each_deployables_http_port(deployable: str, allowed: set[str]) -> None:
    policies, ours = world()
    target = ours[deployable]
    sources: dict[str, Endpoint] = {**OUTSIDERS, **ours}
    reached = {name for name, source in sources.items() if policies.allows(source, target, 8120)}
    assert reached == allowed


@pytest.mark.parametrize("deployable", DEPLOYABLES)
def test_only_prometheus_reaches_the_health_port(deployable: str) -> None:
    """The kubelet's probes come from the node, which CNIs let through (not modelled)."""
    policies, ours = world()
    sources: dict[str, Endpoint] = {**OUTSIDERS, **ours}
    reached = {
        name for name, source in sources.items() if policies.allows(source, ours[deployable], 8121)
    }
    assert reached == {"prometheus"}


def test_the_sources_are_configurable() -> None:
    values = {
        "networkPolicy": {
            **VALUES["networkPolicy"],
            "ingress": {
                "apiserver": {"namespaces": ["platform"]},
                # Helm merges maps: the default namespaces go only when emptied.
                "inference-auth": {
                    "namespaces": [],
                    "peers": [{"namespaceSelector": {"matchLabels": {"gateway": "true"}}}],
                },
                "health": {"namespaces": ["observability"], "cidrs": ["192.168.0.0/24"]},
            },
        }
    }
    documents = render(values)
    policies = NetworkPolicies(documents, {"edge": {"gateway": "true"}})
    ours = pods(documents)
    assert policies.allows(Pod("platform", {}), ours["apiserver"], 8120)
    assert not policies.allows(KUBEOPERA_API, ours["apiserver"], 8120)
    assert policies.allows(Pod("edge", {}), ours["inference-auth"], 8120)
    assert not policies.allows(INGRESS_NGINX, ours["inference-auth"], 8120)
    assert policies.allows(Pod("observability", {}), ours["stagectl"], 8121)
    assert policies.allows(Address("192.168.0.7"), ours["stagectl"], 8121)
    assert not policies.allows(PROMETHEUS, ours["stagectl"], 8121)


def test_a_pod_of_the_release_without_a_policy_of_its_own_is_denied_both_ways() -> None:
    policies, ours = world()
    stray = Pod(
        RELEASE_NAMESPACE,
        {"app.kubernetes.io/name": "workflow-manager", "app.kubernetes.io/instance": RELEASE},
        {"http": 8120},
    )
    for endpoint, port, protocol in destinations(ours).values():
        assert not policies.allows(stray, endpoint, port, protocol)
    for source in OUTSIDERS.values():
        assert not policies.allows(source, stray, 8120)


def test_a_destination_left_without_peers_opens_nothing() -> None:
    """A rule without ``to`` would open every address: none is rendered."""
    egress = {**VALUES["networkPolicy"]["egress"], "git": {"cidrs": []}, "dns": {"namespaces": []}}
    policies, ours = world({"networkPolicy": {**VALUES["networkPolicy"], "egress": egress}})
    assert not policies.allows(ours["compiler"], *DESTINATIONS["git"][:2])
    assert not policies.allows(ours["compiler"], KUBE_DNS, 53, "UDP")
    for document in render({"networkPolicy": {**VALUES["networkPolicy"], "egress": egress}}):
        if document["kind"] == "NetworkPolicy":
            assert all(rule.get("to") for rule in document["spec"].get("egress", []))


@pytest.mark.parametrize("required", ["postgresql", "kubernetesApi", "redis"])
def test_a_destination_every_install_needs_must_be_given(required: str) -> None:
    egress = {**VALUES["networkPolicy"]["egress"], required: {"cidrs": []}}
    with pytest.raises(helm.HelmRenderError, match=rf"networkPolicy\.egress\.{required}: give"):
        render({"networkPolicy": {**VALUES["networkPolicy"], "egress": egress}})
