"""What a tenant namespace's pods may reach: the egress rules of its NetworkPolicy
(``compiler.tenants.provisioning`` builds the policy around them). Purely computational.

Reaching the API server: a NetworkPolicy sees the addresses packets are sent to after the
``kubernetes`` Service has been translated (with every common CNI), so the rule must name the API
server's own endpoints, which usually sit in a private range that the except CIDRs exclude.
Allowing TCP 443/6443 to ``0.0.0.0/0`` would open every private address on those ports, and a
setting would go stale when control-plane nodes change. So the addresses are not configured:
the caller discovers them from the ``default/kubernetes`` Service and its EndpointSlice and passes
them in (``api_server_cidrs`` x ``api_server_ports``); they are part of the spec and its hash, so
a control plane that moves rolls out to every tenant like any other change.

Reaching the tracking server: ``MLFLOW_URL`` names a host, which a NetworkPolicy cannot. A
cluster Service name (``<service>.<namespace>.svc[...]``) becomes that namespace on the URL's
port (the Service must expose its pods' own port, as the MLflow charts do); an IP literal becomes
that address; any other name is an external server, reached through the egress-ports rule when
its port is allowed and its addresses are public.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Final

NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"  # set by the API server
DNS_NAMESPACE: Final = "kube-system"
DNS_POD_LABELS: Final = {"k8s-app": "kube-dns"}  # CoreDNS keeps kube-dns's label

_CLUSTER_SERVICE_HOST: Final = re.compile(r"^[a-z0-9-]+\.([a-z0-9-]+)\.svc(\.[a-z0-9.-]+)?$")


def host_cidr(address: str) -> str:
    """The CIDR of exactly one address ('10.0.0.1' -> '10.0.0.1/32'); ValueError otherwise."""
    parsed = ipaddress.ip_address(address)
    return f"{parsed}/{parsed.max_prefixlen}"


def _tracking_peer(host: str) -> dict[str, Any] | None:
    try:
        return {"ipBlock": {"cidr": host_cidr(host)}}
    except ValueError:
        pass
    service = _CLUSTER_SERVICE_HOST.match(host.lower())
    if service:
        return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: service.group(1)}}}
    return None  # an external name: the egress-ports rule decides


def _tcp(ports: tuple[int, ...]) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def _egress_blocks(except_cidrs: tuple[str, ...]) -> list[dict[str, Any]]:
    v4 = [cidr for cidr in except_cidrs if ipaddress.ip_network(cidr).version == 4]
    v6 = [cidr for cidr in except_cidrs if ipaddress.ip_network(cidr).version == 6]
    blocks: list[dict[str, Any]] = [
        {"ipBlock": {"cidr": "0.0.0.0/0", **({"except": v4} if v4 else {})}}
    ]
    # IPv6 is opened only when the operator has said which IPv6 ranges are private.
    if v6:
        blocks.append({"ipBlock": {"cidr": "::/0", "except": v6}})
    return blocks


def egress_rules(
    *,
    api_server_cidrs: tuple[str, ...],
    api_server_ports: tuple[int, ...],
    tracking_host: str | None,
    tracking_port: int | None,
    egress_ports: tuple[int, ...],
    egress_except_cidrs: tuple[str, ...],
) -> list[dict[str, Any]]:
    """Cluster DNS, the namespace itself, the API server, the tracking server, and the egress
    ports anywhere outside the except CIDRs."""
    egress: list[dict[str, Any]] = [
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: DNS_NAMESPACE}},
                    "podSelector": {"matchLabels": dict(DNS_POD_LABELS)},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
        {"to": [{"podSelector": {}}]},
    ]
    if api_server_cidrs:
        egress.append(
            {
                "to": [{"ipBlock": {"cidr": cidr}} for cidr in api_server_cidrs],
                "ports": _tcp(api_server_ports),
            }
        )
    if tracking_host is not None and tracking_port is not None:
        peer = _tracking_peer(tracking_host)
        if peer is not None:
            egress.append({"to": [peer], "ports": _tcp((tracking_port,))})
    if egress_ports:
        egress.append({"to": _egress_blocks(egress_except_cidrs), "ports": _tcp(egress_ports)})
    return egress
