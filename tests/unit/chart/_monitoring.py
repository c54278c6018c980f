"""The chart's monitoring objects as Helm renders them with every one enabled: the alert rules
(the PrometheusRule's ``spec``, the ``groups:`` file promtool reads), the dashboard, and the
series names each of their expressions reads."""

from __future__ import annotations

import functools
import json
from typing import Any

from tests.unit.chart._promql import series_names
from tests.unit.chart._render import RELEASE, render

MONITORING_ON = {
    "monitoring": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "dashboard": {"enabled": True},
    }
}
DASHBOARD_KEY = "workflow-manager.json"


@functools.cache
def _monitored() -> tuple[dict[str, Any], ...]:
    return tuple(render(MONITORING_ON))


def monitored() -> list[dict[str, Any]]:
    """The chart with every monitoring object enabled (rendered once)."""
    return [dict(document) for document in _monitored()]


def of_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == kind]


def rule_groups() -> dict[str, Any]:
    """The PrometheusRule's spec: what promtool reads as a rules file."""
    (rule,) = of_kind(monitored(), "PrometheusRule")
    assert rule["metadata"]["name"] == RELEASE
    spec: dict[str, Any] = rule["spec"]
    return spec


def alerts() -> dict[str, dict[str, Any]]:
    """Every alerting rule by name."""
    return {
        rule["alert"]: rule
        for group in rule_groups()["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard the chart ships."""
    maps = [d for d in of_kind(monitored(), "ConfigMap") if DASHBOARD_KEY in (d.get("data") or {})]
    (config_map,) = maps
    loaded: dict[str, Any] = json.loads(config_map["data"][DASHBOARD_KEY])
    return loaded


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and query variables."""
    queries = [
        target["expr"]
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    for variable in dashboard()["templating"]["list"]:
        if variable.get("type") == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            queries.append(_variable_query_expression(text))
    return queries


def _variable_query_expression(text: str) -> str:
    """``label_values(<selector>, <label>)`` -> ``<selector>`` (Grafana's, not PromQL)."""
    prefix = "label_values("
    assert text.startswith(prefix), text
    assert text.endswith(")"), text
    selector, _, _ = text[len(prefix) : -1].rpartition(",")
    return selector


def series_read() -> dict[str, frozenset[str]]:
    """Per alert, and per dashboard query, the series names its expression reads."""
    read = {f"alert {name}": series_names(rule["expr"]) for name, rule in alerts().items()}
    for query in dashboard_queries():
        read[f"dashboard {query}"] = series_names(query)
    return read
