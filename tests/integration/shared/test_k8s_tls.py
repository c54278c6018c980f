"""Clusters reached over TLS: the client's TLS context is built in memory (the chart's root
filesystem is read-only), and a refused server certificate is our own error naming the cluster."""

from __future__ import annotations

import datetime
import errno
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trustme
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from shared.argo import ArgoServer
from shared.config import Settings, load_settings
from shared.errors import CertificateRefused, DependencyDown
from shared.k8s import client_from_kubeconfig, host_client, translating
from sim.kube.certificates import issue_client_cert
from sim.kube.server import RunningCluster, kubeconfig_yaml, start_cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def read_only_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way `tempfile` makes a file fails, as on a read-only root filesystem."""

    def refuse(*_: object, **__: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    for name in ("mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryFile"):
        monkeypatch.setattr(tempfile, name, refuse)


@pytest.fixture
async def ca_cluster() -> AsyncIterator[RunningCluster]:
    """A cluster whose CA is new to this process (kubernetes-asyncio reuses a temporary file
    it already wrote for the same CA, which would hide a write)."""
    running = await start_cluster("tls-cluster", ca=trustme.CA())
    try:
        yield running
    finally:
        await running.stop()


async def kube_system_uid(client: ApiClient) -> str:
    try:
        with translating():
            namespace = await CoreV1Api(client).read_namespace("kube-system")
        return str(namespace.metadata.uid)
    finally:
        await client.close()


async def test_a_registered_kubeconfig_with_a_ca_connects_without_writing_a_file(
    ca_cluster: RunningCluster, read_only_tmp: None
) -> None:
    assert "certificate-authority-data" in ca_cluster.kubeconfig
    assert ca_cluster.url.startswith("https://")
    client = await client_from_kubeconfig(ca_cluster.kubeconfig)
    assert await kube_system_uid(client) == ca_cluster.kube_system_uid


async def test_a_client_certificate_authenticates_without_writing_a_file(
    ca_cluster: RunningCluster, read_only_tmp: None
) -> None:
    assert ca_cluster.ca is not None
    certificate = issue_client_cert(ca_cluster.ca, "cluster-admin")
    text = kubeconfig_yaml("tls-cluster", ca_cluster.url, None, ca=ca_cluster.ca)
    with pytest.raises(DependencyDown, match="refused our credentials"):
        await kube_system_uid(await client_from_kubeconfig(text))  # neither token nor cert
    text = kubeconfig_yaml(
        "tls-cluster", ca_cluster.url, None, ca=ca_cluster.ca, client_cert=certificate
    )
    client = await client_from_kubeconfig(text)
    assert await kube_system_uid(client) == ca_cluster.kube_system_uid


async def test_host_kubeconfig_with_a_ca_connects_without_writing_a_file(
    ca_cluster: RunningCluster, tmp_path: Path, read_only_tmp: None
) -> None:
    path = tmp_path / "host.kubeconfig"
    path.write_text(ca_cluster.kubeconfig)
    settings = load_settings(Settings, DATABASE_URL="postgresql://x/y", HOST_KUBECONFIG=str(path))
    client = await host_client(settings, environ={})
    assert await kube_system_uid(client) == ca_cluster.kube_system_uid


@pytest.fixture
async def expired_cluster() -> AsyncIterator[RunningCluster]:
    yesterday = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    running = await start_cluster("expired-cluster", certificate_expires=yesterday)
    try:
        yield running
    finally:
        await running.stop()


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("unknown CA", "not signed by a CA the kubeconfig trusts"),
        ("wrong name", "Hostname mismatch, certificate is not valid for 'api.elsewhere.example'"),
        ("expired", "certificate has expired"),
    ],
)
async def test_a_refused_certificate_names_the_cluster_and_why(
    ca_cluster: RunningCluster, expired_cluster: RunningCluster, case: str, reason: str
) -> None:
    cluster = expired_cluster if case == "expired" else ca_cluster
    text = kubeconfig_yaml(
        cluster.name,
        cluster.url,
        cluster.token,
        ca=trustme.CA() if case == "unknown CA" else cluster.ca,
        tls_server_name="api.elsewhere.example" if case == "wrong name" else None,
    )
    client = await client_from_kubeconfig(text)
    try:
        with pytest.raises(CertificateRefused) as refused:
            await CoreV1Api(client).read_namespace("kube-system")
        with pytest.raises(CertificateRefused):  # the Argo server, through the service proxy
            await ArgoServer(client, timeout=5.0).version()
    finally:
        await client.close()
    message = refused.value.message
    assert message.startswith(f"cluster {cluster.name!r}: the API server's TLS certificate ")
    assert cluster.url not in message  # apiserver callers see this message
    assert reason in message
    assert refused.value.details["cluster"] == cluster.name
    assert refused.value.retryable
