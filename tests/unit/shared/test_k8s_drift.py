"""tenants.drift: whether a live object left what we applied, and the body that repairs it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from compiler.tenants.provisioning import tenant_objects
from shared.k8s_drift import drifted, orphaned, recreated, replacement
from tests.unit.compiler._specs import NAMESPACE, SPEC, TENANT, one


def as_served(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server would answer for ``obj``: server metadata and fields added."""
    served = copy.deepcopy(obj)
    served["metadata"].update(
        uid="u-1",
        resourceVersion="42",
        creationTimestamp="2025-01-01T00:00:00Z",
        managedFields=[{"manager": "someone"}],
    )
    served["metadata"]["labels"]["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    if obj["kind"] == "Namespace":
        served["spec"] = {"finalizers": ["kubernetes"]}
        served["status"] = {"phase": "Active"}
    if obj["kind"] == "Secret":
        served["data"] = {"token": "dG9rZW4=", "namespace": "bnM="}
    return served


@pytest.mark.parametrize("obj", tenant_objects(TENANT, SPEC), ids=lambda o: o["kind"])
def test_an_object_as_served_has_not_drifted(obj: dict[str, Any]) -> None:
    assert not drifted(obj, as_served(obj))


def _edit_spec(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        target = obj
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def _drop(path: list[Any]) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        target = obj
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return edit


DRIFTS: list[tuple[str, str, Callable[[dict[str, Any]], None]]] = [
    ("ResourceQuota", "kubeopera-quota", _edit_spec(["spec", "hard", "pods"], "500")),
    ("ResourceQuota", "kubeopera-quota", _drop(["spec", "hard", "requests.nvidia.com/gpu"])),
    ("ResourceQuota", "kubeopera-quota", _edit_spec(["spec", "hard", "extra"], "1")),
    ("LimitRange", "kubeopera-limits", _edit_spec(["spec", "limits", 0, "max", "cpu"], "64")),
    ("NetworkPolicy", "kubeopera-egress", _edit_spec(["spec", "egress"], [{}])),
    ("NetworkPolicy", "kubeopera-egress", _edit_spec(["spec", "policyTypes"], ["Ingress"])),
    ("NetworkPolicy", "kubeopera-egress", _drop(["spec", "ingress"])),
    ("ServiceAccount", "kubeopera-workload", _edit_spec(["automountServiceAccountToken"], True)),
    ("ServiceAccount", "kubeopera-workload", _drop(["automountServiceAccountToken"])),
    (
        "ServiceAccount",
        "kubeopera-executor",
        _drop(["metadata", "annotations", "workflows.argoproj.io/service-account-token.name"]),
    ),
    ("RoleBinding", "kubeopera-spark", _edit_spec(["subjects", 0, "name"], "default")),
    ("RoleBinding", "kubeopera-spark", _edit_spec(["roleRef", "name"], "admin")),
    ("RoleBinding", "kubeopera-compiler", _edit_spec(["roleRef", "kind"], "Role")),
    ("RoleBinding", "kubeopera-compiler", _edit_spec(["subjects", 0, "namespace"], "x")),
    ("Secret", "kubeopera-executor.service-account-token", _edit_spec(["type"], "Opaque")),
    ("ConfigMap", "artifact-repositories", _edit_spec(["data", "default-v1"], "s3: {}")),
    ("ConfigMap", "artifact-repositories", _edit_spec(["data", "other"], "x")),
    (
        "ConfigMap",
        "artifact-repositories",
        _edit_spec(
            ["metadata", "annotations", "workflows.argoproj.io/default-artifact-repository"], "x"
        ),
    ),
    ("Namespace", NAMESPACE, _edit_spec(["metadata", "labels", "kubeopera.io/tenant"], "evil")),
    (
        "Namespace",
        NAMESPACE,
        _drop(["metadata", "labels", "pod-security.kubernetes.io/enforce"]),
    ),
]


@pytest.mark.parametrize(("kind", "name", "edit"), DRIFTS)
def test_an_edit_of_a_field_we_own_is_drift(
    kind: str, name: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    desired = one(kind, name)
    live = as_served(desired)
    edit(live)
    assert drifted(desired, live)
    assert not drifted(desired, replacement(desired, live))


NOT_DRIFTS: list[tuple[str, str, Callable[[dict[str, Any]], None]]] = [
    ("ConfigMap", "artifact-repositories", _edit_spec(["metadata", "labels", "team"], "a")),
    ("ConfigMap", "artifact-repositories", _edit_spec(["metadata", "annotations", "n"], "b")),
    ("Namespace", NAMESPACE, _edit_spec(["spec", "finalizers"], [])),
    ("Secret", "kubeopera-executor.service-account-token", _edit_spec(["data"], {})),
    ("ResourceQuota", "kubeopera-quota", _edit_spec(["status"], {"used": {"pods": "3"}})),
    # the API server's canonical form of the same quantity
    ("ResourceQuota", "kubeopera-quota", _edit_spec(["spec", "hard", "requests.cpu"], "8000m")),
    (
        "LimitRange",
        "kubeopera-limits",
        _edit_spec(["spec", "limits", 0, "max", "memory"], "8192Mi"),
    ),
]


@pytest.mark.parametrize(("kind", "name", "edit"), NOT_DRIFTS)
def test_what_others_own_is_not_drift(
    kind: str, name: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    desired = one(kind, name)
    live = as_served(desired)
    edit(live)
    assert not drifted(desired, live)


@pytest.mark.parametrize(("kind", "name", "edit"), DRIFTS + NOT_DRIFTS)
def test_only_a_changed_role_ref_needs_the_object_created_again(
    kind: str, name: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    """The API server refuses to change a binding's roleRef; everything else is replaced."""
    desired = one(kind, name)
    live = as_served(desired)
    edit(live)
    assert recreated(desired, live) == (live.get("roleRef") != desired.get("roleRef"))


def test_a_binding_of_schema_1_is_created_again() -> None:
    desired = one("RoleBinding", "kubeopera-executor")
    live = as_served(desired)
    live["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "x"}
    assert recreated(desired, live)
    assert not recreated(desired, as_served(desired))


def test_quantities_compare_by_value_only_in_quotas_and_limits() -> None:
    desired = {"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"size": "1Gi"}}
    assert drifted(desired, {**desired, "data": {"size": "1024Mi"}})
    assert drifted(desired, {**desired, "data": {"size": 1}})


def test_a_replacement_keeps_theirs_and_puts_back_ours() -> None:
    desired = one("Namespace", NAMESPACE)
    live = as_served(desired)
    live["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "privileged"
    live["metadata"]["labels"]["team"] = "data"
    live["metadata"]["annotations"] = {"kubeopera.io/provisioning-spec-hash": "abc"}
    body = replacement(desired, live)
    assert body["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert body["metadata"]["labels"]["team"] == "data"
    assert body["metadata"]["annotations"] == {"kubeopera.io/provisioning-spec-hash": "abc"}
    assert body["metadata"]["resourceVersion"] == "42"
    assert body["metadata"]["uid"] == "u-1"
    assert "managedFields" not in body["metadata"]
    assert body["spec"] == {"finalizers": ["kubernetes"]}
    assert "status" not in body
    assert live["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


# --- orphans --------------------------------------------------------------------------------
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(minutes=10)


def owned(owner: str | None, created: str | None, name: str = "x") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if owner is not None:
        metadata["labels"] = {"kubeopera.io/pipeline-id": owner}
    if created is not None:
        metadata["creationTimestamp"] = created
    return {"metadata": metadata}


@pytest.mark.parametrize(
    ("item", "orphan"),
    [
        (owned("gone", "2026-06-01T11:49:59Z"), True),  # older than the grace
        (owned("gone", "2026-06-01T11:50:00Z"), False),  # exactly the grace: maybe a save's
        (owned("gone", "2026-06-01T11:59:00Z"), False),  # young: a save not yet committed
        (owned("alive", "2020-01-01T00:00:00Z"), False),  # its pipeline is recorded
        (owned(None, "2020-01-01T00:00:00Z"), False),  # not a pipeline's
        (owned("gone", None), False),  # age unknown: kept
        (owned("gone", "yesterday"), False),
        (owned("gone", "2020-01-01T00:00:00"), False),  # no zone: cannot be compared
    ],
)
def test_orphans_are_old_objects_of_pipelines_not_recorded(
    item: dict[str, Any], orphan: bool
) -> None:
    found = orphaned([item], {"alive"}, label="kubeopera.io/pipeline-id", now=NOW, grace=GRACE)
    assert (found == [item]) is orphan
