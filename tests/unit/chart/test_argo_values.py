"""The pipeline controller's values for the upstream Argo charts (charts/workflow-manager/argo/):
keys the upstream charts have, and settings that agree with workflow-manager's.

They are not dependencies of the chart (Helm refuses to install a chart whose dependency is
absent from charts/, whatever its condition; nothing can fetch the Argo repository here), so
each file is for a release of its own. The keys were read from argoproj/argo-helm at
``UPSTREAM_COMMIT``. With ``ARGO_HELM_CHARTS`` naming a checkout's ``charts`` directory, the
last tests also render the upstream charts with these values through Helm's engine and check
the keys against upstream's own values.yaml (run so when the files or the versions change)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from shared.argo import parse_service_url
from shared.config import Settings
from tests.unit.chart._render import CHART

UPSTREAM_COMMIT = "af0a9310bacbaa4636018dfe22c801a6d33a5c43"
VERSIONS = {"argo-workflows": "1.0.18", "argo-events": "2.4.22"}
FILES = {name: CHART / "argo" / f"{name}-values.yaml" for name in VERSIONS}
NAMESPACES = {"argo-workflows": "kubeopera-argo-data", "argo-events": "kubeopera-pipeline-events"}
# Maps upstream writes out verbatim (their keys are Argo's, not the chart's): the controller's
# workflowRestrictions go into its ConfigMap as they are; extraObjects are manifests.
OPAQUE = {"controller.workflowRestrictions", "extraObjects"}
# Every key path the files set, as upstream's values.yaml at UPSTREAM_COMMIT has it.
UPSTREAM_KEYS = {
    "argo-workflows": {
        "fullnameOverride",
        "crds.install",
        "createAggregateRoles",
        "controller.instanceID.enabled",
        "controller.instanceID.explicitID",
        "controller.workflowRestrictions",
        "controller.workflowNamespaces",
        "controller.replicas",
        "controller.pdb.enabled",
        "controller.pdb.minAvailable",
        "workflow.serviceAccount.create",
        "workflow.rbac.create",
        "server.enabled",
        "server.secure",
        "server.authModes",
        "server.replicas",
        "server.pdb.enabled",
        "server.pdb.minAvailable",
    },
    "argo-events": {"crds.install", "controller.rbac.namespaced", "extraObjects"},
}


def values(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(FILES[name].read_text())
    return loaded


def paths(tree: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Each key path to a leaf (a scalar, a list or an opaque map)."""
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and path not in OPAQUE:
            yield from paths(value, f"{path}.")
        else:
            yield path


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_every_key_is_one_upstream_has(name: str) -> None:
    assert set(paths(values(name))) == UPSTREAM_KEYS[name]


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_each_file_says_how_it_is_installed(name: str) -> None:
    text = FILES[name].read_text()
    assert f"helm install {'argo-data' if name == 'argo-workflows' else name} argo/{name}" in text
    assert f"--version {VERSIONS[name]}" in text
    assert f"--namespace {NAMESPACES[name]}" in text


def test_the_controller_is_the_one_workflow_manager_labels_its_runs_for() -> None:
    controller = values("argo-workflows")["controller"]
    assert controller["instanceID"] == {
        "enabled": True,
        "explicitID": Settings.model_fields["ARGO_DATA_INSTANCE_ID"].default,
    }
    assert controller["workflowRestrictions"] == {"templateReferencing": "Strict"}


def test_the_server_is_the_one_argo_data_server_url_names() -> None:
    """The Service ``<fullname>-server`` in the release's namespace, on 2746, over TLS."""
    ref = parse_service_url(Settings.model_fields["ARGO_DATA_SERVER_URL"].default)
    workflows = values("argo-workflows")
    assert ref.service == f"{workflows['fullnameOverride']}-server"
    assert ref.namespace == NAMESPACES["argo-workflows"]
    assert ref.port == "2746"  # upstream's server.servicePort, left as it is
    assert workflows["server"]["secure"] is (ref.scheme == "https")


def test_the_event_bus_is_default_in_the_events_namespace() -> None:
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    events = chart_values["events"]["namespace"]
    assert events == NAMESPACES["argo-events"]
    assert events == Settings.model_fields["EVENTS_NAMESPACE"].default
    (bus,) = values("argo-events")["extraObjects"]
    assert (bus["kind"], bus["metadata"]) == ("EventBus", {"name": "default", "namespace": events})


def test_why_they_are_not_dependencies(tmp_path: Path) -> None:
    """The chart with argo-workflows declared as an optional dependency, off, not downloaded:
    Helm's lint warns (so the chart would not lint clean), and Helm's install and template
    refuse it outright (action.CheckDependencies, whatever the condition)."""
    chart = tmp_path / "workflow-manager"
    shutil.copytree(CHART, chart)
    metadata = yaml.safe_load((chart / "Chart.yaml").read_text())
    metadata["dependencies"] = [
        {
            "name": "argo-workflows",
            "version": VERSIONS["argo-workflows"],
            "repository": "https://argoproj.github.io/argo-helm",
            "condition": "argoWorkflows.enabled",
        }
    ]
    (chart / "Chart.yaml").write_text(yaml.safe_dump(metadata))
    report = helm.lint(chart, {"argoWorkflows": {"enabled": False}}, kube_version="v1.30.0")
    assert {
        "severity": 2,
        "path": str(chart),
        "error": "chart directory is missing these dependencies: argo-workflows",
    } in report["messages"]


def _upstream() -> Path:
    charts = os.environ.get("ARGO_HELM_CHARTS")
    if not charts:
        pytest.skip("ARGO_HELM_CHARTS (an argo-helm checkout's charts directory) is not set")
    return Path(charts)


def _keys(tree: Mapping[str, Any], prefix: str = "") -> set[str]:
    found = set()
    for key, value in tree.items():
        found.add(f"{prefix}{key}")
        if isinstance(value, Mapping):
            found |= _keys(value, f"{prefix}{key}.")
    return found


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_upstream_reads_every_key_and_is_the_version_read(name: str) -> None:
    """Each key is in upstream's values.yaml or read by its templates (some, such as
    ``controller.pdb.minAvailable``, are only comments in values.yaml)."""
    chart = _upstream() / name
    assert yaml.safe_load((chart / "Chart.yaml").read_text())["version"] == VERSIONS[name]
    upstream = _keys(yaml.safe_load((chart / "values.yaml").read_text()))
    templates = "".join(p.read_text() for p in (chart / "templates").rglob("*") if p.is_file())
    unread = {
        k for k in UPSTREAM_KEYS[name] if k not in upstream and f".Values.{k}" not in templates
    }
    assert unread == set()


def _render(name: str) -> list[dict[str, Any]]:
    chart = helm.Chart.load(_upstream() / name)
    release = "argo-data" if name == "argo-workflows" else name
    manifests = chart.render(values(name), name=release, namespace=NAMESPACES[name])
    return [
        document
        for path, text in sorted(manifests.items())
        if not path.endswith("NOTES.txt")
        for document in yaml.safe_load_all(text)
        if document
    ]


def test_upstream_renders_the_dedicated_controller_and_server() -> None:
    documents = _render("argo-workflows")
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    config = yaml.safe_load(
        kinds[("ConfigMap", "argo-data-workflow-controller-configmap")]["data"]["config"]
    )
    assert config["instanceID"] == "kubeopera-data"
    assert config["workflowRestrictions"] == {"templateReferencing": "Strict"}
    server = kinds[("Deployment", "argo-data-server")]["spec"]["template"]["spec"]
    args = server["containers"][0]["args"]
    assert "--secure=true" in args
    assert "--auth-mode=server" in args
    assert "--configmap=argo-data-workflow-controller-configmap" in args
    for component in ("argo-data-workflow-controller", "argo-data-server"):
        assert kinds[("PodDisruptionBudget", component)]["spec"]["minAvailable"] == 1
    service = kinds[("Service", "argo-data-server")]
    assert service["metadata"]["namespace"] == "kubeopera-argo-data"
    assert [p["port"] for p in service["spec"]["ports"]] == [2746]
    assert not [d for d in documents if d["kind"] == "CustomResourceDefinition"]
    assert not [d for d in documents if d["kind"] in ("Role", "RoleBinding")]  # no workflow RBAC


def test_upstream_renders_a_namespaced_events_controller_and_the_bus() -> None:
    documents = _render("argo-events")
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    controller = kinds[("Deployment", "argo-events-controller-manager")]
    assert "--namespaced" in controller["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ("ClusterRole", "argo-events-controller-manager") not in kinds
    bus = kinds[("EventBus", "default")]
    assert bus["metadata"]["namespace"] == "kubeopera-pipeline-events"
