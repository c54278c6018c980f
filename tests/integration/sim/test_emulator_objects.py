"""The Kubernetes API emulator through the real kubernetes-asyncio client: discovery, object
lifecycles, conflicts, patches, selectors, finalizers, garbage collection and paged lists."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio.client import (
    ApiClient,
    ApisApi,
    CoordinationV1Api,
    CoreApi,
    CoreV1Api,
    CustomObjectsApi,
    RbacAuthorizationV1Api,
    V1ConfigMap,
    V1Lease,
    V1LeaseSpec,
    V1Namespace,
    V1ObjectMeta,
    VersionApi,
)
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch

from sim.kube.server import RunningCluster
from tests.integration.sim._emulator import (
    MERGE,
    STRATEGIC,
    WF,
    _cm,
    _collect,
    _status,
    _workflow,
)

pytestmark = pytest.mark.integration


async def test_discovery(api: ApiClient) -> None:
    version = await VersionApi(api).get_code()
    assert version.major == "1"
    assert (await CoreApi(api).get_api_versions()).versions == ["v1"]
    core = await CoreV1Api(api).get_api_resources()
    names = {r.name: r for r in core.resources}
    assert names["configmaps"].namespaced
    assert names["configmaps"].kind == "ConfigMap"
    assert not names["namespaces"].namespaced
    assert "pods/log" in names
    groups = {g.name: g for g in (await ApisApi(api).get_api_versions()).groups}
    assert groups["argoproj.io"].preferred_version.version == "v1alpha1"
    assert "coordination.k8s.io" in groups
    argo = await CustomObjectsApi(api).get_api_resources("argoproj.io", "v1alpha1")
    kinds = {r.name: (r.kind, r.namespaced) for r in argo.resources}
    assert kinds["workflows"] == ("Workflow", True)
    assert kinds["clusterworkflowtemplates"] == ("ClusterWorkflowTemplate", False)


async def test_kube_system_and_default_exist(api: ApiClient, cluster: RunningCluster) -> None:
    core = CoreV1Api(api)
    kube_system = await core.read_namespace("kube-system")
    assert kube_system.metadata.uid == cluster.kube_system_uid
    assert (await core.read_namespace("default")).status.phase == "Active"


async def test_configmap_lifecycle(api: ApiClient) -> None:
    core = CoreV1Api(api)
    created = await core.create_namespaced_config_map("default", _cm("one", app="a"))
    assert created is not None, "create must answer 201 with the object"
    meta = created.metadata
    assert meta.uid
    assert meta.resource_version
    assert meta.creation_timestamp is not None
    assert meta.namespace == "default"

    fetched = await core.read_namespaced_config_map("one", "default")
    assert fetched.data == {"k": "v"}

    fetched.data = {"k": "w"}
    replaced = await core.replace_namespaced_config_map("one", "default", fetched)
    assert int(replaced.metadata.resource_version) > int(meta.resource_version)
    assert replaced.data == {"k": "w"}

    patched = await core.patch_namespaced_config_map(
        "one", "default", {"data": {"x": "y"}}, _content_type=MERGE
    )
    assert patched.data == {"k": "w", "x": "y"}

    listed = await core.list_namespaced_config_map("default")
    assert [c.metadata.name for c in listed.items] == ["one"]
    assert int(listed.metadata.resource_version) >= int(patched.metadata.resource_version)

    deleted = await core.delete_namespaced_config_map("one", "default")
    assert (deleted.status, deleted.details.name) == ("Success", "one")
    with pytest.raises(ApiException) as missing:
        await core.read_namespaced_config_map("one", "default")
    assert missing.value.status == 404
    status = _status(missing.value)
    assert (status["kind"], status["apiVersion"]) == ("Status", "v1")
    assert (status["status"], status["reason"], status["code"]) == ("Failure", "NotFound", 404)
    assert "one" in status["message"]


async def test_generate_name_and_namespace_cascade(api: ApiClient) -> None:
    core = CoreV1Api(api)
    await core.create_namespace(V1Namespace(metadata=V1ObjectMeta(name="tenant-a")))
    made = await core.create_namespaced_config_map(
        "tenant-a", V1ConfigMap(metadata=V1ObjectMeta(generate_name="cm-"))
    )
    assert made.metadata.name.startswith("cm-")
    assert len(made.metadata.name) == 8

    with pytest.raises(ApiException) as no_namespace:
        await core.create_namespaced_config_map("nowhere", _cm("x"))
    assert no_namespace.value.status == 404

    await core.delete_namespace("tenant-a")
    assert (await core.list_namespaced_config_map("tenant-a")).items == []
    with pytest.raises(ApiException) as gone:
        await core.read_namespace("tenant-a")
    assert gone.value.status == 404


async def test_workflow_lifecycle(api: ApiClient) -> None:
    custom = CustomObjectsApi(api)
    created = await custom.create_namespaced_custom_object(
        *WF, "default", "workflows", _workflow("wf-1")
    )
    assert created["metadata"]["generation"] == 1
    assert created["metadata"]["creationTimestamp"].endswith("Z")

    status_only = await custom.patch_namespaced_custom_object(
        *WF, "default", "workflows", "wf-1", {"status": {"phase": "Running"}}, _content_type=MERGE
    )
    assert status_only["status"] == {"phase": "Running"}
    assert status_only["metadata"]["generation"] == 1, "a status change keeps the generation"

    spec = await custom.patch_namespaced_custom_object(
        *WF, "default", "workflows", "wf-1", {"spec": {"shutdown": "Stop"}}, _content_type=MERGE
    )
    assert spec["spec"] == {"entrypoint": "main", "shutdown": "Stop"}
    assert spec["metadata"]["generation"] == 2

    spec["metadata"]["labels"] = {"tenant": "t1"}
    replaced = await custom.replace_namespaced_custom_object(
        *WF, "default", "workflows", "wf-1", spec
    )
    assert replaced["metadata"]["labels"] == {"tenant": "t1"}

    everywhere = await custom.list_cluster_custom_object(*WF, "workflows")
    assert [w["metadata"]["name"] for w in everywhere["items"]] == ["wf-1"]
    assert everywhere["kind"] == "WorkflowList"

    status = await custom.get_namespaced_custom_object_status(*WF, "default", "workflows", "wf-1")
    assert status["status"] == {"phase": "Running"}
    through_status = await custom.patch_namespaced_custom_object_status(
        *WF,
        "default",
        "workflows",
        "wf-1",
        {"status": {"phase": "Succeeded"}, "spec": {"entrypoint": "ignored"}},
        _content_type=MERGE,
    )
    assert through_status["status"] == {"phase": "Succeeded"}
    assert through_status["spec"]["entrypoint"] == "main", "/status changes only the status"

    await custom.delete_namespaced_custom_object(*WF, "default", "workflows", "wf-1")
    with pytest.raises(ApiException) as missing:
        await custom.get_namespaced_custom_object(*WF, "default", "workflows", "wf-1")
    assert missing.value.status == 404


async def test_lease_renewal_and_stale_replace(api: ApiClient) -> None:
    leases = CoordinationV1Api(api)
    lease = V1Lease(
        metadata=V1ObjectMeta(name="leader"),
        spec=V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = await leases.create_namespaced_lease("default", lease)
    created.spec.holder_identity = "b"
    renewed = await leases.replace_namespaced_lease("leader", "default", created)
    assert renewed.spec.holder_identity == "b"

    created.spec.holder_identity = "c"  # still carries the old resourceVersion
    with pytest.raises(ApiException) as stale:
        await leases.replace_namespaced_lease("leader", "default", created)
    assert stale.value.status == 409
    assert _status(stale.value)["reason"] == "Conflict"
    current = await leases.read_namespaced_lease("leader", "default")
    assert current.spec.holder_identity == "b"


async def test_name_clash_is_409_already_exists(api: ApiClient) -> None:
    core = CoreV1Api(api)
    await core.create_namespaced_config_map("default", _cm("same"))
    with pytest.raises(ApiException) as clash:
        await core.create_namespaced_config_map("default", _cm("same"))
    assert clash.value.status == 409
    assert _status(clash.value)["reason"] == "AlreadyExists"


async def test_a_binding_keeps_its_role_ref(api: ApiClient) -> None:
    """As the API server: a RoleBinding's roleRef cannot change (by replace or patch); its
    subjects can."""
    rbac = RbacAuthorizationV1Api(api)
    binding = {
        "metadata": {"name": "b"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "a", "namespace": "default"}],
    }
    await rbac.create_namespaced_role_binding("default", binding)
    moved = {**binding, "roleRef": {**binding["roleRef"], "kind": "ClusterRole"}}
    with pytest.raises(ApiException) as refused:
        await rbac.replace_namespaced_role_binding("b", "default", moved)
    assert refused.value.status == 422
    assert "cannot change roleRef" in _status(refused.value)["message"]
    with pytest.raises(ApiException) as patched:
        await rbac.patch_namespaced_role_binding(
            "b", "default", {"roleRef": {"name": "admin"}}, _content_type=MERGE
        )
    assert patched.value.status == 422
    others = {**binding, "subjects": [{"kind": "ServiceAccount", "name": "b", "namespace": "x"}]}
    replaced = await rbac.replace_namespaced_role_binding("b", "default", others)
    assert replaced.subjects[0].name == "b"
    assert replaced.role_ref.kind == "Role"


async def test_stale_resource_version_in_merge_patch_is_409(api: ApiClient) -> None:
    custom = CustomObjectsApi(api)
    created = await custom.create_namespaced_custom_object(
        *WF, "default", "workflows", _workflow("wf")
    )
    old_rv = created["metadata"]["resourceVersion"]
    await custom.patch_namespaced_custom_object(
        *WF, "default", "workflows", "wf", {"metadata": {"labels": {"a": "b"}}}, _content_type=MERGE
    )
    with pytest.raises(ApiException) as stale:
        await custom.patch_namespaced_custom_object(
            *WF,
            "default",
            "workflows",
            "wf",
            {"metadata": {"resourceVersion": old_rv}, "spec": {"shutdown": "Stop"}},
            _content_type=MERGE,
        )
    assert stale.value.status == 409
    current = await custom.get_namespaced_custom_object(*WF, "default", "workflows", "wf")
    assert "shutdown" not in current["spec"]


async def test_json_patch_needs_a_list_so_the_client_default_is_caught(api: ApiClient) -> None:
    custom = CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(*WF, "default", "workflows", _workflow("wf"))
    ops = [
        {"op": "add", "path": "/spec/shutdown", "value": "Terminate"},
        {"op": "test", "path": "/spec/entrypoint", "value": "main"},
    ]
    patched = await custom.patch_namespaced_custom_object(*WF, "default", "workflows", "wf", ops)
    assert patched["spec"]["shutdown"] == "Terminate"

    # Without _content_type the client sends a dict as application/json-patch+json.
    with pytest.raises(ApiException) as refused:
        await custom.patch_namespaced_custom_object(
            *WF, "default", "workflows", "wf", {"spec": {"shutdown": "Stop"}}
        )
    assert refused.value.status in (400, 422)

    failing_test = [{"op": "test", "path": "/spec/entrypoint", "value": "other"}]
    with pytest.raises(ApiException) as failed:
        await custom.patch_namespaced_custom_object(*WF, "default", "workflows", "wf", failing_test)
    assert failed.value.status == 422


async def test_unknown_patch_content_type_is_415(api: ApiClient) -> None:
    core = CoreV1Api(api)
    await core.create_namespaced_config_map("default", _cm("cm"))
    with pytest.raises(ApiException) as unsupported:
        await core.patch_namespaced_config_map(
            "cm", "default", {"data": {"a": "b"}}, _content_type="application/apply-patch+yaml"
        )
    assert unsupported.value.status == 415
    assert _status(unsupported.value)["reason"] == "UnsupportedMediaType"


async def test_label_and_field_selectors(api: ApiClient) -> None:
    core = CoreV1Api(api)
    await core.create_namespaced_config_map("default", _cm("a", app="web", tier="front"))
    await core.create_namespaced_config_map("default", _cm("b", app="web", tier="back"))
    await core.create_namespaced_config_map("default", _cm("c", app="db"))

    async def names(**kwargs: str) -> list[str]:
        listed = await core.list_namespaced_config_map("default", **kwargs)
        return [c.metadata.name for c in listed.items]

    assert await names(label_selector="app=web") == ["a", "b"]
    assert await names(label_selector="app==web,tier!=back") == ["a"]
    assert await names(label_selector="tier in (back, front)") == ["a", "b"]
    assert await names(label_selector="tier notin (front)") == ["b", "c"]
    assert await names(label_selector="!tier") == ["c"]
    assert await names(label_selector="tier,app=web") == ["a", "b"]
    assert await names(field_selector="metadata.name=b") == ["b"]
    assert await names(field_selector="metadata.namespace==default,metadata.name!=a") == [
        "b",
        "c",
    ]

    with pytest.raises(ApiException) as bad:
        await core.list_namespaced_config_map("default", label_selector="app in web")
    assert bad.value.status == 400


async def test_custom_resources_select_on_name_and_namespace_only(api: ApiClient) -> None:
    custom = CustomObjectsApi(api)
    for name, phase in (("w1", "Running"), ("w2", "Succeeded"), ("w3", "Running")):
        await custom.create_namespaced_custom_object(
            *WF, "default", "workflows", _workflow(name, phase=phase)
        )
    picked = await custom.list_cluster_custom_object(
        *WF, "workflows", field_selector="metadata.namespace=default,metadata.name!=w2"
    )
    assert [w["metadata"]["name"] for w in picked["items"]] == ["w1", "w3"]

    # As apiextensions-apiserver answers: on a list, a watch and a collection delete alike.
    refusals = [
        custom.list_cluster_custom_object(*WF, "workflows", field_selector="status.phase=Running"),
        custom.list_namespaced_custom_object(
            *WF, "default", "workflows", watch=True, field_selector="spec.entrypoint=main"
        ),
        custom.delete_collection_namespaced_custom_object(
            *WF, "default", "workflows", field_selector="status.phase=Running"
        ),
        custom.list_cluster_custom_object(
            *WF, "clusterworkflowtemplates", field_selector="metadata.namespace=default"
        ),
    ]
    messages = []
    for call in refusals:
        with pytest.raises(ApiException) as refused:
            await call
        assert refused.value.status == 400
        status = _status(refused.value)
        assert status["reason"] == "BadRequest"
        messages.append(status["message"])
    assert messages == [
        "field label not supported: status.phase",
        "field label not supported: spec.entrypoint",
        "field label not supported: status.phase",
        "field label not supported: metadata.namespace",
    ]
    listed = await custom.list_namespaced_custom_object(*WF, "default", "workflows")
    assert len(listed["items"]) == 3  # the refused collection delete deleted nothing


async def test_strategic_merge_patch_is_for_built_in_types_only(api: ApiClient) -> None:
    core, custom = CoreV1Api(api), CustomObjectsApi(api)
    await core.create_namespaced_config_map("default", _cm("cm"))
    patched = await core.patch_namespaced_config_map(
        "cm", "default", {"data": {"a": "b"}}, _content_type=STRATEGIC
    )
    assert patched.data == {"k": "v", "a": "b"}

    await custom.create_namespaced_custom_object(*WF, "default", "workflows", _workflow("wf"))
    with pytest.raises(ApiException) as unsupported:
        await custom.patch_namespaced_custom_object(
            *WF, "default", "workflows", "wf", {"spec": {"suspend": True}}, _content_type=STRATEGIC
        )
    assert unsupported.value.status == 415
    status = _status(unsupported.value)
    assert status["reason"] == "UnsupportedMediaType"
    assert status["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json"
    )
    unchanged = await custom.get_namespaced_custom_object(*WF, "default", "workflows", "wf")
    assert "suspend" not in unchanged["spec"]


async def test_finalizers_hold_deletion_until_removed(api: ApiClient) -> None:
    core = CoreV1Api(api)
    body = V1ConfigMap(metadata=V1ObjectMeta(name="held", finalizers=["example.com/keep"]))
    await core.create_namespaced_config_map("default", body)
    listed = await core.list_namespaced_config_map("default")

    answer = await core.delete_namespaced_config_map("held", "default", _preload_content=False)
    assert json.loads(await answer.read())["metadata"]["deletionTimestamp"]
    still = await core.read_namespaced_config_map("held", "default")
    assert still.metadata.deletion_timestamp is not None

    await core.patch_namespaced_config_map(
        "held", "default", {"metadata": {"finalizers": None}}, _content_type=MERGE
    )
    with pytest.raises(ApiException) as gone:
        await core.read_namespaced_config_map("held", "default")
    assert gone.value.status == 404
    events = await _collect(
        Watch(),
        core.list_namespaced_config_map,
        "default",
        resource_version=listed.metadata.resource_version,
        limit=2,
    )
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]


async def test_owner_references_are_garbage_collected(api: ApiClient) -> None:
    custom = CustomObjectsApi(api)
    core = CoreV1Api(api)
    wf = await custom.create_namespaced_custom_object(*WF, "default", "workflows", _workflow("o"))
    owner = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "name": "o",
        "uid": wf["metadata"]["uid"],
    }
    pod = {"metadata": {"name": "o-pod", "ownerReferences": [owner]}, "spec": {"containers": []}}
    await core.create_namespaced_pod("default", pod)
    await custom.delete_namespaced_custom_object(*WF, "default", "workflows", "o")
    assert (await core.list_namespaced_pod("default")).items == []


async def test_paged_list_is_a_consistent_snapshot(api: ApiClient) -> None:
    core = CoreV1Api(api)
    for index in range(7):
        await core.create_namespaced_config_map(
            "default", V1ConfigMap(metadata=V1ObjectMeta(name=f"page-{index}"))
        )
    first = await core.list_namespaced_config_map("default", limit=3)
    assert [c.metadata.name for c in first.items] == ["page-0", "page-1", "page-2"]
    assert first.metadata._continue
    # A change after the first page is not part of the snapshot being paged through.
    await core.create_namespaced_config_map(
        "default", V1ConfigMap(metadata=V1ObjectMeta(name="page-9"))
    )
    names, token = [c.metadata.name for c in first.items], first.metadata._continue
    while token:
        page = await core.list_namespaced_config_map("default", limit=3, _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        names += [c.metadata.name for c in page.items]
        token = page.metadata._continue
    assert names == [f"page-{i}" for i in range(7)]
    with pytest.raises(ApiException) as expired:
        await core.list_namespaced_config_map("default", limit=3, _continue="unknown:3")
    assert expired.value.status == 410
