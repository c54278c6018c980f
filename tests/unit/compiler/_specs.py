"""Provisioning specifications the compiler's provisioning, drift and chart tests share."""

from __future__ import annotations

import dataclasses
from typing import Any

from compiler.tenants.provisioning import ProvisioningSpec, tenant_objects

TENANT = "acme"
NAMESPACE = "kubeopera-data-acme"
SPEC = ProvisioningSpec(
    quota_cpu="8",
    quota_memory="16Gi",
    quota_pods=50,
    quota_gpu=4,
    max_cpu="4",
    max_memory="8Gi",
    max_gpu=2,
    egress_ports=(443,),
    egress_except_cidrs=("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
    artifact_bucket="kubeopera-artifacts",
    region="eu-north-1",
    s3_endpoint="s3.eu-north-1.amazonaws.com",
    tracking_host="mlflow.kubeopera-mlflow.svc.cluster.local",
    tracking_port=5000,
    api_server_cidrs=("172.18.0.2/32",),
    api_server_ports=(6443,),
)
NO_GPU = dataclasses.replace(SPEC, quota_gpu=0, max_gpu=0)
BARE = dataclasses.replace(
    NO_GPU, tracking_host=None, tracking_port=None, api_server_cidrs=(), api_server_ports=()
)


def objects(spec: ProvisioningSpec = SPEC, tenant: str = TENANT) -> dict[tuple[str, str], Any]:
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in tenant_objects(tenant, spec)}


def one(kind: str, name: str, spec: ProvisioningSpec = SPEC) -> dict[str, Any]:
    found: dict[str, Any] = objects(spec)[(kind, name)]
    return found
