"""Which clusters to watch: registry parsing, host recognition, provisional host identity."""

from __future__ import annotations

import pytest

from shared.clusters import (
    RegistryEntry,
    parse_registry,
    plan_targets,
    provisional_host_id,
)
from shared.errors import Invalid

KC = "apiVersion: v1\nkind: Config\n"


def entry(cid: str, *, kubeconfig: str | None = KC, uid: str | None = None) -> RegistryEntry:
    return RegistryEntry(cid, f"name-{cid}", "eu-north-1", "aws", kubeconfig, uid)


def test_host_alone_gets_a_provisional_identity() -> None:
    [target] = plan_targets([], host_uid="abc")
    assert target.ref.id == provisional_host_id("abc") == "host-abc"
    assert target.is_host
    assert target.kubeconfig is None


def test_registered_host_is_recognised_by_kube_system_uid_and_uses_in_cluster_identity() -> None:
    targets = plan_targets([entry("c1", uid="abc"), entry("c2")], host_uid="abc")
    by_id = {t.ref.id: t for t in targets}
    assert set(by_id) == {"c1", "c2"}
    assert by_id["c1"].is_host
    assert by_id["c1"].kubeconfig is None
    assert by_id["c1"].ref.region == "eu-north-1"
    assert not by_id["c2"].is_host
    assert by_id["c2"].kubeconfig == KC


def test_unreachable_entries_are_left_out() -> None:
    targets = plan_targets([entry("c1", kubeconfig=None)], host_uid="abc")
    assert [t.ref.id for t in targets] == ["host-abc"]


def test_duplicate_ids_keep_the_first() -> None:
    targets = plan_targets([entry("c1"), entry("c1", kubeconfig="other")], host_uid=None)
    assert [(t.ref.id, t.kubeconfig) for t in targets] == [("c1", KC)]


def test_connection_key_changes_with_kubeconfig() -> None:
    a = plan_targets([entry("c1")], host_uid=None)[0]
    b = plan_targets([entry("c1", kubeconfig="x")], host_uid=None)[0]
    assert a.connection_key != b.connection_key


def test_parse_registry_contract() -> None:
    payload = [
        {
            "id": "c1",
            "name": "prod",
            "region": "eu",
            "provider": "aws",
            "kubeconfig": KC,
            "kube_system_uid": None,
        },
        {"id": "c2"},
    ]
    entries = parse_registry(payload)
    assert entries[0] == RegistryEntry("c1", "prod", "eu", "aws", KC, None)
    assert entries[1] == RegistryEntry("c2", "c2", None, None, None, None)


@pytest.mark.parametrize(
    "payload",
    [
        {},
        "x",
        [{"name": "no id"}],
        [{"id": ""}],
        [1],
        # ids no route could address: the cluster's runs would be unreachable
        [{"id": "a/b"}],
        [{"id": "-c1"}],
        [{"id": "c 1"}],
        [{"id": "c" * 254}],
    ],
)
def test_parse_registry_refuses_malformed_answers(payload: object) -> None:
    with pytest.raises(Invalid):
        parse_registry(payload)
