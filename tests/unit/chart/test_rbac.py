"""The chart's RBAC, evaluated: what the compiler and the tenant accounts may do, and that
provisioning, in its order, needs nothing the chart does not grant.

The compiler's rights inside a tenant namespace come from the tenant-compiler ClusterRole,
which provisioning binds there right after creating the namespace; every other tenant role is
bound by the compiler, which holds ``bind`` on exactly those four ClusterRoles."""

from __future__ import annotations

from typing import Any

import pytest

from compiler.tenants.provisioning import (
    ACCOUNT_ROLES,
    ARTIFACT_CREDENTIALS_SECRET,
    EXECUTOR_TOKEN_SECRET,
    ProvisioningSpec,
    obsolete_objects,
    tenant_objects,
)
from compiler.tracking.accounts import SECRET_NAME as TRACKING_SECRET
from shared.config import Settings
from shared.k8s_objects import KINDS
from tests.unit.chart._rbac import RBAC_GROUP, Account, Rbac, Request, binding
from tests.unit.chart._render import COMPILER, RELEASE, STAGECTL, compiler_env, rendered

TENANT = "acme"
EVENTS = "kubeopera-pipeline-events"
DATA = "kubeopera-data-acme"
OTHER_DATA = "kubeopera-data-globex"
ELSEWHERE = ["default", "kube-system", "workflow-manager", "kubeopera-serve-acme", "argo"]
EVERYWHERE = [*ELSEWHERE, DATA, OTHER_DATA]
READS = ("get", "list", "watch")
WRITES = ("create", "update", "patch", "delete", "deletecollection")


def spec() -> ProvisioningSpec:
    env = compiler_env(rendered())
    return ProvisioningSpec.from_settings(
        Settings(DATABASE_URL="postgresql://u@h/db", ARTIFACT_BUCKET="bucket", **env)
    )


def plural(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["apiVersion"].rpartition("/")[0], KINDS[(obj["apiVersion"], obj["kind"])].plural


def provisioned(tenant: str = TENANT) -> Rbac:
    """The chart and a provisioned tenant namespace's bindings."""
    return Rbac(rendered()).with_objects(tenant_objects(tenant, spec()))


def walk(objects: list[dict[str, Any]]) -> Rbac:
    """Apply ``objects`` in order as the compiler does (read, create, update; bindings pass the
    escalation check), each in force once applied. AssertionError at the first refusal."""
    world = Rbac(rendered())
    for obj in objects:
        group, resource = plural(obj)
        namespace, name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
        for verb, named in (("get", name), ("create", None), ("update", name)):
            request = Request(verb, group, resource, namespace, named)
            assert world.allows(COMPILER, request), (obj["kind"], name, verb)
        if obj["kind"] == "RoleBinding":
            assert world.may_bind(COMPILER, obj), name
            assert world.allows(COMPILER, Request("delete", group, resource, namespace, name))
        world = world.with_objects([obj])
    return world


# --- the compiler -----------------------------------------------------------------------------
def test_provisioning_in_its_order_needs_nothing_the_chart_does_not_grant() -> None:
    world = walk(tenant_objects(TENANT, spec()))
    allows = world.allows
    # The hash annotation, the schema-1 Roles it deletes, the credentials Secret it writes.
    assert allows(COMPILER, Request("patch", "", "namespaces", None, DATA))
    for api_version, kind, namespace, name in obsolete_objects(TENANT):
        resource = KINDS[(api_version, kind)].plural
        assert allows(COMPILER, Request("delete", RBAC_GROUP, resource, namespace, name))
    for verb in ("get", "update"):
        assert allows(COMPILER, Request(verb, "", "secrets", DATA, ARTIFACT_CREDENTIALS_SECRET))
    assert allows(COMPILER, Request("create", "", "secrets", DATA))
    # Pipelines: apply, list by label and collect templates; start runs.
    for verb in ("get", "list", "create", "update", "delete"):
        name = None if verb == "list" else "p-1-v1"
        assert allows(COMPILER, Request(verb, "argoproj.io", "workflowtemplates", DATA, name))
    # Schedules: each pipeline's CronWorkflow (saves, pauses, the drift reconciler).
    for verb in ("get", "list", "create", "update", "delete"):
        name = None if verb == "list" else "p-1"
        assert allows(COMPILER, Request(verb, "argoproj.io", "cronworkflows", DATA, name))
    assert allows(COMPILER, Request("create", "argoproj.io", "workflows", DATA))
    # Where the API server is, and Argo's linter behind the service proxy.
    assert allows(COMPILER, Request("get", "", "services", "default", "kubernetes"))
    assert allows(COMPILER, Request("list", "discovery.k8s.io", "endpointslices", "default"))
    assert allows(
        COMPILER,
        Request(
            "create", "", "services/proxy", "kubeopera-argo-data", "https:argo-data-server:2746"
        ),
    )


def test_the_compiler_binds_itself_before_anything_else_in_the_namespace() -> None:
    namespace, own_binding, *rest = tenant_objects(TENANT, spec())
    assert own_binding["kind"] == "RoleBinding"
    with pytest.raises(AssertionError, match="NetworkPolicy"):
        walk([namespace, *rest])


def test_the_compiler_reads_no_secret_and_creates_no_pod_anywhere_by_itself() -> None:
    world = Rbac(rendered())
    for namespace in [*EVERYWHERE, None]:
        for verb in READS:
            assert not world.allows(COMPILER, Request(verb, "", "secrets", namespace))
            assert not world.allows(COMPILER, Request(verb, "", "secrets", namespace, "any"))
        for verb in WRITES:
            assert not world.allows(COMPILER, Request(verb, "", "pods", namespace))
            assert not world.allows(COMPILER, Request(verb, "", "pods", namespace, "any"))


def test_in_a_tenant_namespace_it_manages_the_secrets_and_the_data_secrets() -> None:
    """Its Secrets (the storage credentials, the executor's token, the tenant's MLflow account),
    and the tenant's data secrets, named by the tenant: written, read, listed (by label) and
    deleted. Never watched, never patched."""
    world = provisioned()
    for name in (ARTIFACT_CREDENTIALS_SECRET, EXECUTOR_TOKEN_SECRET, TRACKING_SECRET, "warehouse"):
        for verb in ("get", "update", "delete"):
            assert world.allows(COMPILER, Request(verb, "", "secrets", DATA, name))
    for verb in ("list", "create"):
        assert world.allows(COMPILER, Request(verb, "", "secrets", DATA))
    for verb in ("watch", "patch", "deletecollection"):
        assert not world.allows(COMPILER, Request(verb, "", "secrets", DATA))
    for verb in (*READS, *WRITES):
        assert not world.allows(COMPILER, Request(verb, "", "pods", DATA))
        assert not world.allows(COMPILER, Request(verb, "", "pods/exec", DATA, "p"))
    # and nothing of the tenant's namespace reaches the next tenant's
    assert not world.allows(
        COMPILER, Request("get", "", "secrets", OTHER_DATA, EXECUTOR_TOKEN_SECRET)
    )
    assert not world.allows(COMPILER, Request("create", "", "configmaps", OTHER_DATA))


def test_the_compiler_creates_no_role_and_binds_no_other_role() -> None:
    world = provisioned().with_objects(
        [
            {
                "apiVersion": f"{RBAC_GROUP}/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "cluster-admin"},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
            }
        ]
    )
    for namespace in [*EVERYWHERE, None]:
        for resource in ("roles", "clusterroles", "clusterrolebindings"):
            for verb in ("create", "update", "patch", "escalate"):
                assert not world.allows(COMPILER, Request(verb, RBAC_GROUP, resource, namespace))
    # A role it holds in full it may bind (Kubernetes' rule), which grants it nothing new.
    assert world.may_bind(
        COMPILER, binding(DATA, "x", cluster_role=f"{RELEASE}-compiler", who=COMPILER)
    )
    for role in ("cluster-admin", f"{RELEASE}-apiserver", f"{RELEASE}-watcher"):
        assert not world.may_bind(COMPILER, binding(DATA, "x", cluster_role=role, who=COMPILER))
    for role in ("compiler", "executor", "spark", "training", "sensor"):
        tenant_role = f"{RELEASE}-tenant-{role}"
        assert world.may_bind(COMPILER, binding(DATA, "x", cluster_role=tenant_role, who=COMPILER))
    roles = binding(DATA, "x", cluster_role="anything", who=COMPILER, kind="Role")
    assert not world.may_bind(COMPILER, roles)


def test_cluster_wide_the_compiler_holds_namespaces_bindings_and_bind_only() -> None:
    """Its ClusterRole, rule by rule: nothing else is cluster-wide."""
    world = Rbac(rendered())
    rules = world.cluster_roles[f"{RELEASE}-compiler"]
    held = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert held == {
        ("", "namespaces"),
        (RBAC_GROUP, "rolebindings"),
        (RBAC_GROUP, "clusterroles"),
    }
    (bind,) = [rule for rule in rules if rule["resources"] == ["clusterroles"]]
    assert bind["verbs"] == ["bind"]
    assert sorted(bind["resourceNames"]) == [
        f"{RELEASE}-tenant-{role}"
        for role in ("compiler", "executor", "sensor", "spark", "training")
    ]


# --- the tenant accounts ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("account", "rules"),
    [
        (
            "kubeopera-executor",
            [
                {
                    "apiGroups": ["argoproj.io"],
                    "resources": ["workflowtaskresults"],
                    "verbs": ["create", "patch"],
                }
            ],
        ),
        (
            "kubeopera-spark",
            [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
                    "verbs": [
                        "create",
                        "delete",
                        "deletecollection",
                        "get",
                        "list",
                        "patch",
                        "watch",
                    ],
                }
            ],
        ),
        (
            "kubeopera-training",
            [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "services"],
                    "verbs": ["create", "delete", "get", "list", "watch"],
                }
            ],
        ),
    ],
)
def test_each_api_calling_account_gets_its_least_in_its_namespace_only(
    account: str, rules: list[dict[str, Any]]
) -> None:
    world = provisioned()
    assert world.cluster_roles[f"{RELEASE}-tenant-{ACCOUNT_ROLES[account]}"] == rules
    who = Account(DATA, account)
    rule = rules[0]
    for resource in rule["resources"]:
        for verb in rule["verbs"]:
            assert world.allows(who, Request(verb, rule["apiGroups"][0], resource, DATA))
            assert not world.allows(who, Request(verb, rule["apiGroups"][0], resource, OTHER_DATA))
    assert not world.allows(who, Request("get", "", "secrets", DATA, EXECUTOR_TOKEN_SECRET))
    # the same account name in another tenant's namespace is another account
    assert not world.allows(Account(OTHER_DATA, account), Request("get", "", "pods", DATA))


def test_the_workload_account_gets_nothing() -> None:
    world = provisioned()
    workload = Account(DATA, "kubeopera-workload")
    assert list(world.rules_for(workload, DATA)) == []


# --- event triggers ---------------------------------------------------------------------------
EVENT_OBJECTS = [
    ("argoproj.io", "eventsources"),
    ("argoproj.io", "sensors"),
    ("", "secrets"),
    ("networking.k8s.io", "ingresses"),
]


def test_in_the_events_namespace_the_compiler_keeps_its_event_objects_by_name() -> None:
    world = provisioned()
    for group, resource in EVENT_OBJECTS:
        for verb in ("get", "create", "update", "delete"):
            name = None if verb == "create" else "p-1"
            assert world.allows(COMPILER, Request(verb, group, resource, EVENTS, name)), resource
        # Secrets are read back by name only: no other Secret is read. The other objects are
        # listed, by label, to find a deleted pipeline's (the drift reconciler's orphans).
        listed = resource != "secrets"
        assert world.allows(COMPILER, Request("list", group, resource, EVENTS)) is listed
        assert not world.allows(COMPILER, Request("watch", group, resource, EVENTS))
    for group, resource in EVENT_OBJECTS:  # and nowhere else
        for namespace in (*ELSEWHERE, OTHER_DATA):
            assert not world.allows(COMPILER, Request("create", group, resource, namespace))
    for verb in (*READS, *WRITES):
        assert not world.allows(COMPILER, Request(verb, "", "pods", EVENTS))
    assert not world.allows(COMPILER, Request("create", RBAC_GROUP, "roles", EVENTS))


def sensor_of(tenant: str) -> Account:
    return Account(EVENTS, f"kubeopera-sensor-{tenant}")


def test_a_tenants_sensors_may_only_submit_workflows_in_its_namespace() -> None:
    world = provisioned().with_objects(tenant_objects("globex", spec()))
    sensor = sensor_of(TENANT)
    assert world.allows(sensor, Request("create", "argoproj.io", "workflows", DATA))
    assert world.allows(sensor, Request("list", "argoproj.io", "workflows", DATA))
    assert world.allows(sensor, Request("get", "argoproj.io", "workflowtemplates", DATA, "p-v1"))
    for verb in ("get", "update", "patch", "delete", "watch"):
        assert not world.allows(sensor, Request(verb, "argoproj.io", "workflows", DATA, "w"))
    for verb in WRITES:
        assert not world.allows(sensor, Request(verb, "argoproj.io", "workflowtemplates", DATA))
        assert not world.allows(sensor, Request(verb, "", "pods", DATA))
    assert not world.allows(sensor, Request("get", "", "secrets", DATA, EXECUTOR_TOKEN_SECRET))
    # Not in another tenant's namespace, nor its own events namespace, nor anywhere else.
    for namespace in (OTHER_DATA, EVENTS, *ELSEWHERE):
        assert not world.allows(sensor, Request("create", "argoproj.io", "workflows", namespace))
    assert world.allows(
        sensor_of("globex"), Request("create", "argoproj.io", "workflows", OTHER_DATA)
    )
    assert not world.allows(
        sensor_of("globex"), Request("create", "argoproj.io", "workflows", DATA)
    )


# --- the stage controller ---------------------------------------------------------------------
def test_the_stage_controller_watches_workflows_and_completes_nodes_through_the_proxy() -> None:
    """What wm-stagectl calls on the host (its informer, set and resume through the service
    proxy, its Lease) is granted; writing workflows, templates or pods is not, and of Secrets
    it may read, change and delete only the model reader's key by name (creating one is
    confined to kubeopera-serve-* by admission: test_serving_rights.py)."""
    world = Rbac(rendered())
    argo = "argoproj.io"
    for verb in READS:
        assert world.allows(STAGECTL, Request(verb, argo, "workflows", None, None))
    proxy = Request(
        "update", "", "services/proxy", "kubeopera-argo-data", "https:argo-data-server:2746"
    )
    assert world.allows(STAGECTL, proxy)
    lease = Request("update", "coordination.k8s.io", "leases", "workflow-manager", "wm-stagectl")
    assert world.allows(STAGECTL, lease)
    for namespace in EVERYWHERE:
        for verb in WRITES:
            for group, resource in (
                (argo, "workflows"),
                (argo, "workflowtemplates"),
                ("", "pods"),
            ):
                assert not world.allows(STAGECTL, Request(verb, group, resource, namespace, None))
        for verb in ("get", "list", "watch", "update", "delete"):
            assert not world.allows(STAGECTL, Request(verb, "", "secrets", namespace, "any"))
