"""Validating what stagectl.serving builds as the API server would: core kinds by
kubernetes-validate (strict), custom resources by their CRDs' schemas in crds/ (README there
names the sources), as tests/unit/_kube_schemas.py describes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests.unit._kube_schemas import Invalid, _defaulted, crd_schema
from tests.unit._kube_schemas import validate as _validate

__all__ = ["Invalid", "validate"]

CRDS = Path(__file__).parent / "crds"
K8S_VERSION = "1.37.0"
SCHEMAS = {
    ("serving.kserve.io/v1beta1", "InferenceService"): CRDS / "inferenceservice-v1beta1.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): CRDS / "httproute-v1.json",
    ("gateway.networking.k8s.io/v1beta1", "ReferenceGrant"): CRDS / "referencegrant-v1beta1.json",
    ("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy"): CRDS / "securitypolicy-v1alpha1.json",
}


def validate(obj: dict[str, Any]) -> int:
    """Any object stagectl.serving builds; the unsupported CEL rule count (0 for core kinds)."""
    return _validate(obj, version=K8S_VERSION, crds=SCHEMAS)


def defaulted(obj: dict[str, Any]) -> dict[str, Any]:
    """A custom resource as the API server stores it: its CRD's structural defaults filled in
    (another kind unchanged)."""
    key = (obj["apiVersion"], obj["kind"])
    if key not in SCHEMAS:
        return copy.deepcopy(obj)
    filled: dict[str, Any] = _defaulted(obj, crd_schema(SCHEMAS[key]))
    return filled
