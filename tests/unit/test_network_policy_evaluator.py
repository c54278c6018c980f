"""tests/unit/_network_policy.py, the evaluator the chart's and the tenants' policies are judged
by: the API's semantics where a wrong reading would pass a wrong policy."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit._network_policy import Address, NetworkPolicies, Pod, selects

WEB = Pod("shop", {"app": "web"}, {"http": 8080})
DB = Pod("shop", {"app": "db"}, {"pg": 5432})
ELSEWHERE = Pod("other", {"app": "web"}, {"http": 8080})


def policy(spec: dict[str, Any], namespace: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": spec,
    }


def test_no_policy_leaves_pods_open() -> None:
    assert NetworkPolicies([]).allows(WEB, DB, 5432)


def test_policy_types_default_to_ingress_and_to_egress_only_with_an_egress_section() -> None:
    ingress_only = NetworkPolicies([policy({"podSelector": {}})])
    assert not ingress_only.allows(WEB, DB, 5432)
    assert ingress_only.allows(WEB, Address("1.2.3.4"), 443)  # egress not isolated
    both = NetworkPolicies([policy({"podSelector": {}, "egress": []})])
    assert not both.allows(WEB, Address("1.2.3.4"), 443)


def test_a_rule_without_peers_or_ports_matches_everything() -> None:
    open_rule = NetworkPolicies([policy({"podSelector": {}, "egress": [{}], "ingress": [{}]})])
    assert open_rule.allows(WEB, Address("1.2.3.4"), 1)
    assert open_rule.allows(ELSEWHERE, DB, 5432)
    empty_to = NetworkPolicies(
        [policy({"podSelector": {}, "egress": [{"to": [], "ports": [{"port": 443}]}]})]
    )
    assert empty_to.allows(WEB, Address("1.2.3.4"), 443)
    assert not empty_to.allows(WEB, Address("1.2.3.4"), 80)


def test_policies_add_up_and_both_ends_must_allow() -> None:
    to_db = policy(
        {
            "podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}]}],
        }
    )
    db_closed = policy({"podSelector": {"matchLabels": {"app": "db"}}})
    assert NetworkPolicies([to_db]).allows(WEB, DB, 5432)
    assert not NetworkPolicies([to_db, db_closed]).allows(WEB, DB, 5432)
    from_web = policy(
        {
            "podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}],
        }
    )
    assert NetworkPolicies([to_db, db_closed, from_web]).allows(WEB, DB, 5432)


def test_a_pod_selector_alone_is_the_policys_namespace() -> None:
    rules = NetworkPolicies(
        [policy({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]})]
    )
    assert rules.allows(WEB, DB, 5432)
    assert not rules.allows(ELSEWHERE, DB, 5432)


def test_a_namespace_selector_with_a_pod_selector_is_both() -> None:
    peer = {
        "namespaceSelector": {"matchLabels": {"team": "a"}},
        "podSelector": {"matchLabels": {"app": "web"}},
    }
    rules = NetworkPolicies(
        [policy({"podSelector": {}, "ingress": [{"from": [peer]}]})], {"other": {"team": "a"}}
    )
    assert rules.allows(ELSEWHERE, DB, 5432)
    assert not rules.allows(Pod("other", {"app": "job"}), DB, 5432)
    assert not rules.allows(Pod("third", {"app": "web"}), DB, 5432)
    assert not rules.allows(WEB, DB, 5432)  # shop has no team label


def test_ip_blocks_and_their_excepts_match_addresses_not_pods() -> None:
    block = {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}
    rules = NetworkPolicies([policy({"podSelector": {}, "egress": [{"to": [block]}]})])
    assert rules.allows(WEB, Address("10.2.3.4"), 443)
    assert not rules.allows(WEB, Address("10.1.3.4"), 443)
    assert not rules.allows(WEB, Address("11.0.0.1"), 443)
    assert not rules.allows(WEB, Address("fd00::1"), 443)
    assert not rules.allows(WEB, ELSEWHERE, 8080)


def test_ports_protocols_ranges_and_names() -> None:
    rules = NetworkPolicies(
        [
            policy(
                {
                    "podSelector": {},
                    "egress": [
                        {"ports": [{"protocol": "UDP", "port": 53}]},
                        {"ports": [{"port": 8000, "endPort": 8010}]},
                        {"ports": [{"port": "http"}]},
                    ],
                }
            )
        ]
    )
    assert rules.allows(WEB, Address("1.1.1.1"), 53, "UDP")
    assert not rules.allows(WEB, Address("1.1.1.1"), 53, "TCP")
    assert rules.allows(WEB, Address("1.1.1.1"), 8010)
    assert not rules.allows(WEB, Address("1.1.1.1"), 8011)
    assert rules.allows(WEB, ELSEWHERE, 8080)  # ELSEWHERE's port named http
    assert not rules.allows(WEB, DB, 5432)  # DB has no port named http
    assert not rules.allows(WEB, Address("1.1.1.1"), 80)  # an address has no named port


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
        (
            {
                "matchLabels": {"a": "1"},
                "matchExpressions": [{"key": "b", "operator": "In", "values": ["2"]}],
            },
            {"a": "1"},
            False,
        ),
    ],
)
def test_label_selectors(selector: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert selects(selector, labels) is expected


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"podSelector": {}, "egress": [{"to": [{"serviceSelector": {}}]}]}, "a peer with"),
        (
            {
                "podSelector": {},
                "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}, "podSelector": {}}]}],
            },
            "an ipBlock peer with selectors",
        ),
        ({"podSelector": {}, "ingress": [{"from": [{}], "ports": []}]}, "a peer with nothing"),
        ({"podSelector": {"matchFields": {}}}, "a label selector with"),
    ],
    ids=["unknown-peer", "ipblock-with-selector", "empty-peer", "unknown-selector"],
)
def test_what_it_cannot_judge_is_refused(spec: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        NetworkPolicies([policy(spec)]).allows(WEB, DB, 5432)
