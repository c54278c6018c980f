"""The chart's ValidatingAdmissionPolicies, their CEL evaluated by cel-python against admission
requests: the compiler writes only in kubeopera-data-* (and its own Leases), stagectl only in
kubeopera-serve-*, and nobody else is touched."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.chart._admission import Admission, request
from tests.unit.chart._rbac import Account
from tests.unit.chart._render import COMPILER, RELEASE_NAMESPACE, STAGECTL, rendered

KINDS = {
    "pods": ("", "v1", "Pod"),
    "services": ("", "v1", "Service"),
    "configmaps": ("", "v1", "ConfigMap"),
    "secrets": ("", "v1", "Secret"),
    "rolebindings": ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    "networkpolicies": ("networking.k8s.io", "v1", "NetworkPolicy"),
    "workflowtemplates": ("argoproj.io", "v1alpha1", "WorkflowTemplate"),
    "leases": ("coordination.k8s.io", "v1", "Lease"),
    "eventsources": ("argoproj.io", "v1alpha1", "EventSource"),
    "sensors": ("argoproj.io", "v1alpha1", "Sensor"),
    "serviceaccounts": ("", "v1", "ServiceAccount"),
    "ingresses": ("networking.k8s.io", "v1", "Ingress"),
    "namespaces": ("", "v1", "Namespace"),
    "clusterrolebindings": ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
}


@pytest.fixture(scope="module")
def admission() -> Admission:
    return Admission(rendered())


def write(
    who: Account | str,
    operation: str,
    resource: str,
    namespace: str,
    name: str = "x",
    sub_resource: str = "",
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """(request, object, oldObject) of a write as the API server admits it."""
    group, version, kind = KINDS[resource]
    metadata: dict[str, Any] = {"name": name}
    if namespace and resource != "namespaces":
        metadata["namespace"] = namespace
    body = {"apiVersion": f"{group}/{version}".lstrip("/"), "kind": kind, "metadata": metadata}
    req = request(
        who,
        operation,
        group=group,
        version=version,
        resource=resource,
        kind=kind,
        namespace="" if resource == "namespaces" else namespace,
        name=name,
        sub_resource=sub_resource,
    )
    return (
        req,
        None if operation == "DELETE" else body,
        None if operation == "CREATE" else body,
    )


def admitted(admission: Admission, *args: Any, **kwargs: Any) -> bool:
    req, obj, old = write(*args, **kwargs)
    return admission.admits(req, obj=obj, old=old)


def test_both_policies_are_bound_to_deny() -> None:
    assert [p["name"] for p in Admission(rendered()).policies] == [
        "wm-compiler-writes",
        "wm-stagectl-writes",
    ]


@pytest.mark.parametrize("resource", ["pods", "rolebindings", "configmaps", "secrets"])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_the_compiler_writes_in_tenant_namespaces(
    admission: Admission, resource: str, operation: str
) -> None:
    assert admitted(admission, COMPILER, operation, resource, "kubeopera-data-acme")


@pytest.mark.parametrize("resource", ["pods", "rolebindings", "configmaps", "workflowtemplates"])
@pytest.mark.parametrize(
    "namespace",
    ["default", "kube-system", "kubeopera-serve-acme", RELEASE_NAMESPACE, "kubeopera-data"],
)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_the_compiler_writes_nowhere_else(
    admission: Admission, resource: str, namespace: str, operation: str
) -> None:
    req, obj, old = write(COMPILER, operation, resource, namespace)
    (denial,) = admission.review(req, obj=obj, old=old)
    assert denial == f"wm-compiler may write only in kubeopera-data-* namespaces, not {namespace}"


EVENTS = "kubeopera-pipeline-events"


@pytest.mark.parametrize(
    "resource", ["eventsources", "sensors", "secrets", "serviceaccounts", "ingresses"]
)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_the_compiler_writes_its_event_objects_in_the_events_namespace(
    admission: Admission, resource: str, operation: str
) -> None:
    assert admitted(admission, COMPILER, operation, resource, EVENTS)
    for namespace in ("default", "kube-system", "kubeopera-pipeline-eventsx"):
        assert not admitted(admission, COMPILER, operation, resource, namespace)


@pytest.mark.parametrize(
    "resource", ["pods", "rolebindings", "configmaps", "workflowtemplates", "services"]
)
def test_and_nothing_else_there(admission: Admission, resource: str) -> None:
    for operation in ("CREATE", "UPDATE", "DELETE"):
        assert not admitted(admission, COMPILER, operation, resource, EVENTS)
    assert not admitted(admission, COMPILER, "UPDATE", "sensors", EVENTS, sub_resource="status")
    # and stagectl, confined elsewhere, gets nothing there
    assert not admitted(admission, STAGECTL, "CREATE", "sensors", EVENTS)


def test_nor_through_a_subresource(admission: Admission) -> None:
    assert not admitted(admission, COMPILER, "UPDATE", "pods", "kube-system", sub_resource="status")
    assert admitted(
        admission, COMPILER, "UPDATE", "pods", "kubeopera-data-acme", sub_resource="status"
    )


def test_the_compiler_creates_tenant_namespaces_only(admission: Admission) -> None:
    assert admitted(admission, COMPILER, "CREATE", "namespaces", "", name="kubeopera-data-x")
    assert admitted(admission, COMPILER, "UPDATE", "namespaces", "", name="kubeopera-data-x")
    for name in ("evil", "kube-system", "kubeopera-serve-x", "data-kubeopera-data-x"):
        for operation in ("CREATE", "UPDATE", "DELETE"):
            assert not admitted(admission, COMPILER, operation, "namespaces", "", name=name)
    # a delete is judged by the old object, there being no new one
    assert admitted(admission, COMPILER, "DELETE", "namespaces", "", name="kubeopera-data-x")


def test_no_other_cluster_scoped_write(admission: Admission) -> None:
    req, obj, old = write(COMPILER, "CREATE", "clusterrolebindings", "")
    (denial,) = admission.review(req, obj=obj, old=old)
    assert denial.endswith("not the cluster-scoped clusterrolebindings")


def test_its_own_leases_stay_writable(admission: Admission) -> None:
    for operation in ("CREATE", "UPDATE", "DELETE"):
        assert admitted(admission, COMPILER, operation, "leases", RELEASE_NAMESPACE, "wm-compiler")
    assert not admitted(admission, COMPILER, "UPDATE", "leases", "kube-system", "kube-scheduler")


def test_stagectl_writes_in_serving_namespaces_only(admission: Admission) -> None:
    assert admitted(admission, STAGECTL, "CREATE", "configmaps", "kubeopera-serve-acme")
    assert admitted(admission, STAGECTL, "UPDATE", "leases", RELEASE_NAMESPACE)
    assert admitted(admission, STAGECTL, "CREATE", "namespaces", "", name="kubeopera-serve-acme")
    for namespace in ("kubeopera-data-acme", "default"):
        assert not admitted(admission, STAGECTL, "CREATE", "configmaps", namespace)


@pytest.mark.parametrize(
    "who",
    [
        Account(RELEASE_NAMESPACE, "wm-apiserver"),
        Account("other", "wm-compiler"),  # the same name in another namespace
        Account("kube-system", "generic-garbage-collector"),
        "kubernetes-admin",
        "system:serviceaccount:workflow-manager:wm-compiler-2",
    ],
    ids=str,
)
def test_nobody_else_is_affected(admission: Admission, who: Account | str) -> None:
    for namespace in ("default", "kube-system"):
        assert admitted(admission, who, "CREATE", "pods", namespace)
    assert admitted(admission, who, "CREATE", "namespaces", "", name="evil")


def test_reads_and_connections_are_not_matched(admission: Admission) -> None:
    """Admission never sees reads; the policy leaves CONNECT (the Argo linter's service-proxy
    call into the Argo server's namespace) to RBAC."""
    req, _, _ = write(
        COMPILER, "CONNECT", "services", "argo", "https:argo-server:2746", sub_resource="proxy"
    )
    assert admission.admits(req)
