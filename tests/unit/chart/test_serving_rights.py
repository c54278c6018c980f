"""The stage controller's serving rights: RBAC and the admission policy together let it create,
change and delete every object its deployment reconciler writes (stagectl/serving/manifests.py,
both route forms) in a tenant's kubeopera-serve-<tenant>, and the gateway-api form's
ReferenceGrants only in the Knative gateway's and the token check's namespaces; the same kinds
anywhere else are refused, and it binds itself nothing."""

from __future__ import annotations

from typing import Any

import pytest

from stagectl.serving import manifests
from stagectl.serving.params import Deployment, ModelServing, ServingPlatform
from tests.unit.chart._admission import Admission, request
from tests.unit.chart._rbac import RBAC_GROUP, Rbac, Request
from tests.unit.chart._render import RELEASE_NAMESPACE, STAGECTL, rendered
from tests.unit.chart.test_rbac import plural

AUTH_URL = (
    "http://workflow-manager-inference-auth.workflow-manager.svc:8120/internal/v1/inference-auth"
)
FORMS = {
    route: ServingPlatform(
        bucket="wm-artifacts", domain="models.example.com", auth_url=AUTH_URL, route=route
    )
    for route in ("ingress-nginx", "gateway-api")
}
DEPLOYMENT = Deployment(
    "acme", "churn", "staging", "tenants/acme/models/churn/3/", ModelServing("sklearn")
)
OUTSIDE = ["default", "kube-system", "kubeopera-data-acme", "argo", RELEASE_NAMESPACE]


def written(platform: ServingPlatform) -> list[dict[str, Any]]:
    """Every object the reconciler writes for one tenant and one deployment."""
    return [
        *manifests.namespace_objects("acme", platform),
        manifests.storage_secret("acme", platform, access_key_id="A", secret_access_key="S"),
        *manifests.reference_grants("acme", platform),
        manifests.inference_service(DEPLOYMENT, platform),
        *manifests.publishing_objects(DEPLOYMENT, platform),
    ]


@pytest.fixture(scope="module")
def admission() -> Admission:
    return Admission(rendered())


def admitted(admission: Admission, operation: str, obj: dict[str, Any], namespace: str) -> bool:
    group, resource = plural(obj)
    req = request(
        STAGECTL,
        operation,
        group=group,
        version=obj["apiVersion"].rpartition("/")[2],
        resource=resource,
        kind=obj["kind"],
        namespace="" if obj["kind"] == "Namespace" else namespace,
        name=obj["metadata"]["name"],
    )
    body = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    if operation == "DELETE":
        return admission.admits(req, obj=None, old=body)
    return admission.admits(req, obj=body, old=body if operation == "UPDATE" else None)


@pytest.mark.parametrize("route", sorted(FORMS))
def test_every_object_the_reconciler_writes_is_granted_and_admitted(
    admission: Admission, route: str
) -> None:
    world = Rbac(rendered())
    for obj in written(FORMS[route]):
        group, resource = plural(obj)
        namespace = obj["metadata"].get("namespace")
        name = obj["metadata"]["name"]
        for verb in ("get", "create", "update", "delete"):
            assert world.allows(STAGECTL, Request(verb, group, resource, namespace, name)), (
                verb,
                obj["kind"],
            )
        for operation in ("CREATE", "UPDATE", "DELETE"):
            where = namespace or name  # a Namespace: its own name
            assert admitted(admission, operation, obj, where), (operation, obj["kind"], where)


@pytest.mark.parametrize("route", sorted(FORMS))
def test_the_same_objects_anywhere_else_are_refused(admission: Admission, route: str) -> None:
    for obj in written(FORMS[route]):
        if obj["kind"] == "ReferenceGrant":
            continue  # below
        for namespace in OUTSIDE:
            moved = obj
            if obj["kind"] == "Namespace":
                moved = {**obj, "metadata": {**obj["metadata"], "name": namespace}}
            for operation in ("CREATE", "UPDATE", "DELETE"):
                assert not admitted(admission, operation, moved, namespace), (
                    operation,
                    obj["kind"],
                    namespace,
                )


def test_reference_grants_only_where_the_gateway_and_the_check_live(admission: Admission) -> None:
    grants = manifests.reference_grants("acme", FORMS["gateway-api"])
    assert {g["metadata"]["namespace"] for g in grants} == {"kourier-system", RELEASE_NAMESPACE}
    for grant in grants:
        assert admitted(admission, "CREATE", grant, grant["metadata"]["namespace"])
        for namespace in ("default", "kube-system", "kubeopera-data-acme"):
            assert not admitted(admission, "CREATE", grant, namespace)
    # Nothing else of the Gateway API there: an HTTPRoute in the gateway's namespace is refused.
    route = next(o for o in written(FORMS["gateway-api"]) if o["kind"] == "HTTPRoute")
    assert not admitted(admission, "CREATE", route, "kourier-system")


def test_it_binds_itself_nothing_and_reads_no_other_secret() -> None:
    world = Rbac(rendered())
    for namespace in [*OUTSIDE, "kubeopera-serve-acme", None]:
        assert not world.allows(STAGECTL, Request("create", RBAC_GROUP, "rolebindings", namespace))
        assert not world.allows(STAGECTL, Request("create", "", "pods", namespace))
        for verb in ("get", "list", "watch"):
            assert not world.allows(STAGECTL, Request(verb, "", "secrets", namespace, "any"))
