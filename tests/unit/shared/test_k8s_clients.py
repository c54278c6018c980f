"""Kubernetes error translation and client construction (no sockets: nothing is requested)."""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException
from multidict import CIMultiDict, CIMultiDictProxy

from shared.config import Settings, load_settings
from shared.errors import (
    ConfigError,
    Conflict,
    DependencyDown,
    Invalid,
    NotFound,
    WorkflowManagerError,
)
from shared.k8s import (
    ClusterTls,
    Gone,
    client_from_kubeconfig,
    host_client,
    in_cluster_client,
    parse_kubeconfig,
    split_inline_tls,
    translate,
    translating,
)


def api_exception(status: int, reason: str = "", message: str = "") -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps(
        {"kind": "Status", "status": "Failure", "code": status, "reason": reason,
         "message": message}
    ).encode()  # fmt: skip
    return exc


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (404, NotFound),
        (409, Conflict),
        (410, Gone),
        (400, Invalid),
        (422, Invalid),
        (401, DependencyDown),
        (403, DependencyDown),
        (429, DependencyDown),
        (500, DependencyDown),
        (503, DependencyDown),
        (504, DependencyDown),
    ],
)
def test_translate_status(status: int, error_type: type[WorkflowManagerError]) -> None:
    error = translate(api_exception(status, "Reason", "what the API server said"))
    assert type(error) is error_type
    assert "what the API server said" in error.message
    assert error.details["status"] == status


def test_gone_is_a_conflict_with_its_own_status() -> None:
    error = translate(api_exception(410, "Expired", "too old resource version: 1 (50)"))
    assert isinstance(error, Conflict)
    assert (error.status, error.code) == (410, "gone")
    assert error.details == {"status": 410, "reason": "Expired"}


def test_credentials_refused_is_an_operator_problem_not_a_forbidden_caller() -> None:
    error = translate(api_exception(403, "Forbidden", 'cannot list "workflows"'))
    assert isinstance(error, DependencyDown)
    assert error.message.startswith("the cluster refused our credentials")


def test_retry_after_becomes_the_delay() -> None:
    exc = api_exception(429, "TooManyRequests", "slow down")
    exc.headers = CIMultiDictProxy(CIMultiDict({"Retry-After": "3"}))
    error = translate(exc)
    assert isinstance(error, DependencyDown)
    assert error.delay == 3.0


def test_non_json_body_still_translates() -> None:
    exc = ApiException(status=502, reason="Bad Gateway")
    exc.body = b"<html>bad gateway</html>"
    error = translate(exc)
    assert isinstance(error, DependencyDown)
    assert "502" in error.message


@pytest.mark.parametrize(
    "cause", [aiohttp.ClientConnectionError("refused"), TimeoutError(), ConnectionRefusedError()]
)
def test_connection_errors_are_dependency_down(cause: BaseException) -> None:
    with pytest.raises(DependencyDown) as caught, translating():
        raise cause
    assert caught.value.__cause__ is cause


def test_translating_leaves_other_errors_alone() -> None:
    with pytest.raises(KeyError), translating():
        raise KeyError("ours")


# --- kubeconfigs ----------------------------------------------------------------------------
def kubeconfig(user: dict[str, object], cluster: dict[str, object] | None = None) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "c",
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "clusters": [{"name": "k", "cluster": cluster or {"server": "http://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": user}],
        }
    )


@pytest.fixture
async def closing() -> AsyncIterator[Callable[[ApiClient], ApiClient]]:
    clients: list[ApiClient] = []

    def track(client: ApiClient) -> ApiClient:
        clients.append(client)
        return client

    yield track
    for client in clients:
        await client.close()


async def test_client_from_kubeconfig_uses_its_server_and_token(
    closing: Callable[[ApiClient], ApiClient],
) -> None:
    client = closing(await client_from_kubeconfig(kubeconfig({"token": "s3cret"})))
    assert client.configuration.host == "http://127.0.0.1:1"
    auth = await client.configuration.auth_settings()
    assert auth["BearerToken"]["value"] == "Bearer s3cret"


async def test_clients_from_kubeconfigs_are_independent(
    closing: Callable[[ApiClient], ApiClient],
) -> None:
    one = closing(await client_from_kubeconfig(kubeconfig({"token": "one"})))
    two = closing(
        await client_from_kubeconfig(kubeconfig({"token": "two"}, {"server": "http://127.0.0.2:2"}))
    )
    assert one.configuration is not two.configuration
    assert one.configuration.host != two.configuration.host
    # Nothing leaked into the library's process-wide default configuration.
    assert Configuration.get_default_copy().host != two.configuration.host


@pytest.mark.parametrize(
    ("user", "cluster", "complaint"),
    [
        ({"exec": {"command": "cat", "args": ["/etc/passwd"]}}, None, "exec"),
        ({"auth-provider": {"name": "oidc"}}, None, "auth-provider"),
        ({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}, None, "tokenFile"),
        ({"client-certificate": "/x.crt", "client-key": "/x.key"}, None, "client-certificate"),
        (
            {"token": "t"},
            {"server": "https://k", "certificate-authority": "/etc/ca.crt"},
            "certificate-authority",
        ),
    ],
)
async def test_registered_kubeconfigs_may_not_reach_our_files_or_run_programs(
    user: dict[str, object], cluster: dict[str, object] | None, complaint: str
) -> None:
    with pytest.raises(Invalid, match=complaint):
        await client_from_kubeconfig(kubeconfig(user, cluster))


@pytest.mark.parametrize(
    "text",
    [
        "::: not yaml",
        "- a list",
        kubeconfig({"token": "t"}).replace("current-context: c", "current-context: ''"),
    ],
)
def test_malformed_kubeconfigs_are_invalid(text: str) -> None:
    with pytest.raises(Invalid):
        parse_kubeconfig(text)


async def test_kubeconfig_naming_a_missing_context_is_invalid() -> None:
    text = kubeconfig({"token": "t"}).replace("current-context: c", "current-context: other")
    with pytest.raises(Invalid):
        await client_from_kubeconfig(text)


def test_errors_never_quote_the_kubeconfig() -> None:
    text = kubeconfig({"token": "SECRET-TOKEN", "exec": {"command": "x"}})
    with pytest.raises(Invalid) as caught:
        parse_kubeconfig(text)
    assert "SECRET-TOKEN" not in str(caught.value)


# --- inline TLS, kept out of the library (it would write it to temporary files) --------------
def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_split_inline_tls_takes_the_data_of_the_context_in_use() -> None:
    doc = yaml.safe_load(
        kubeconfig(
            {"token": "t", "client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")},
            {"server": "https://k:6443", "certificate-authority-data": b64("CA")},
        )
    )
    stripped, tls = split_inline_tls(doc)
    assert tls == ClusterTls("k", b"CA", b"CERT", b"KEY")
    assert stripped["clusters"][0]["cluster"] == {"server": "https://k:6443"}
    assert stripped["users"][0]["user"] == {"token": "t"}
    assert "certificate-authority-data" in doc["clusters"][0]["cluster"]  # the input is kept


def test_split_inline_tls_without_tls_data() -> None:
    _, tls = split_inline_tls(yaml.safe_load(kubeconfig({"token": "t"})))
    assert tls == ClusterTls("k")


@pytest.mark.parametrize(
    ("user", "cluster", "complaint"),
    [
        ({"token": "t"}, {"certificate-authority-data": "%%%"}, "not base64"),
        ({"token": "t"}, {"certificate-authority-data": 42}, "not base64"),
        ({"token": "t"}, {"certificate-authority-data": b64("no PEM here")}, "no PEM certificate"),
        ({"token": "t"}, {"certificate-authority-data": ""}, "no PEM certificate"),
        ({"client-certificate-data": b64("CERT")}, {}, "go together"),
        (
            {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")},
            {},
            "not a usable pair",
        ),
    ],
)
async def test_unusable_inline_tls_is_invalid_naming_the_cluster(
    user: dict[str, object], cluster: dict[str, object], complaint: str
) -> None:
    text = kubeconfig(user, {"server": "https://127.0.0.1:1", **cluster})
    with pytest.raises(Invalid, match=complaint) as caught:
        await client_from_kubeconfig(text)
    assert "cluster 'k'" in caught.value.message


# --- in-cluster and host ----------------------------------------------------------------------
@pytest.fixture
def service_account(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")
    ca.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return token, ca


async def test_in_cluster_client_uses_the_service_account(
    service_account: tuple[Path, Path], closing: Callable[[ApiClient], ApiClient]
) -> None:
    token, ca = service_account
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    client = closing(
        await in_cluster_client(environ=environ, token_path=str(token), ca_path=str(ca))
    )
    assert client.configuration.host == "https://10.0.0.1:443"
    auth = await client.configuration.auth_settings()
    assert auth["BearerToken"]["value"] == "Bearer sa-token"


async def test_in_cluster_client_with_an_unreadable_ca_is_a_config_error(
    service_account: tuple[Path, Path],
) -> None:
    token, ca = service_account
    ca.write_text("not a certificate")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match="in-cluster"):
        await in_cluster_client(environ=environ, token_path=str(token), ca_path=str(ca))


async def test_in_cluster_client_outside_a_pod_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        await in_cluster_client(environ={})


async def test_host_client_outside_a_cluster_reads_host_kubeconfig(
    tmp_path: Path, closing: Callable[[ApiClient], ApiClient]
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig({"token": "host"}, {"server": "http://127.0.0.1:6443"}))
    settings = load_settings(Settings, DATABASE_URL="postgresql://x/y", HOST_KUBECONFIG=str(path))
    client = closing(await host_client(settings, environ={}))
    assert client.configuration.host == "http://127.0.0.1:6443"


async def test_host_client_without_any_identity_is_a_config_error(tmp_path: Path) -> None:
    settings = load_settings(Settings, DATABASE_URL="postgresql://x/y", HOST_KUBECONFIG=None)
    with pytest.raises(ConfigError, match="HOST_KUBECONFIG"):
        await host_client(settings, environ={})
    missing = load_settings(
        Settings, DATABASE_URL="postgresql://x/y", HOST_KUBECONFIG=str(tmp_path / "no")
    )
    with pytest.raises(ConfigError, match="HOST_KUBECONFIG"):
        await host_client(missing, environ={})
