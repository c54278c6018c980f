"""sim/ingress.py reads a deployment's Ingress object as ingress-nginx does and renders what
ingress-nginx would for it: the auth subrequest to the Ingress's own auth-url (naming the
deployment), and each auth-response-header copied onto the proxied request."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.inference_routes import inference_ingress
from shared.inference_tokens import DeploymentRef
from sim.ingress import ExternalAuth, deployment_sites, render_config, sites_from_ingress

AUTH_URL = "http://auth.platform.svc:8120/internal/v1/inference-auth"
REF = DeploymentRef(tenant="acme", model="churn", environment="production")
HOST = "churn-production.acme.models.test"


def _ingress(**annotations: str) -> dict[str, object]:
    ingress = inference_ingress(
        REF, host=HOST, auth_url=AUTH_URL, namespace="tenant-acme", service="churn", port=80
    )
    ingress["metadata"]["annotations"].update(annotations)
    return ingress


def test_the_auth_subrequest_goes_to_the_ingress_auth_url() -> None:
    sites = sites_from_ingress(_ingress(), backends={"churn:80": "127.0.0.1:9"})
    assert [(site.host, site.backend) for site in sites] == [(HOST, "127.0.0.1:9")]
    config = render_config(
        prefix=Path("/tmp/x"),
        port=1,
        sites=sites,
        auth=ExternalAuth(servers=("127.0.0.1:2",)),
    )
    assert (
        "set $target http://inference_auth/internal/v1/inference-auth/acme/churn/production;"
        in config
    )
    assert "proxy_set_header Host auth.platform.svc;" in config
    assert "proxy_set_header X-Original-URL $scheme://$http_host$request_uri;" in config
    assert "auth_request_set $authHeader1 $upstream_http_authorization;" in config
    assert "proxy_set_header 'Authorization' $authHeader1;" in config
    assert "proxy_set_header 'X-Inference-Deployment' $authHeader0;" in config


def test_response_headers_are_split_trimmed_and_validated_as_ingress_nginx_does() -> None:
    annotation = "nginx.ingress.kubernetes.io/auth-response-headers"
    sites = sites_from_ingress(
        _ingress(**{annotation: " X-A , ,X_b"}), backends={"churn:80": "127.0.0.1:9"}
    )
    assert sites[0].auth_response_headers == ("X-A", "X_b")
    with pytest.raises(ValueError, match="invalid header"):
        sites_from_ingress(_ingress(**{annotation: "X-A, X:B"}), backends={"churn:80": "x"})


def test_deployment_sites_make_one_site_per_deployment() -> None:
    other = DeploymentRef(tenant="globex", model="churn", environment="production")
    sites = deployment_sites([REF, other], domain="models.test", backend="127.0.0.1:9")
    assert [site.host for site in sites] == [HOST, "churn-production.globex.models.test"]
    assert [site.auth_url for site in sites] == [
        "http://workflow-manager-inference-auth.workflow-manager.svc:8120"
        f"/internal/v1/inference-auth/{ref.tenant}/churn/production"
        for ref in (REF, other)
    ]
