"""The chart rendered by Helm's own engine (helm-python-sdk binds Helm v4's Go SDK): no cluster
is contacted, exactly what ``helm template`` would print."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from tests.unit.chart._rbac import Account

CHART = Path(__file__).resolve().parents[3] / "charts/workflow-manager"
RELEASE = "wm"
RELEASE_NAMESPACE = "workflow-manager"
COMPILER = Account(RELEASE_NAMESPACE, f"{RELEASE}-compiler")
STAGECTL = Account(RELEASE_NAMESPACE, f"{RELEASE}-stagectl")
# Kinds of the chart's that live in a namespace: without one, Helm installs them in the release's.
_NAMESPACED = frozenset(
    {
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "ServiceAccount",
        "ConfigMap",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "ServiceMonitor",
        "PrometheusRule",
    }
)


@functools.cache
def _chart() -> helm.Chart:
    return helm.Chart.load(CHART)


def render(values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every manifest of the chart installed as ``wm`` in ``workflow-manager``."""
    manifests = _chart().render(
        dict(values) if values else None, name=RELEASE, namespace=RELEASE_NAMESPACE
    )
    documents: list[dict[str, Any]] = []
    for _, text in sorted(manifests.items()):
        for document in yaml.safe_load_all(text):
            if not document:
                continue
            if document["kind"] in _NAMESPACED:
                document["metadata"].setdefault("namespace", RELEASE_NAMESPACE)
            documents.append(document)
    return documents


@functools.cache
def _default() -> tuple[dict[str, Any], ...]:
    return tuple(render())


def rendered() -> list[dict[str, Any]]:
    """The chart with its default values (rendered once)."""
    return [dict(document) for document in _default()]


def find(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for document in documents:
        if document["kind"] == kind and document["metadata"]["name"] == name:
            return document
    raise AssertionError(f"no {kind} {name} in the chart")


def compiler_env(documents: list[dict[str, Any]]) -> dict[str, str]:
    """The compiler container's plain environment, POD_NAMESPACE as the downward API gives it."""
    deployment = find(documents, "Deployment", f"{RELEASE}-compiler")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    env["POD_NAMESPACE"] = deployment["metadata"]["namespace"]
    return env
