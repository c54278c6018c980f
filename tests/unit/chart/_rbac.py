"""A small Kubernetes RBAC authorizer over manifests: may this service account do that, there?

Purely computational. It follows the API server's RBAC authorizer (plugin/pkg/auth/authorizer/
rbac and pkg/registry/rbac/validation in kubernetes/kubernetes):

- a request is allowed when a rule of a role bound to the subject matches it; a
  ClusterRoleBinding binds everywhere, a RoleBinding in its own namespace only (so never for a
  cluster-scoped request);
- ``*`` matches any verb, group or resource (a resource ``*`` subresources too); ``*/sub``
  matches that subresource of any resource;
- a rule with ``resourceNames`` matches only requests that name one of them, so never a create
  or a list, which name nothing;
- a request on a Namespace by name is in that namespace (the API server's RequestInfo sets the
  namespace of ``/api/v1/namespaces/<name>`` to ``<name>``);
- a service account is the user ``system:serviceaccount:<ns>:<name>`` in the groups
  ``system:serviceaccounts``, ``system:serviceaccounts:<ns>`` and ``system:authenticated``;
- creating or updating a binding passes the escalation check only when its creator has ``bind``
  on the role it refers to, or holds every right that role grants where the binding grants it.

Aggregated ClusterRoles and non-resource URLs are out of its reach: ``Rbac`` refuses manifests
that use them rather than answer wrongly.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

RBAC_GROUP = "rbac.authorization.k8s.io"
Rule = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Account:
    """A service account."""

    namespace: str
    name: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    @property
    def groups(self) -> tuple[str, ...]:
        return (
            "system:serviceaccounts",
            f"system:serviceaccounts:{self.namespace}",
            "system:authenticated",
        )


@dataclass(frozen=True, slots=True)
class Request:
    """What the API server asks the authorizer: verb, group, resource[/subresource], where."""

    verb: str
    group: str
    resource: str
    namespace: str | None = None  # None: cluster-scoped
    name: str | None = None  # None: create, list, watch, deletecollection

    @property
    def scope(self) -> str | None:
        if self.group == "" and self.resource == "namespaces" and self.name:
            return self.name
        return self.namespace


def _matches(values: Iterable[str], wanted: str) -> bool:
    values = list(values)
    return "*" in values or wanted in values


def _resource_matches(resources: Iterable[str], wanted: str) -> bool:
    resources = list(resources)
    if "*" in resources or wanted in resources:
        return True
    _, slash, sub = wanted.partition("/")
    return bool(slash) and f"*/{sub}" in resources


def rule_allows(rule: Rule, request: Request) -> bool:
    names = rule.get("resourceNames") or []
    return (
        _matches(rule.get("verbs") or [], request.verb)
        and _matches(rule.get("apiGroups") or [], request.group)
        and _resource_matches(rule.get("resources") or [], request.resource)
        and (not names or (request.name is not None and request.name in names))
    )


def _bound(subject: Mapping[str, Any], who: Account) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "ServiceAccount":
        return name == who.name and subject.get("namespace") == who.namespace
    if kind == "User":
        return name == who.username
    if kind == "Group":
        return name in who.groups
    return False


def binding(
    namespace: str, name: str, *, cluster_role: str, who: Account, kind: str = "ClusterRole"
) -> dict[str, Any]:
    """A RoleBinding granting ``who`` the role ``cluster_role`` in ``namespace``."""
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": kind, "name": cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": who.name, "namespace": who.namespace}],
    }


class Rbac:
    """The roles and bindings among some manifests (other kinds are ignored)."""

    def __init__(self, manifests: Iterable[Mapping[str, Any]]) -> None:
        self.manifests = [m for m in manifests if m.get("apiVersion") == f"{RBAC_GROUP}/v1"]
        self.cluster_roles: dict[str, list[Rule]] = {}
        self.roles: dict[tuple[str, str], list[Rule]] = {}
        self.cluster_bindings: list[Mapping[str, Any]] = []
        self.bindings: list[Mapping[str, Any]] = []
        for obj in self.manifests:
            kind, metadata = obj["kind"], obj["metadata"]
            if kind in ("ClusterRole", "Role"):
                if obj.get("aggregationRule"):
                    raise ValueError(f"{metadata['name']}: aggregated roles are not modelled")
                rules = list(obj.get("rules") or [])
                if any(rule.get("nonResourceURLs") for rule in rules):
                    raise ValueError(f"{metadata['name']}: non-resource URLs are not modelled")
                if kind == "ClusterRole":
                    self.cluster_roles[metadata["name"]] = rules
                else:
                    self.roles[(metadata["namespace"], metadata["name"])] = rules
            elif kind == "ClusterRoleBinding":
                self.cluster_bindings.append(obj)
            elif kind == "RoleBinding":
                self.bindings.append(obj)

    def with_objects(self, more: Iterable[Mapping[str, Any]]) -> Rbac:
        """These manifests and ``more`` (an object named like one of ours replaces it)."""
        more = list(more)

        def key(obj: Mapping[str, Any]) -> tuple[str, str | None, str]:
            metadata = obj["metadata"]
            return obj["kind"], metadata.get("namespace"), metadata["name"]

        replaced = {key(obj) for obj in more}
        return Rbac([*(m for m in self.manifests if key(m) not in replaced), *more])

    def role_rules(self, role_ref: Mapping[str, Any], namespace: str | None) -> list[Rule]:
        """The rules a roleRef names (a Role only in ``namespace``); none when it is missing."""
        if role_ref.get("kind") == "ClusterRole":
            return self.cluster_roles.get(role_ref["name"], [])
        if namespace is None:
            return []
        return self.roles.get((namespace, role_ref["name"]), [])

    def rules_for(self, who: Account, namespace: str | None) -> Iterator[Rule]:
        """Every rule that applies to ``who`` for a request in ``namespace``."""
        for crb in self.cluster_bindings:
            if any(_bound(subject, who) for subject in crb.get("subjects") or []):
                yield from self.role_rules(crb["roleRef"], None)
        if namespace is None:
            return
        for rb in self.bindings:
            if rb["metadata"]["namespace"] != namespace:
                continue
            if any(_bound(subject, who) for subject in rb.get("subjects") or []):
                yield from self.role_rules(rb["roleRef"], namespace)

    def allows(self, who: Account, request: Request) -> bool:
        return any(rule_allows(rule, request) for rule in self.rules_for(who, request.scope))

    def holds(self, who: Account, rules: Iterable[Rule], namespace: str | None) -> bool:
        """Whether ``who`` holds every right of ``rules`` in ``namespace`` (the escalation
        check's "covers", atom by atom; a ``*`` is held only through a ``*``)."""
        for rule in rules:
            atoms = itertools.product(
                rule.get("verbs") or [],
                rule.get("apiGroups") or [],
                rule.get("resources") or [],
                rule.get("resourceNames") or [None],
            )
            for verb, group, resource, name in atoms:
                request = Request(verb, group, resource, namespace, name)
                if not any(rule_allows(held, request) for held in self.rules_for(who, namespace)):
                    return False
        return True

    def may_bind(self, who: Account, obj: Mapping[str, Any]) -> bool:
        """The escalation check for ``who`` writing the binding ``obj``."""
        namespace = obj["metadata"].get("namespace") if obj["kind"] == "RoleBinding" else None
        role_ref = obj["roleRef"]
        plural = "clusterroles" if role_ref["kind"] == "ClusterRole" else "roles"
        if self.allows(who, Request("bind", RBAC_GROUP, plural, namespace, role_ref["name"])):
            return True
        exists = (
            role_ref["name"] in self.cluster_roles
            if plural == "clusterroles"
            else (namespace, role_ref["name"]) in self.roles
        )
        # Without bind, the API server reads the role to compare: a missing one is an error.
        return exists and self.holds(who, self.role_rules(role_ref, namespace), namespace)
