"""Each deployable's own RBAC, evaluated: its Leases by name, and the one Argo server it may reach
through the API server's service proxy, named exactly as its client names it."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.actions.planning import DEFAULT_ARGO_SERVER
from compiler.runner import GIT_LEASE_NAME, LEASE_NAME, NOTIFY_LEASE_NAME
from shared.argo import ServiceRef, parse_service_url, proxy_prefix
from shared.config import Settings
from stagectl.runner import LEASE_NAME as STAGECTL_LEASE
from tests.unit.chart._rbac import Account, Rbac, Request
from tests.unit.chart._render import RELEASE, RELEASE_NAMESPACE, render, rendered
from watcher.runner import LEASE_PREFIX

LEASES = "coordination.k8s.io"
# What each client sends through the proxy (shared/argo.py): PUT is update, POST create.
PROXY_VERBS = {"apiserver": "update", "compiler": "create", "stagectl": "update"}
DEPLOYABLES = ("watcher", "apiserver", "compiler", "stagectl", "inference-auth")


def account(name: str) -> Account:
    return Account(RELEASE_NAMESPACE, f"{RELEASE}-{name}")


def proxied_name(ref: ServiceRef) -> tuple[str, str]:
    """The namespace and the services/proxy name of the path the client builds."""
    path = proxy_prefix(ref)
    namespace = path.split("/namespaces/")[1].split("/")[0]
    name = path.split("/services/")[1].removesuffix("/proxy")
    return namespace, name


def proxy(verb: str, namespace: str, name: str | None) -> Request:
    return Request(verb, "", "services/proxy", namespace, name)


def others(namespace: str, name: str) -> list[Request]:
    """The requests next to the allowed one: another port, service, scheme, namespace, none."""
    scheme, service, port = name.split(":")
    other_scheme = "http" if scheme == "https" else "https"
    return [
        proxy("update", namespace, f"{scheme}:{service}:{int(port) + 1}"),
        proxy("update", namespace, f"{scheme}:{service}-other:{port}"),
        proxy("update", namespace, f"{other_scheme}:{service}:{port}"),
        proxy("update", namespace, service),
        proxy("update", "default", name),
        proxy("update", namespace, None),
        proxy("create", "kube-system", "https:kube-dns:443"),
    ]


@pytest.mark.parametrize(
    ("values", "urls"),
    [
        ({}, {}),
        (
            {"env": {"ARGO_DATA_SERVER_URL": "http://data-argo.pipelines"}},
            {name: "http://data-argo.pipelines" for name in PROXY_VERBS},
        ),
        (
            {
                "env": {"ARGO_DATA_SERVER_URL": "https://a.ns-a.svc.cluster.local:8443"},
                "deployables": {
                    "stagectl": {"env": {"ARGO_DATA_SERVER_URL": "https://b.ns-b.svc:2746"}}
                },
            },
            {
                "apiserver": "https://a.ns-a.svc.cluster.local:8443",
                "compiler": "https://a.ns-a.svc.cluster.local:8443",
                "stagectl": "https://b.ns-b.svc:2746",
            },
        ),
    ],
)
def test_each_client_may_reach_exactly_the_argo_server_it_names(
    values: dict[str, Any], urls: dict[str, str]
) -> None:
    world = Rbac(render(values))
    default_url = Settings(DATABASE_URL="postgresql://u@h/db").ARGO_DATA_SERVER_URL
    for name, verb in PROXY_VERBS.items():
        who = account(name)
        namespace, target = proxied_name(parse_service_url(urls.get(name, default_url)))
        assert world.allows(who, proxy(verb, namespace, target)), (name, target)
        wrong_verb = "create" if verb == "update" else "update"
        assert not world.allows(who, proxy(wrong_verb, namespace, target)), name
        assert not world.allows(who, proxy("get", namespace, target)), name
        for request in others(namespace, target):
            assert not world.allows(who, request), (name, request)
    for name in ("watcher", "inference-auth"):
        namespace, target = proxied_name(parse_service_url(default_url))
        for verb in ("get", "create", "update"):
            assert not world.allows(account(name), proxy(verb, namespace, target))


def test_the_apiserver_also_reaches_the_host_cicd_argo_server_and_no_other() -> None:
    world = Rbac(rendered())
    namespace, target = proxied_name(DEFAULT_ARGO_SERVER)
    assert world.allows(account("apiserver"), proxy("update", namespace, target))
    for request in others(namespace, target):
        assert not world.allows(account("apiserver"), request)
    for name in ("compiler", "stagectl"):
        assert not world.allows(account(name), proxy("update", namespace, target))


@pytest.mark.parametrize(
    "url",
    ["ftp://argo.argo:21", "https://argo:2746", "https://u:p@argo.argo:2746", "https://a.b.c:1"],
)
def test_a_server_url_the_client_would_refuse_is_refused_at_render(url: str) -> None:
    import helm_python as helm

    from shared.errors import ConfigError

    with pytest.raises(ConfigError):
        parse_service_url(url)
    with pytest.raises(helm.HelmRenderError, match="ARGO_DATA_SERVER_URL"):
        render({"env": {"ARGO_DATA_SERVER_URL": url}})


def test_leader_elected_deployables_renew_only_their_own_leases() -> None:
    world = Rbac(rendered())
    own = {
        "compiler": [LEASE_NAME, NOTIFY_LEASE_NAME, GIT_LEASE_NAME],
        "stagectl": [STAGECTL_LEASE],
    }
    everyone = [lease for leases in own.values() for lease in leases]
    for name, leases in own.items():
        who = account(name)
        assert world.allows(who, Request("create", LEASES, "leases", RELEASE_NAMESPACE))
        for lease in everyone:
            for verb in ("get", "update"):
                request = Request(verb, LEASES, "leases", RELEASE_NAMESPACE, lease)
                assert world.allows(who, request) is (lease in leases), (name, verb, lease)
        for verb in ("list", "watch", "delete", "patch"):
            assert not world.allows(who, Request(verb, LEASES, "leases", RELEASE_NAMESPACE))
        assert not world.allows(
            who, Request("update", LEASES, "leases", RELEASE_NAMESPACE, f"{LEASE_PREFIX}-c1")
        )
        # and nowhere but the release namespace
        assert not world.allows(who, Request("update", LEASES, "leases", "default", leases[0]))


def test_the_watcher_keeps_its_run_time_named_leases_and_the_servers_take_none() -> None:
    """The watcher's Leases are named at run time (one per cluster, one per replica), listed and
    deleted when a replica is gone; the apiserver and inference-auth elect nothing."""
    world = Rbac(rendered())
    watcher = account("watcher")
    for lease in (f"{LEASE_PREFIX}-c1", f"{LEASE_PREFIX}-member-p", f"{LEASE_PREFIX}-retention"):
        for verb in ("get", "update", "delete"):
            assert world.allows(watcher, Request(verb, LEASES, "leases", RELEASE_NAMESPACE, lease))
    for verb in ("list", "create"):
        assert world.allows(watcher, Request(verb, LEASES, "leases", RELEASE_NAMESPACE))
    assert not world.allows(watcher, Request("update", LEASES, "leases", "default", "x"))
    for name in ("apiserver", "inference-auth"):
        for verb in ("get", "list", "create", "update"):
            assert not world.allows(
                account(name), Request(verb, LEASES, "leases", RELEASE_NAMESPACE, "wm-compiler")
            )


def test_each_deployable_runs_as_its_own_account() -> None:
    documents = rendered()
    accounts = {d["metadata"]["name"] for d in documents if d["kind"] == "ServiceAccount"}
    assert accounts == {f"{RELEASE}-{name}" for name in DEPLOYABLES}
    for document in documents:
        if document["kind"] == "Deployment":
            component = document["metadata"]["labels"]["app.kubernetes.io/component"]
            spec = document["spec"]["template"]["spec"]
            assert spec["serviceAccountName"] == f"{RELEASE}-{component}"
