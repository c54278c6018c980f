"""compiler.tenants.network_policy: the tenant namespace's network policies: isolated both ways,
egress only to DNS, the namespace, the API server, the tracking server and the allowed ports."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from compiler.tenants.provisioning import ProvisioningSpec
from tests.unit._network_policy import Address, NetworkPolicies, Pod
from tests.unit.compiler._specs import BARE, NAMESPACE, SPEC, objects, one


def egress(spec: ProvisioningSpec) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = one("NetworkPolicy", "kubeopera-egress", spec)["spec"]["egress"]
    return rules


def test_the_policy_isolates_the_namespace_both_ways() -> None:
    spec = one("NetworkPolicy", "kubeopera-egress")["spec"]
    assert spec["podSelector"] == {}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [{"from": [{"podSelector": {}}]}]


def test_egress_rules_in_full() -> None:
    assert egress(SPEC) == [
        {
            "to": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                    },
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
        {"to": [{"podSelector": {}}]},
        {
            "to": [{"ipBlock": {"cidr": "172.18.0.2/32"}}],
            "ports": [{"protocol": "TCP", "port": 6443}],
        },
        {
            "to": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "kubeopera-mlflow"}
                    }
                }
            ],
            "ports": [{"protocol": "TCP", "port": 5000}],
        },
        {
            "to": [
                {
                    "ipBlock": {
                        "cidr": "0.0.0.0/0",
                        "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"],
                    }
                }
            ],
            "ports": [{"protocol": "TCP", "port": 443}],
        },
    ]


def test_without_api_server_or_tracking_only_dns_namespace_and_ports() -> None:
    rules = egress(BARE)
    assert len(rules) == 3
    assert rules[1] == {"to": [{"podSelector": {}}]}
    assert rules[2]["to"][0]["ipBlock"]["cidr"] == "0.0.0.0/0"


def test_no_egress_port_means_no_way_out() -> None:
    rules = egress(dataclasses.replace(BARE, egress_ports=()))
    assert all("ipBlock" not in peer for rule in rules for peer in rule.get("to", []))


@pytest.mark.parametrize(
    ("ports", "excepts", "expected_to"),
    [
        ((80, 443), (), [{"ipBlock": {"cidr": "0.0.0.0/0"}}]),
        (
            (8443,),
            ("100.64.0.0/10",),
            [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["100.64.0.0/10"]}}],
        ),
        (
            (443,),
            ("fd00::/8", "10.0.0.0/8"),
            [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}},
                {"ipBlock": {"cidr": "::/0", "except": ["fd00::/8"]}},
            ],
        ),
    ],
    ids=["no-excepts", "one-except", "ipv6-opened-only-with-its-excepts"],
)
def test_egress_ports_outside_the_except_cidrs(
    ports: tuple[int, ...], excepts: tuple[str, ...], expected_to: list[dict[str, Any]]
) -> None:
    spec = dataclasses.replace(BARE, egress_ports=ports, egress_except_cidrs=excepts)
    last = egress(spec)[-1]
    assert last["to"] == expected_to
    assert last["ports"] == [{"protocol": "TCP", "port": port} for port in sorted(ports)]


@pytest.mark.parametrize(
    ("host", "peer"),
    [
        (
            "mlflow.tracking.svc",
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tracking"}}},
        ),
        (
            "mlflow.tracking.svc.cluster.local",
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tracking"}}},
        ),
        ("10.1.2.3", {"ipBlock": {"cidr": "10.1.2.3/32"}}),
        ("fd00::5", {"ipBlock": {"cidr": "fd00::5/128"}}),
        ("mlflow.example.com", None),
    ],
)
def test_the_tracking_server_rule(host: str, peer: dict[str, Any] | None) -> None:
    spec = dataclasses.replace(BARE, tracking_host=host, tracking_port=5000)
    rules = egress(spec)
    if peer is None:
        assert len(rules) == len(egress(BARE))
    else:
        assert {"to": [peer], "ports": [{"protocol": "TCP", "port": 5000}]} in rules


def test_the_tenant_policy_evaluated() -> None:
    """The same evaluator as the chart's policies (tests/unit/_network_policy.py): what a step
    pod of the tenant may reach, and who may reach it."""
    policies = NetworkPolicies(objects(SPEC).values())
    step = Pod(NAMESPACE, {"workflows.argoproj.io/workflow": "w"}, {"http": 8080})
    neighbour = Pod(NAMESPACE, {"app": "other-step"}, {"http": 8080})
    other_tenant = Pod("kubeopera-data-globex", {}, {"http": 8080})
    assert policies.allows(step, Pod("kube-system", {"k8s-app": "kube-dns"}), 53, "UDP")
    assert policies.allows(step, neighbour, 8080)
    assert policies.allows(step, Address("172.18.0.2"), 6443)
    assert policies.allows(step, Pod("kubeopera-mlflow", {"app": "mlflow"}), 5000)
    assert policies.allows(step, Address("52.95.1.1"), 443)
    assert not policies.allows(step, Address("52.95.1.1"), 80)
    assert not policies.allows(step, Address("10.1.2.3"), 443)  # private: excepted
    assert not policies.allows(step, Address("172.18.0.3"), 6443)
    assert not policies.allows(step, other_tenant, 8080)
    assert not policies.allows(other_tenant, step, 8080)
    assert not policies.allows(Address("52.95.1.1"), step, 8080)
