"""Identity from kubeopera-api's headers, access per route, scope, the shared key."""

from __future__ import annotations

import pytest

from apiserver.auth import Identity, Permission, Special, identity_from, key_matches
from apiserver.scope import Scope
from shared.errors import Forbidden, Invalid

T, A, P, ACT = (
    "X-Kubeopera-Tenant",
    "X-Kubeopera-Admin",
    "X-Kubeopera-Permissions",
    "X-Kubeopera-Actor",
)


@pytest.mark.parametrize(
    ("headers", "acting", "tenant", "admin"),
    [
        ({T: "acme"}, [], "acme", False),
        ({T: "acme", A: "false"}, [], "acme", False),
        ({A: "true"}, [], None, True),
        ({A: "TRUE", T: "ops"}, [], None, True),
        ({A: "true"}, ["acme"], "acme", True),
        ({A: "true", T: "ops"}, ["globex"], "globex", True),
    ],
)
def test_identities(
    headers: dict[str, str], acting: list[str], tenant: str | None, admin: bool
) -> None:
    identity = identity_from(headers, acting)
    assert (identity.tenant, identity.admin) == (tenant, admin)
    assert identity.acting == bool(acting)


@pytest.mark.parametrize(
    ("headers", "acting", "error"),
    [
        ({}, [], Forbidden),
        ({A: "false"}, [], Forbidden),
        ({T: "acme"}, ["globex"], Forbidden),
        ({T: "Acme"}, [], Invalid),
        ({T: "acme/../x"}, [], Invalid),
        ({T: "-acme"}, [], Invalid),
        ({T: "a" * 49}, [], Invalid),
        ({A: "yes"}, [], Invalid),
        ({A: "true"}, ["a", "b"], Invalid),
        ({A: "true"}, ["Not Valid"], Invalid),
    ],
)
def test_refusals(headers: dict[str, str], acting: list[str], error: type[Exception]) -> None:
    with pytest.raises(error):
        identity_from(headers, acting)


def test_permissions_and_actor() -> None:
    identity = identity_from({T: "acme", P: " workflows.read , pipelines.run,,", ACT: "alice"})
    assert identity.permissions == {"workflows.read", "pipelines.run"}
    assert identity.actor == "alice"
    assert identity.allowed(Permission.WORKFLOWS_READ)
    assert not identity.allowed(Permission.WORKFLOWS_ACT)
    assert not identity.allowed(Special.ADMIN)
    assert identity.allowed(Special.INTERNAL)
    with pytest.raises(Forbidden) as raised:
        identity.require(Permission.WORKFLOWS_ACT)
    assert raised.value.details == {"permission": "workflows.act"}
    assert identity_from({T: "acme"}).actor == "tenant:acme"
    admin = Identity(tenant=None, admin=True, permissions=frozenset(), actor="root")
    assert all(admin.allowed(p) for p in [*Permission, *Special])


def test_scope() -> None:
    everything = Scope(None)
    assert everything.allows(tenant=None, cluster_id="c", namespace="n")
    scope = Scope("acme", frozenset({("c2", "argo")}))
    assert scope.allows(tenant="acme", cluster_id="c1", namespace="x")
    assert scope.allows(tenant=None, cluster_id="c2", namespace="argo")
    assert not scope.allows(tenant="globex", cluster_id="c2", namespace="kubeopera-data-globex")
    assert not scope.allows(tenant=None, cluster_id="c1", namespace="argo")


@pytest.mark.parametrize(
    ("given", "expected", "ok"),
    [("k", "k", True), ("k", "K", False), (None, "k", False), ("", "", False), ("k", None, False)],
)
def test_key(given: str | None, expected: str | None, ok: bool) -> None:
    assert key_matches(given, expected) is ok
