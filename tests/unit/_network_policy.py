"""A small Kubernetes NetworkPolicy evaluator over manifests: may this connection be made?

Purely computational. It follows the networking.k8s.io/v1 API's documented semantics (the API
reference and pkg/apis/networking in kubernetes/kubernetes, as CNIs implement them):

- a pod is isolated for ingress (egress) when a policy in its namespace selects it with
  ``Ingress`` (``Egress``) in ``policyTypes`` (unset: ``Ingress``, plus ``Egress`` when the
  policy has an ``egress`` section); an isolated pod takes (makes) a connection when a rule of
  one such policy allows it, and policies only ever add; a pod no policy isolates is open;
- a connection needs both ends: the source's egress and the destination's ingress;
- a rule without ``from``/``to`` (or with an empty list) matches every peer, without ``ports``
  every port; a port entry without a protocol is TCP, without a port every port of that
  protocol, a named port is the destination pod's container port of that name (so never an
  address outside the cluster), ``endPort`` makes a range;
- a peer with ``podSelector`` alone is pods of the policy's namespace, ``namespaceSelector``
  alone all pods of the namespaces it selects, both: those pods in those namespaces;
  ``ipBlock`` matches an address in its CIDR and outside its excepts (used here for addresses
  outside the cluster; CNIs differ on whether it matches pod addresses, so pods never match
  one here);
- a label selector ANDs ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists,
  DoesNotExist); an empty one selects everything.

Traffic from the node to its own pods (the kubelet's probes) is let through by most CNIs
whatever the policy says, and is not modelled: ``Address`` is an address outside the cluster.
Fields it cannot judge are refused rather than answered wrongly.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

_RULE_KEYS = {"ingress": ({"from", "ports"}, "from"), "egress": ({"to", "ports"}, "to")}
_PEER_KEYS = {"podSelector", "namespaceSelector", "ipBlock"}
_SPEC_KEYS = {"podSelector", "policyTypes", "ingress", "egress"}


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod: where it runs, its labels, its containers' named ports."""

    namespace: str
    labels: Mapping[str, str]
    ports: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Address:
    """An address outside the cluster (a managed database, a SaaS endpoint, a node)."""

    ip: str


Endpoint = Pod | Address


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a label selector selects an object with these labels."""
    unknown = set(selector) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise ValueError(f"a label selector with {sorted(unknown)}")
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:
            raise ValueError(f"selector operator {operator!r}")
        if not ok:
            return False
    return True


class NetworkPolicies:
    """The NetworkPolicies among ``manifests`` (other kinds are ignored), judged in a cluster
    whose namespaces carry ``namespace_labels`` besides the name label the API server sets."""

    def __init__(
        self,
        manifests: Iterable[Mapping[str, Any]],
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self._policies = [m for m in manifests if m.get("kind") == "NetworkPolicy"]
        self._namespace_labels = dict(namespace_labels or {})
        for policy in self._policies:
            if policy.get("apiVersion") != "networking.k8s.io/v1":
                raise ValueError(f"NetworkPolicy of {policy.get('apiVersion')}")
            if "namespace" not in policy["metadata"]:
                raise ValueError(f"NetworkPolicy {policy['metadata']['name']} has no namespace")
            unknown = set(policy["spec"]) - _SPEC_KEYS
            if unknown:
                raise ValueError(f"NetworkPolicy spec with {sorted(unknown)}")

    def __len__(self) -> int:
        return len(self._policies)

    def allows(
        self, source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP"
    ) -> bool:
        """Whether ``source`` may open a connection to ``destination`` on ``port``."""
        if isinstance(source, Address) and isinstance(destination, Address):
            raise ValueError("neither end is a pod: no NetworkPolicy applies")
        out = not isinstance(source, Pod) or self._permits(
            source, "Egress", "egress", destination, destination, port, protocol
        )
        into = not isinstance(destination, Pod) or self._permits(
            destination, "Ingress", "ingress", source, destination, port, protocol
        )
        return out and into

    def isolated(self, pod: Pod, direction: str) -> bool:
        """Whether a policy isolates ``pod`` for ``direction`` (``Ingress`` or ``Egress``)."""
        return any(True for _ in self._selecting(pod, direction))

    def _selecting(self, pod: Pod, direction: str) -> Iterable[Mapping[str, Any]]:
        for policy in self._policies:
            spec = policy["spec"]
            if policy["metadata"]["namespace"] != pod.namespace:
                continue
            if not selects(spec["podSelector"], pod.labels):
                continue
            types = spec.get("policyTypes") or [
                "Ingress",
                *(["Egress"] if "egress" in spec else []),
            ]
            if direction in types:
                yield policy

    def _permits(
        self,
        pod: Pod,
        direction: str,
        section: str,
        peer: Endpoint,
        destination: Endpoint,
        port: int,
        protocol: str,
    ) -> bool:
        policies = list(self._selecting(pod, direction))
        if not policies:
            return True
        keys, peers_key = _RULE_KEYS[section]
        for policy in policies:
            for rule in policy["spec"].get(section) or []:
                unknown = set(rule) - keys
                if unknown:
                    raise ValueError(f"a {section} rule with {sorted(unknown)}")
                peers = rule.get(peers_key) or []
                if peers and not any(
                    self._peer_matches(p, policy["metadata"]["namespace"], peer) for p in peers
                ):
                    continue
                entries = rule.get("ports") or []
                if entries and not any(
                    _port_matches(e, destination, port, protocol) for e in entries
                ):
                    continue
                return True
        return False

    def _peer_matches(self, peer: Mapping[str, Any], namespace: str, endpoint: Endpoint) -> bool:
        unknown = set(peer) - _PEER_KEYS
        if unknown or not peer:
            raise ValueError(f"a peer with {sorted(unknown) or 'nothing'}")
        if "ipBlock" in peer:
            if set(peer) != {"ipBlock"}:
                raise ValueError("an ipBlock peer with selectors")
            return isinstance(endpoint, Address) and _in_block(peer["ipBlock"], endpoint.ip)
        if not isinstance(endpoint, Pod):
            return False
        if "namespaceSelector" in peer:
            labels = {
                **self._namespace_labels.get(endpoint.namespace, {}),
                NAMESPACE_NAME_LABEL: endpoint.namespace,
            }
            if not selects(peer["namespaceSelector"], labels):
                return False
        elif endpoint.namespace != namespace:
            return False
        return selects(peer.get("podSelector") or {}, endpoint.labels)


def _in_block(block: Mapping[str, Any], ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    network = ipaddress.ip_network(block["cidr"])
    if address.version != network.version or address not in network:
        return False
    return not any(
        address.version == ipaddress.ip_network(e).version and address in ipaddress.ip_network(e)
        for e in block.get("except") or []
    )


def _port_matches(
    entry: Mapping[str, Any], destination: Endpoint, port: int, protocol: str
) -> bool:
    if entry.get("protocol", "TCP") != protocol:
        return False
    wanted = entry.get("port")
    if wanted is None:
        return True
    if isinstance(wanted, str):
        if "endPort" in entry:
            raise ValueError("endPort with a named port")
        return isinstance(destination, Pod) and destination.ports.get(wanted) == port
    return wanted <= port <= entry.get("endPort", wanted)
