"""What checks each object the chart renders, offline (tests/unit/_kube_schemas.py): the core
kinds by kubernetes-validate in strict mode, the Prometheus Operator's by their CRDs' schemas
(crds/, README there names the sources). A kind neither covers is refused as ``Unchecked``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit._kube_schemas import validate as _validate

CRDS = Path(__file__).parent / "crds"
CUSTOM = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): CRDS / "servicemonitor-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): CRDS / "prometheusrule-v1.json",
}
# The oldest Kubernetes the chart installs on (Chart.yaml kubeVersion) and the newest
# kubernetes-validate knows.
VERSIONS = ("1.30.0", "1.37.0")


def validate(document: dict[str, Any], version: str) -> None:
    """Raise unless ``document`` is valid for Kubernetes ``version``, every CEL rule of its
    CRD (if any) evaluated."""
    unsupported = _validate(document, version=version, crds=CUSTOM)
    assert unsupported == 0, f"{document['kind']}: {unsupported} CEL rules not evaluated"
