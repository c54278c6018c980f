"""Per-route identity (shared/inference_routes.py): what the platform writes into each Ingress
and SecurityPolicy, and the deployment the check reads back from its path."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import inference_routes as R
from shared.identifiers import TENANT_ID
from shared.inference_tokens import ENVIRONMENT, MODEL_NAME, DeploymentRef

AUTH_URL = (
    "http://workflow-manager-inference-auth.workflow-manager.svc:8120/internal/v1/inference-auth"
)
REF = DeploymentRef(tenant="acme", model="churn-v2", environment="production")
ROUTE = "/internal/v1/inference-auth/acme/churn-v2/production"

tenants = st.from_regex(TENANT_ID, fullmatch=True)
models = st.from_regex(MODEL_NAME, fullmatch=True)
environments = st.from_regex(ENVIRONMENT, fullmatch=True)
refs = st.builds(DeploymentRef, tenant=tenants, model=models, environment=environments)


def test_the_auth_url_names_the_deployment() -> None:
    assert R.deployment_path(REF) == ROUTE
    assert R.deployment_auth_url(REF, auth_url=AUTH_URL) == (
        "http://workflow-manager-inference-auth.workflow-manager.svc:8120" + ROUTE
    )
    assert R.deployment_auth_url(REF, auth_url=AUTH_URL + "/") == R.deployment_auth_url(
        REF, auth_url=AUTH_URL
    )
    assert R.deployment_auth_url(REF, auth_url="https://10.0.0.7" + R.AUTH_PATH) == (
        "https://10.0.0.7" + ROUTE
    )


def test_the_ingress_carries_the_auth_url_and_strips_the_token() -> None:
    ingress = R.inference_ingress(
        REF,
        host="churn-v2-production.acme.models.example.com",
        auth_url=AUTH_URL,
        namespace="tenant-acme",
        service="churn-v2-production-predictor",
        port=80,
        ingress_class="nginx",
        tls_secret="acme-wildcard",
    )
    annotations = ingress["metadata"]["annotations"]
    assert annotations == {
        "nginx.ingress.kubernetes.io/auth-url": R.deployment_auth_url(REF, auth_url=AUTH_URL),
        "nginx.ingress.kubernetes.io/auth-response-headers": "X-Inference-Deployment,Authorization",
    }
    assert not any("snippet" in key or "auth-cache" in key for key in annotations)
    assert ingress["metadata"]["namespace"] == "tenant-acme"
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [
        {"hosts": ["churn-v2-production.acme.models.example.com"], "secretName": "acme-wildcard"}
    ]
    (rule,) = spec["rules"]
    assert rule["host"] == "churn-v2-production.acme.models.example.com"
    (path,) = rule["http"]["paths"]
    assert path["backend"] == {
        "service": {"name": "churn-v2-production-predictor", "port": {"number": 80}}
    }
    bare = R.inference_ingress(
        REF, host="h.example.com", auth_url=AUTH_URL, namespace="n", service="s", port=1
    )
    assert "tls" not in bare["spec"]
    assert "ingressClassName" not in bare["spec"]


def test_the_security_policy_path_names_the_deployment() -> None:
    policy = R.security_policy(REF, auth_url=AUTH_URL, namespace="tenant-acme", route="churn")
    assert policy["kind"] == "SecurityPolicy"
    assert policy["spec"]["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "churn"}
    ]
    ext_auth = policy["spec"]["extAuth"]
    assert ext_auth["failOpen"] is False
    assert ext_auth["headersToExtAuth"] == ["authorization"]
    assert ext_auth["http"] == {
        "backendRefs": [
            {
                "name": "workflow-manager-inference-auth",
                "namespace": "workflow-manager",
                "port": 8120,
            }
        ],
        "path": ROUTE,
        "headersToBackend": ["x-inference-deployment"],
    }
    https = R.security_policy(
        REF,
        auth_url="https://auth.platform.svc.cluster.local" + R.AUTH_PATH,
        namespace="n",
        route="r",
    )
    assert https["spec"]["extAuth"]["http"]["backendRefs"][0] == {
        "name": "auth",
        "namespace": "platform",
        "port": 443,
    }
    with pytest.raises(ValueError, match="Service"):
        R.security_policy(
            REF, auth_url="http://auth.example.com" + R.AUTH_PATH, namespace="n", route="r"
        )


@pytest.mark.parametrize(
    "auth_url",
    [
        "",
        "workflow-manager-inference-auth:8120/internal/v1/inference-auth",
        "ftp://auth/internal/v1/inference-auth",
        "http://auth/internal/v1/other",
        "http://auth/",
        "http://auth/internal/v1/inference-auth?x=1",
        "http://auth/internal/v1/inference-auth#x",
        "http://user@auth/internal/v1/inference-auth",
        "http://$host/internal/v1/inference-auth",
        "http://auth:0/internal/v1/inference-auth",
        "http://auth:70000/internal/v1/inference-auth",
        "http://auth:x/internal/v1/inference-auth",
        "http://Auth/internal/v1/inference-auth",
        "http://-auth/internal/v1/inference-auth",
        "http://auth/internal/v1/inference-auth/acme/churn/production",
        "http://auth/internal/v1/inference-auth%2F",
        "http://au th/internal/v1/inference-auth",
        "http://[::1]/internal/v1/inference-auth",
    ],
)
def test_a_bad_inference_auth_url_is_refused(auth_url: str) -> None:
    with pytest.raises(ValueError, match="INFERENCE_AUTH_URL"):
        R.deployment_auth_url(REF, auth_url=auth_url)


@pytest.mark.parametrize(
    "ref",
    [
        DeploymentRef(tenant="ACME", model="churn", environment="production"),
        DeploymentRef(tenant="acme", model="churn/x", environment="production"),
        DeploymentRef(tenant="acme", model="churn", environment="prod-eu"),
        DeploymentRef(tenant="acme", model="churn", environment="production?x=1"),
        DeploymentRef(tenant="acme", model="", environment="production"),
    ],
)
def test_a_route_is_never_built_for_a_part_outside_the_scheme(ref: DeploymentRef) -> None:
    with pytest.raises(ValueError, match=r"^(tenant|model|environment):"):
        R.deployment_path(ref)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (ROUTE, REF),
        (ROUTE + "?x=1", REF),
        (ROUTE + "/", REF),
        (ROUTE + "/v1/models/churn-v2:predict?explain=1", REF),
        # Envoy appends the client's path: what follows the third segment is never read.
        (ROUTE + "/../../globex/fraud/production", REF),
        (ROUTE + "//globex/fraud/production", REF),
        (R.AUTH_PATH, None),
        (R.AUTH_PATH + "/", None),
        (R.AUTH_PATH + "?acme/churn-v2/production", None),
        (R.AUTH_PATH + "/acme/churn-v2", None),
        (R.AUTH_PATH + "/acme/churn-v2/", None),
        (R.AUTH_PATH + "/acme/churn-v2/production:predict", None),
        (R.AUTH_PATH + "/acme/churn-v2/production%2F", None),
        (R.AUTH_PATH + "/acme/churn-v2%2Fproduction/x", None),
        (R.AUTH_PATH + "/ACME/churn-v2/production", None),
        (R.AUTH_PATH + "//acme/churn-v2/production", None),
        (R.AUTH_PATH + "/acme/churn-v2/prod-eu", None),
        (R.AUTH_PATH + "/v1/models/churn:predict", None),
        (R.AUTH_PATH + "x/acme/churn-v2/production", None),
        ("/internal/v1/other/acme/churn-v2/production", None),
        ("/acme/churn-v2/production", None),
        ("", None),
    ],
)
def test_the_deployment_is_read_back_from_the_check_path(
    path: str, expected: DeploymentRef | None
) -> None:
    assert R.deployment_of_path(path) == expected


@given(refs, st.text(max_size=60))
def test_every_route_reads_back_as_its_deployment_whatever_envoy_appends(
    ref: DeploymentRef, client_path: str
) -> None:
    """Envoy's check path is the configured path + the client's path (which begins with /)
    and query; nginx requests the auth-url as written."""
    route = R.deployment_path(ref)
    assert R.deployment_of_path(route) == ref
    assert R.deployment_of_path(route + "/" + client_path) == ref
    assert R.deployment_of_path(route + "?" + client_path) == ref
    url = R.deployment_auth_url(ref, auth_url=AUTH_URL)
    assert url.endswith(route)


@given(st.text(alphabet=st.sampled_from("acme-churn/prod?%:.X"), max_size=60) | st.text())
def test_a_path_names_a_deployment_only_as_its_whole_route(text: str) -> None:
    """Whatever follows the prefix: either no deployment, or one whose route is the path's
    beginning, followed by its end, `/` or `?`."""
    path = R.AUTH_PATH + "/" + text
    ref = R.deployment_of_path(path)
    if ref is not None:
        route = R.deployment_path(ref)
        assert path.startswith(route)
        assert path[len(route) : len(route) + 1] in ("", "/", "?")


@given(st.one_of(st.text(max_size=200), st.none(), st.integers(), st.binary(max_size=50)))
def test_reading_never_raises(value: object) -> None:
    R.deployment_of_path(value)  # type: ignore[arg-type]


@given(refs)
def test_the_auth_url_passes_ingress_nginx_validation(ref: DeploymentRef) -> None:
    """ingress-nginx's authreq parser accepts `auth-url` matching its URL regular expression
    (letters, digits and -._~/:,?&=$ plus space); nothing else may appear, nor `%` or `$`."""
    url = R.deployment_auth_url(ref, auth_url=AUTH_URL)
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/:")
    assert set(url) <= allowed
