"""Which clusters exist and how to reach them, from the registry and the host's own identity.

Purely computational, no side effects. The host cluster is recognised as "Register this
cluster" does: by the UID of its kube-system namespace. Until the registry lists it, it is
watched under a provisional id derived from that UID; once listed, the registered identity is
adopted and the host's history carried over to it (``shared.db.clusters``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.errors import Invalid
from shared.identifiers import CLUSTER_ID
from shared.runs import ClusterRef


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """One cluster as kubeopera-api lists it (contract in docs/api.md)."""

    id: str
    name: str
    region: str | None
    provider: str | None
    kubeconfig: str | None
    kube_system_uid: str | None


@dataclass(frozen=True, slots=True)
class WatchTarget:
    """A cluster to inform on and how to reach it (``kubeconfig`` None: the host's identity)."""

    ref: ClusterRef
    kubeconfig: str | None
    is_host: bool
    kube_system_uid: str | None

    @property
    def connection_key(self) -> tuple[str | None, bool]:
        """Changes when the way to reach the cluster changes (restart its informer)."""
        return (self.kubeconfig, self.is_host)


def provisional_host_id(host_uid: str) -> str:
    return f"host-{host_uid}"


def parse_registry(payload: Any) -> list[RegistryEntry]:
    """Validate kubeopera-api's answer; raise Invalid naming the first malformed entry."""
    if not isinstance(payload, list):
        raise Invalid("cluster registry answered something other than a list")
    entries = []
    for index, item in enumerate(payload):
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str) or not item["id"]:
            raise Invalid(f"cluster registry entry {index} has no id")
        if not CLUSTER_ID.fullmatch(item["id"]):
            # Runs are addressed by cluster id in every route: one we could not route to would
            # leave its runs unreachable.
            raise Invalid(
                f"cluster registry entry {index} has an id that is not a cluster id "
                "(letters, digits and -._: , at most 253 characters)"
            )

        def text(key: str, item: Mapping[str, Any] = item) -> str | None:
            value = item.get(key)
            return value if isinstance(value, str) and value else None

        entries.append(
            RegistryEntry(
                id=item["id"],
                name=text("name") or item["id"],
                region=text("region"),
                provider=text("provider"),
                kubeconfig=text("kubeconfig"),
                kube_system_uid=text("kube_system_uid"),
            )
        )
    return entries


def plan_targets(entries: Iterable[RegistryEntry], *, host_uid: str | None) -> list[WatchTarget]:
    """The clusters to watch: every registered cluster we can reach, and the host always.

    A registered entry whose kube_system_uid is the host's is the host (reached with the
    in-cluster identity even when it carries a kubeconfig). Entries without a kubeconfig that
    are not the host cannot be reached and are left out.
    """
    targets: dict[str, WatchTarget] = {}
    host_found = False
    for entry in entries:
        ref = ClusterRef(entry.id, entry.name, entry.region, entry.provider)
        if host_uid is not None and entry.kube_system_uid == host_uid and not host_found:
            host_found = True
            targets[entry.id] = WatchTarget(ref, None, True, host_uid)
        elif entry.kubeconfig:
            targets.setdefault(entry.id, WatchTarget(ref, entry.kubeconfig, False, None))
    if host_uid is not None and not host_found:
        host_id = provisional_host_id(host_uid)
        targets[host_id] = WatchTarget(ClusterRef(host_id, "host"), None, True, host_uid)
    return list(targets.values())
