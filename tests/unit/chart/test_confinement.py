"""RBAC and the admission policy together: the compiler can neither read a Secret nor create a
pod or a RoleBinding outside kubeopera-data-*, whatever bindings it creates for itself.

``reachable`` gives the compiler every RoleBinding it could create for itself, to any role of
the cluster, in any namespace, as long as RBAC lets it create the binding, the escalation check
lets it refer to the role, and the admission policy admits the write; again and again until
nothing more can be gained. Binding a role to another subject gains it no more: it cannot act
as another account (no token requests, no Secrets outside tenant namespaces, no impersonation).
The emulator enforces neither RBAC nor admission, so this evaluation is the proof."""

from __future__ import annotations

from typing import Any

import pytest

from compiler.tenants.provisioning import tenant_objects
from tests.unit.chart._admission import Admission, request
from tests.unit.chart._rbac import RBAC_GROUP, Account, Rbac, Request, binding
from tests.unit.chart._render import COMPILER, RELEASE_NAMESPACE, rendered
from tests.unit.chart.test_rbac import plural, spec

DATA = "kubeopera-data-acme"
EVENTS = "kubeopera-pipeline-events"
OUTSIDE = ["default", "kube-system", RELEASE_NAMESPACE, "kubeopera-serve-acme", "argo"]
NAMESPACES = [*OUTSIDE, EVENTS, DATA]
# Roles a real cluster has besides the chart's: a wildcard one, and a narrow one.
BUILT_IN = [
    {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "cluster-admin"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    },
    {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "secret-reader"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}],
    },
]


def admission_of(who: Account, obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    group, resource = plural(obj)
    namespace = obj["metadata"].get("namespace", "")
    req = request(
        who,
        "CREATE",
        group=group,
        version=obj["apiVersion"].rpartition("/")[2],
        resource=resource,
        kind=obj["kind"],
        namespace=namespace,
        name=obj["metadata"]["name"],
    )
    return req, obj


def reachable(world: Rbac, admission: Admission | None, who: Account) -> Rbac:
    """``world`` with every binding ``who`` could create for itself (admission None: RBAC only)."""
    while True:
        gained = []
        for namespace in NAMESPACES:
            if not world.allows(who, Request("create", RBAC_GROUP, "rolebindings", namespace)):
                continue
            roles = [(role, "ClusterRole") for role in sorted(world.cluster_roles)]
            roles += [(role, "Role") for ns, role in sorted(world.roles) if ns == namespace]
            for role, kind in roles:
                candidate = binding(
                    namespace, f"gain-{kind}-{role}", cluster_role=role, who=who, kind=kind
                )
                if candidate in world.manifests or not world.may_bind(who, candidate):
                    continue
                if admission is not None:
                    req, obj = admission_of(who, candidate)
                    if not admission.admits(req, obj=obj):
                        continue
                gained.append(candidate)
        if not gained:
            return world
        world = world.with_objects(gained)


@pytest.fixture(scope="module")
def admission() -> Admission:
    return Admission(rendered())


def chart_world() -> Rbac:
    return Rbac([*rendered(), *BUILT_IN]).with_objects(tenant_objects("acme", spec()))


def creates(world: Rbac, admission: Admission, resource: str, namespace: str) -> bool:
    group = RBAC_GROUP if resource == "rolebindings" else ""
    kind = {"pods": "Pod", "rolebindings": "RoleBinding", "secrets": "Secret"}[resource]
    if not world.allows(COMPILER, Request("create", group, resource, namespace)):
        return False
    req = request(
        COMPILER,
        "CREATE",
        group=group,
        version="v1",
        resource=resource,
        kind=kind,
        namespace=namespace,
        name="x",
    )
    obj = {"kind": kind, "metadata": {"name": "x", "namespace": namespace}}
    return admission.admits(req, obj=obj)


def test_the_compiler_reads_no_secret_outside_tenant_namespaces(admission: Admission) -> None:
    world = reachable(chart_world(), admission, COMPILER)
    for namespace in [*OUTSIDE, None]:
        for verb in ("get", "list", "watch"):
            for name in (None, "any", "kubeopera-artifact-credentials"):
                assert not world.allows(COMPILER, Request(verb, "", "secrets", namespace, name))


@pytest.mark.parametrize("resource", ["pods", "rolebindings"])
def test_the_compiler_creates_no_pod_or_binding_outside_tenant_namespaces(
    admission: Admission, resource: str
) -> None:
    world = reachable(chart_world(), admission, COMPILER)
    for namespace in OUTSIDE:
        assert not creates(world, admission, resource, namespace), namespace


def test_within_a_tenant_namespace_it_gains_only_the_tenant_roles(admission: Admission) -> None:
    """It may give itself Spark's rights there (so create pods): the tenant roles, and roles
    granting nothing it does not hold there already (``secret-reader``: it reads and lists the
    namespace's Secrets for the tenant's data secrets), no other."""
    world = reachable(chart_world(), admission, COMPILER)
    gained = {
        (b["metadata"]["namespace"], b["roleRef"]["name"])
        for b in world.bindings
        if b["metadata"]["name"].startswith("gain-")
    }
    assert {role for _, role in gained} <= {
        "wm-compiler",
        "wm-tenant-compiler",
        "wm-tenant-executor",
        "wm-tenant-spark",
        "wm-tenant-training",
        "wm-tenant-sensor",
        "secret-reader",
    }
    assert {namespace for namespace, _ in gained} == {DATA}
    assert creates(world, admission, "pods", DATA)
    assert world.allows(COMPILER, Request("list", "", "secrets", DATA))


def test_without_the_policy_rbac_alone_would_let_it_out() -> None:
    """Why the chart ships the policy: RBAC cannot name a namespace prefix, so the compiler's
    right to bind the tenant roles holds in every namespace."""
    world = reachable(chart_world(), None, COMPILER)
    assert world.allows(COMPILER, Request("create", "", "pods", "kube-system"))
    assert world.allows(
        COMPILER, Request("get", "", "secrets", "kube-system", "kubeopera-artifact-credentials")
    )
    assert world.allows(COMPILER, Request("list", "", "secrets", "kube-system"))


def test_every_write_of_provisioning_is_admitted(admission: Admission) -> None:
    for obj in tenant_objects("acme", spec()):
        req, body = admission_of(COMPILER, obj)
        assert admission.admits(req, obj=body), obj["kind"]


def test_in_the_events_namespace_it_gains_nothing(admission: Admission) -> None:
    """Its event objects' Secrets it reads by name; it can neither list them nor bind itself
    anything there, nor create a pod."""
    world = reachable(chart_world(), admission, COMPILER)
    assert world.allows(COMPILER, Request("get", "", "secrets", EVENTS, "p-1-webhooks"))
    for verb in ("list", "watch"):
        assert not world.allows(COMPILER, Request(verb, "", "secrets", EVENTS))
    for resource in ("pods", "rolebindings"):
        assert not creates(world, admission, resource, EVENTS)
    gained = [b for b in world.bindings if b["metadata"]["name"].startswith("gain-")]
    assert not any(b["metadata"]["namespace"] == EVENTS for b in gained)
