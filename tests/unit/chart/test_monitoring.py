"""What Prometheus and Grafana are given: a ServiceMonitor per deployable scraping exactly its
pods' health port, alerts selecting the jobs those ServiceMonitors make, and a dashboard whose
every query is valid PromQL (promtool) on the platform's own series."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.unit.chart._monitoring import (
    MONITORING_ON,
    alerts,
    dashboard,
    dashboard_queries,
    monitored,
    of_kind,
)
from tests.unit.chart._render import CHART, RELEASE, RELEASE_NAMESPACE, render

DEPLOYABLES = ("watcher", "apiserver", "compiler", "stagectl", "inference-auth")


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_nothing_is_rendered_for_monitoring_by_default() -> None:
    documents = render()
    assert not of_kind(documents, "ServiceMonitor")
    assert not of_kind(documents, "PrometheusRule")
    names = {d["metadata"]["name"] for d in documents}
    assert not {n for n in names if n.endswith("-metrics") or n.endswith("-dashboard")}


def test_each_deployable_is_scraped_on_its_pods_health_port_only() -> None:
    documents = monitored()
    services = of_kind(documents, "Service")
    deployments = {d["metadata"]["name"]: d for d in of_kind(documents, "Deployment")}
    monitors = {m["metadata"]["name"]: m for m in of_kind(documents, "ServiceMonitor")}
    assert sorted(monitors) == sorted(f"{RELEASE}-{name}" for name in DEPLOYABLES)
    for name in DEPLOYABLES:
        monitor = monitors[f"{RELEASE}-{name}"]["spec"]
        assert monitor["namespaceSelector"] == {"matchNames": [RELEASE_NAMESPACE]}
        selected = [
            s
            for s in services
            if _matches(monitor["selector"]["matchLabels"], s["metadata"]["labels"])
        ]
        assert [s["metadata"]["name"] for s in selected] == [f"{RELEASE}-{name}-metrics"]
        [service] = selected
        assert service["spec"]["clusterIP"] == "None"  # every pod a target
        pod = deployments[f"{RELEASE}-{name}"]["spec"]["template"]
        assert (
            service["spec"]["selector"]
            == deployments[f"{RELEASE}-{name}"]["spec"]["selector"]["matchLabels"]
        )
        assert _matches(service["spec"]["selector"], pod["metadata"]["labels"])
        [container] = pod["spec"]["containers"]
        container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        [port] = service["spec"]["ports"]
        assert container_ports[port["targetPort"]] == 8121  # HEALTH_PORT's default: /metrics
        [endpoint] = monitor["endpoints"]
        assert endpoint == {"port": port["name"], "path": "/metrics", "scheme": "http"} | {
            "interval": "30s"
        }


def test_service_monitor_labels_and_interval_come_from_values() -> None:
    monitor_values = {"enabled": True, "interval": "15s", "labels": {"release": "kps"}}
    documents = render({"monitoring": {"serviceMonitor": monitor_values}})
    for monitor in of_kind(documents, "ServiceMonitor"):
        assert monitor["metadata"]["labels"]["release"] == "kps"
        assert [e["interval"] for e in monitor["spec"]["endpoints"]] == ["15s"]


def test_the_alerts_select_the_jobs_the_service_monitors_make() -> None:
    """The Prometheus Operator names a ServiceMonitor target's job after its Service."""
    metrics_services = {
        s["metadata"]["name"]
        for s in of_kind(monitored(), "Service")
        if s["metadata"]["name"].endswith("-metrics")
    }
    jobs_selected: set[str] = set()
    for name, rule in alerts().items():
        jobs = set(re.findall(r'job="([^"]+)"', rule["expr"]))
        namespaces = set(re.findall(r'namespace="([^"]+)"', rule["expr"]))
        assert jobs, f"{name} reads series of any job"
        assert namespaces == {RELEASE_NAMESPACE}, name
        jobs_selected |= jobs
    assert jobs_selected == metrics_services  # every deployable is watched by some alert


def test_helm_lint_is_clean_with_every_monitoring_object() -> None:
    report: dict[str, Any] = helm.lint(
        CHART, MONITORING_ON, strict=True, namespace=RELEASE_NAMESPACE, kube_version="v1.30.0"
    )
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("version", ["1.30.0", "1.37.0"])
def test_the_monitoring_objects_kubernetes_knows_are_valid(version: str) -> None:
    for document in monitored():
        if document["kind"] in {"Service", "ConfigMap"}:
            kubernetes_validate.validate(document, version, strict=True)


def test_the_dashboard_is_shipped_with_the_sidecars_label() -> None:
    name = f"{RELEASE}-dashboard"
    (config_map,) = [d for d in of_kind(monitored(), "ConfigMap") if d["metadata"]["name"] == name]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard()["uid"] == "workflow-manager"


def _boxes_overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def test_every_dashboard_panel_queries_the_chosen_data_source_and_none_overlaps() -> None:
    panels: list[dict[str, Any]] = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    graphs = [p for p in panels if p["type"] != "row"]
    assert graphs
    for panel in graphs:
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        assert 'namespace="$namespace"' in " ".join(t["expr"] for t in panel["targets"])
    for index, panel in enumerate(panels):
        for other in panels[index + 1 :]:
            assert not _boxes_overlap(panel["gridPos"], other["gridPos"]), (
                panel["title"],
                other["title"],
            )


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule's expression, Grafana's variables given
    the values Grafana would put in their place."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/ensure-services.sh installs it"
    substitutes = {"$__rate_interval": "2m", "$namespace": RELEASE_NAMESPACE}
    rules = []
    for index, query in enumerate(dashboard_queries()):
        for variable, value in substitutes.items():
            query = query.replace(variable, value)
        assert "$" not in query, query
        rules.append({"record": f"dashboard:query_{index}", "expr": query})
    (tmp_path / "dashboard.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    result = subprocess.run(
        [promtool, "check", "rules", "dashboard.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
