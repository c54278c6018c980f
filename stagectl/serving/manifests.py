"""The objects of model serving on the host cluster, one builder per object. Pure: no I/O.

A tenant ``t`` serves its models in ``kubeopera-serve-<t>``:

- the Namespace (Pod Security baseline, enforced, warned and audited; the platform's tenant
  labels), its ResourceQuota (``ML_SERVE_QUOTA_*``) and a LimitRange giving containers that
  name no resources (Knative's and KServe's own sidecars may not) defaults inside the quota;
- a NetworkPolicy: ingress only from the Knative gateway's namespace (``KNATIVE_GATEWAY``),
  the activator and autoscaler in ``knative-serving`` (scale from zero and the autoscaler's
  scrape need them) and the metrics scraper's namespace on queue-proxy's metrics port; egress
  only to cluster DNS and the object storage the models are downloaded from;
- the ServiceAccount KServe's storage initializer uses, annotated ``serving.kserve.io/s3-*``,
  listing the Secret with the tenant's model reader key (``AWS_ACCESS_KEY_ID`` /
  ``AWS_SECRET_ACCESS_KEY``, the names KServe's shipped ``inferenceservice-config`` uses): an
  IAM identity that reads only the tenant's registered models (``shared.storage_policy``).

Each deployment (model ``m``, environment ``e``) is one InferenceService (v1beta1), label
``networking.knative.dev/visibility: cluster-local`` so Knative publishes it only on the
internal gateway, and the publishing objects at ``<m>-<e>.<t>.<ML_SERVING_DOMAIN>``, behind
the token check (``shared.inference_routes``, which builds the per-route objects):

- ``ingress-nginx``: an Ingress whose ``auth-url`` names the deployment and whose
  ``upstream-vhost`` is the predictor's cluster-local host, its backend an ExternalName Service
  (in the serving namespace, as an Ingress backend must be) to ``KNATIVE_GATEWAY``;
- ``gateway-api``: an HTTPRoute on ``ML_SERVING_GATEWAY`` to the Knative gateway's Service
  with the Host rewritten, and the Envoy Gateway SecurityPolicy doing the check; the
  ReferenceGrants letting the route reach the gateway's Service and the policy the check's
  Service, each in that Service's namespace (``reference_grants``).
"""

from __future__ import annotations

import base64
import ipaddress
from typing import Any
from urllib.parse import urlsplit

from shared import labels as L
from shared.inference_routes import (
    auth_service,
    inference_http_route,
    inference_ingress,
    route_name,
    security_policy,
)
from shared.manifests import tenant_labels, tenant_object
from shared.serving import isvc_name
from stagectl.serving.params import (
    ACCESS_KEY,
    CLUSTER_LOCAL,
    DNS_NAMESPACE,
    DNS_POD_LABELS,
    ENVIRONMENT_LABEL,
    GPU_RESOURCE,
    KNATIVE_NAMESPACE,
    KNATIVE_SYSTEM_PODS,
    LIMITS_NAME,
    MODEL_LABEL,
    NETWORK_POLICY_NAME,
    POD_SECURITY_LEVEL,
    QUEUE_PROXY_METRICS_PORT,
    QUOTA_NAME,
    S3_ENDPOINT,
    S3_REGION,
    S3_USE_HTTPS,
    S3_VERIFY_SSL,
    SECRET_KEY,
    SERVICE_HOST,
    STORAGE_ACCOUNT,
    STORAGE_SECRET,
    VISIBILITY,
    Deployment,
    ServingPlatform,
    deployment_host,
    knative_service,
    predictor_host,
    serving_namespace,
    storage_port,
)


def namespace(tenant: str) -> dict[str, Any]:
    """The serving namespace: baseline Pod Security enforced, warned and audited."""
    levels = {}
    for mode, version in (
        (L.POD_SECURITY_ENFORCE, L.POD_SECURITY_ENFORCE_VERSION),
        (L.POD_SECURITY_WARN, L.POD_SECURITY_WARN_VERSION),
        (L.POD_SECURITY_AUDIT, L.POD_SECURITY_AUDIT_VERSION),
    ):
        levels[mode] = POD_SECURITY_LEVEL
        levels[version] = "latest"
    return tenant_object(
        "v1", "Namespace", serving_namespace(tenant), tenant=tenant, namespace=None, labels=levels
    )


def resource_quota(tenant: str, platform: ServingPlatform) -> dict[str, Any]:
    """``ML_SERVE_QUOTA_*`` over every pod of the namespace (requests and limits)."""
    hard = {
        "requests.cpu": platform.quota_cpu,
        "limits.cpu": platform.quota_cpu,
        "requests.memory": platform.quota_memory,
        "limits.memory": platform.quota_memory,
        f"requests.{GPU_RESOURCE}": str(platform.quota_gpu),
    }
    return tenant_object(
        "v1",
        "ResourceQuota",
        QUOTA_NAME,
        tenant=tenant,
        namespace=serving_namespace(tenant),
        spec={"hard": hard},
    )


def limit_range(tenant: str, platform: ServingPlatform) -> dict[str, Any]:
    """Defaults for a container that names no resources (the quota refuses such a pod
    otherwise), and no container above the whole quota."""
    container = {
        "type": "Container",
        "default": {"cpu": "500m", "memory": "512Mi"},
        "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
        "max": {"cpu": platform.quota_cpu, "memory": platform.quota_memory},
    }
    return tenant_object(
        "v1",
        "LimitRange",
        LIMITS_NAME,
        tenant=tenant,
        namespace=serving_namespace(tenant),
        spec={"limits": [container]},
    )


def _storage_peers(platform: ServingPlatform) -> list[dict[str, Any]]:
    host = urlsplit(f"//{platform.s3_endpoint}").hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return [{"ipBlock": {"cidr": f"{address}/{address.max_prefixlen}"}}]
    service = SERVICE_HOST.fullmatch(host)
    if service is not None:
        selector = {L.NAMESPACE_NAME: service.group("namespace")}
        return [{"namespaceSelector": {"matchLabels": selector}}]
    v4 = [c for c in platform.storage_except_cidrs if ipaddress.ip_network(c).version == 4]
    v6 = [c for c in platform.storage_except_cidrs if ipaddress.ip_network(c).version == 6]
    peers: list[dict[str, Any]] = [
        {"ipBlock": {"cidr": "0.0.0.0/0", **({"except": v4} if v4 else {})}}
    ]
    if v6:
        peers.append({"ipBlock": {"cidr": "::/0", "except": v6}})
    return peers


def _namespace_peer(name: str, pods: dict[str, Any] | None = None) -> dict[str, Any]:
    peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": {L.NAMESPACE_NAME: name}}}
    if pods is not None:
        peer["podSelector"] = pods
    return peer


def network_policy(tenant: str, platform: ServingPlatform) -> dict[str, Any]:
    """Who may reach the model servers and what they may reach (module docstring)."""
    _, gateway_namespace = knative_service(platform.knative_gateway)
    knative = {
        "matchExpressions": [{"key": "app", "operator": "In", "values": list(KNATIVE_SYSTEM_PODS)}]
    }
    ingress = [
        {"from": [_namespace_peer(gateway_namespace), _namespace_peer(KNATIVE_NAMESPACE, knative)]},
        {
            "from": [_namespace_peer(platform.metrics_namespace)],
            "ports": [{"protocol": "TCP", "port": QUEUE_PROXY_METRICS_PORT}],
        },
    ]
    egress = [
        {
            "to": [_namespace_peer(DNS_NAMESPACE, {"matchLabels": dict(DNS_POD_LABELS)})],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
        {
            "to": _storage_peers(platform),
            "ports": [{"protocol": "TCP", "port": storage_port(platform)}],
        },
    ]
    return tenant_object(
        "networking.k8s.io/v1",
        "NetworkPolicy",
        NETWORK_POLICY_NAME,
        tenant=tenant,
        namespace=serving_namespace(tenant),
        spec={
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    )


def storage_annotations(platform: ServingPlatform) -> dict[str, str]:
    """KServe's ``serving.kserve.io/s3-*`` annotations for the storage initializer."""
    return {
        S3_ENDPOINT: platform.s3_endpoint,
        S3_USE_HTTPS: "1" if platform.s3_use_https else "0",
        S3_REGION: platform.s3_region,
        S3_VERIFY_SSL: "1" if platform.s3_verify_ssl else "0",
    }


def storage_service_account(tenant: str, platform: ServingPlatform) -> dict[str, Any]:
    """The account the InferenceServices name: KServe's storage initializer takes the S3
    credentials from the Secrets it lists and the endpoint from its annotations. The model
    server itself gets no API token."""
    return tenant_object(
        "v1",
        "ServiceAccount",
        STORAGE_ACCOUNT,
        tenant=tenant,
        namespace=serving_namespace(tenant),
        annotations=storage_annotations(platform),
        secrets=[{"name": STORAGE_SECRET}],
        automountServiceAccountToken=False,
    )


def storage_secret(
    tenant: str, platform: ServingPlatform, *, access_key_id: str, secret_access_key: str
) -> dict[str, Any]:
    """The model reader's key (``shared.iam_users``), as the account's Secret."""
    return tenant_object(
        "v1",
        "Secret",
        STORAGE_SECRET,
        tenant=tenant,
        namespace=serving_namespace(tenant),
        annotations=storage_annotations(platform),
        type="Opaque",
        data={
            ACCESS_KEY: base64.b64encode(access_key_id.encode()).decode(),
            SECRET_KEY: base64.b64encode(secret_access_key.encode()).decode(),
        },
    )


def namespace_objects(tenant: str, platform: ServingPlatform) -> list[dict[str, Any]]:
    """The serving namespace and what every deployment in it shares, in apply order (the
    Secret comes from ``storage_secret`` once the key is issued)."""
    return [
        namespace(tenant),
        network_policy(tenant, platform),
        resource_quota(tenant, platform),
        limit_range(tenant, platform),
        storage_service_account(tenant, platform),
    ]


def _deployment_labels(deployment: Deployment) -> dict[str, str]:
    return {MODEL_LABEL: deployment.model, ENVIRONMENT_LABEL: deployment.environment}


def inference_service(deployment: Deployment, platform: ServingPlatform) -> dict[str, Any]:
    """The deployment's InferenceService (serving.kserve.io/v1beta1), cluster-local."""
    serving = deployment.serving
    model_format: dict[str, Any] = {"name": serving.model_format}
    if serving.model_format_version is not None:
        model_format["version"] = serving.model_format_version
    requests: dict[str, Any] = {"cpu": serving.cpu, "memory": serving.memory}
    limits: dict[str, Any] = dict(serving.limits)
    if serving.gpu:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(serving.gpu)
    model: dict[str, Any] = {
        "modelFormat": model_format,
        "storageUri": f"s3://{platform.bucket}/{deployment.storage_prefix}"
        + (deployment.model_file or ""),
        "resources": {"requests": requests, "limits": limits},
    }
    if serving.runtime is not None:
        model["runtime"] = serving.runtime
    labels = {**_deployment_labels(deployment), VISIBILITY: CLUSTER_LOCAL}
    return tenant_object(
        "serving.kserve.io/v1beta1",
        "InferenceService",
        isvc_name(deployment.model, deployment.environment),
        tenant=deployment.tenant,
        namespace=serving_namespace(deployment.tenant),
        labels=labels,
        spec={
            "predictor": {
                "serviceAccountName": STORAGE_ACCOUNT,
                "minReplicas": serving.min_replicas,
                "maxReplicas": serving.max_replicas,
                "model": model,
            }
        },
    )


def gateway_service_name(deployment: Deployment) -> str:
    """The ExternalName Service an Ingress backend names (one per deployment, like Knative's)."""
    return f"{isvc_name(deployment.model, deployment.environment)}-gateway"


def publishing_objects(deployment: Deployment, platform: ServingPlatform) -> list[dict[str, Any]]:
    """The objects publishing the deployment in the serving namespace, in apply order (the
    backend before the route). With ``gateway-api``, ``reference_grants`` are needed too."""
    ns = serving_namespace(deployment.tenant)
    host = deployment_host(deployment, platform)
    upstream = predictor_host(deployment)
    labels = _deployment_labels(deployment)
    gateway, gateway_ns = knative_service(platform.knative_gateway)
    if platform.route == "ingress-nginx":
        backend = tenant_object(
            "v1",
            "Service",
            gateway_service_name(deployment),
            tenant=deployment.tenant,
            namespace=ns,
            labels=labels,
            spec={
                "type": "ExternalName",
                "externalName": f"{gateway}.{gateway_ns}.svc.cluster.local",
                "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}],
            },
        )
        ingress = inference_ingress(
            deployment.ref,
            host=host,
            auth_url=platform.auth_url,
            namespace=ns,
            service=backend["metadata"]["name"],
            port=80,
            ingress_class=platform.ingress_class,
            upstream_vhost=upstream,
        )
        ingress["metadata"]["labels"] = tenant_labels(deployment.tenant, labels)
        return [backend, ingress]
    route = inference_http_route(
        deployment.ref,
        host=host,
        namespace=ns,
        gateway_namespace=platform.gateway_namespace,
        gateway=platform.gateway,
        service=gateway,
        service_namespace=gateway_ns,
        port=80,
        upstream_host=upstream,
    )
    policy = security_policy(
        deployment.ref, auth_url=platform.auth_url, namespace=ns, route=route_name(deployment.ref)
    )
    for obj in (route, policy):
        obj["metadata"]["labels"] = tenant_labels(deployment.tenant, labels)
    return [route, policy]


def reference_grants(tenant: str, platform: ServingPlatform) -> list[dict[str, Any]]:
    """With ``gateway-api``: the ReferenceGrants (gateway.networking.k8s.io/v1beta1, served
    by every release with v1 HTTPRoutes) letting the tenant's HTTPRoutes reach the Knative
    gateway's Service and its SecurityPolicies the check's Service, each in the Service's own
    namespace and named after the serving namespace. None in the same namespace."""
    if platform.route != "gateway-api":
        return []
    ns = serving_namespace(tenant)
    gateway, gateway_ns = knative_service(platform.knative_gateway)
    check, check_ns, _ = auth_service(platform.auth_url)
    grants = []
    for target_ns, service, group, kind in (
        (gateway_ns, gateway, "gateway.networking.k8s.io", "HTTPRoute"),
        (check_ns, check, "gateway.envoyproxy.io", "SecurityPolicy"),
    ):
        if target_ns == ns:
            continue
        grants.append(
            tenant_object(
                "gateway.networking.k8s.io/v1beta1",
                "ReferenceGrant",
                f"{ns}-{kind.lower()}",
                tenant=tenant,
                namespace=target_ns,
                spec={
                    "from": [{"group": group, "kind": kind, "namespace": ns}],
                    "to": [{"group": "", "kind": "Service", "name": service}],
                },
            )
        )
    return grants
