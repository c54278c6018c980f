"""Kubernetes clients (kubernetes-asyncio) and the translation of their errors into ours.

One ``ApiClient`` per cluster: built from the kubeconfig text the cluster registry holds (never
from files or the library's global default configuration), or from the pod's service account
on the host cluster. Every adapter wraps its calls in ``translating()`` (or calls
``translate``) so callers only ever see ``shared.errors`` types.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import os
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTClientObject
from kubernetes_asyncio.config import ConfigException
from kubernetes_asyncio.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)
from kubernetes_asyncio.config.kube_config import KubeConfigLoader

from shared.config import Settings
from shared.errors import (
    CertificateRefused,
    ConfigError,
    Conflict,
    DependencyDown,
    Invalid,
    NotFound,
    WorkflowManagerError,
)


class Gone(Conflict):
    """410: a watch or list resumed from a resourceVersion the server no longer has: relist."""

    status = 410
    code = "gone"


# --- error translation ----------------------------------------------------------------------
def status_of(body: str | bytes | None) -> tuple[str | None, str | None]:
    """(message, reason) of a Kubernetes ``Status`` body, or (None, None). Purely computational."""
    if not body:
        return None, None
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None, None
    if not isinstance(doc, dict):
        return None, None
    message, reason = doc.get("message"), doc.get("reason")
    return (
        message if isinstance(message, str) else None,
        reason if isinstance(reason, str) else None,
    )


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from a ``Retry-After`` header given in seconds. Purely computational."""
    if not headers:
        return None
    value = headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def translate_status(
    status: int,
    body: str | bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> WorkflowManagerError:
    """The shared error for a Kubernetes API answer with HTTP ``status``. Purely computational."""
    message, reason = status_of(body)
    details: dict[str, Any] = {"status": status}
    if reason:
        details["reason"] = reason
    text = message or f"the Kubernetes API answered HTTP {status}"
    if status == 404:
        return NotFound(text, details=details)
    if status == 409:
        return Conflict(text, details=details)
    if status == 410:
        return Gone(text, details=details)
    if status in (400, 422):
        return Invalid(text, details=details)
    if status in (401, 403):
        # Our own credentials are refused or lack a right: an operator must act.
        return DependencyDown(f"the cluster refused our credentials: {text}", details=details)
    if status == 429 or status >= 500:
        return DependencyDown(text, details=details, delay=retry_after(headers))
    if status == 0:
        return WorkflowManagerError(text, details=details)
    return Invalid(text, details=details)


def translate(exc: BaseException) -> WorkflowManagerError:
    """The shared error for what a kubernetes-asyncio call raised."""
    if isinstance(exc, WorkflowManagerError):
        return exc
    if isinstance(exc, ApiException):
        return translate_status(int(exc.status or 0), exc.body, exc.headers)
    if isinstance(exc, aiohttp.ClientError | OSError | TimeoutError):
        return DependencyDown(
            "the Kubernetes API could not be reached",
            details={"error": type(exc).__name__},
        )
    return WorkflowManagerError(f"unexpected Kubernetes client error: {type(exc).__name__}")


_TRANSLATED = (ApiException, aiohttp.ClientError, OSError, TimeoutError)


@contextmanager
def translating() -> Iterator[None]:
    """Re-raise Kubernetes client errors inside the block as shared errors (``from`` them)."""
    try:
        yield
    except _TRANSLATED as exc:
        raise translate(exc) from exc


# --- clients --------------------------------------------------------------------------------
# Kubeconfig entries that would make us run a program or read a file of *our* pod (its service
# account token, say) on behalf of whoever registered the cluster. Only inline data is accepted.
_FORBIDDEN_USER_KEYS = ("exec", "auth-provider", "tokenFile", "client-certificate", "client-key")
_FORBIDDEN_CLUSTER_KEYS = ("certificate-authority",)


def parse_kubeconfig(text: str) -> dict[str, Any]:
    """Parse and vet a registered kubeconfig; raise Invalid naming what is refused.

    Purely computational. The kubeconfig itself is never put in a message (it holds secrets).
    """
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise Invalid("the kubeconfig is not valid YAML") from exc
    if not isinstance(doc, dict):
        raise Invalid("the kubeconfig is not a YAML mapping")
    for section, entry_key, forbidden in (
        ("users", "user", _FORBIDDEN_USER_KEYS),
        ("clusters", "cluster", _FORBIDDEN_CLUSTER_KEYS),
    ):
        entries = doc.get(section) or []
        if not isinstance(entries, list):
            raise Invalid(f"kubeconfig {section} is not a list")
        for entry in entries:
            body = entry.get(entry_key) if isinstance(entry, dict) else None
            if not isinstance(body, dict):
                raise Invalid(f"kubeconfig {section} entry has no {entry_key} mapping")
            refused = sorted(key for key in forbidden if key in body)
            if refused:
                raise Invalid(
                    f"kubeconfig {entry_key} {entry.get('name')!r} uses {', '.join(refused)}: "
                    "only inline credentials (token, *-data) are accepted"
                )
    if not doc.get("current-context"):
        raise Invalid("the kubeconfig names no current-context")
    return doc


# Inline TLS material. kubernetes-asyncio writes each of these to a temporary file so that
# ssl can load it by path, which fails on a read-only root filesystem: we take them out of the
# kubeconfig before the library sees it and build the TLS context from them in memory.
_INLINE_TLS = {
    "clusters": ("certificate-authority-data",),
    "users": ("client-certificate-data", "client-key-data"),
}


@dataclass(frozen=True, slots=True)
class ClusterTls:
    """The TLS a kubeconfig's context asks for, decoded (PEM); None where it says nothing."""

    cluster: str  # the kubeconfig's name for the cluster, which errors name
    ca: bytes | None = None
    client_cert: bytes | None = None
    client_key: bytes | None = None


def _entry(doc: Mapping[str, Any], section: str, name: Any) -> Mapping[str, Any]:
    """The body of the entry called `name` in `section` (clusters → cluster, ...), or {}."""
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(section[:-1])
            return body if isinstance(body, dict) else {}
    return {}


def _decoded(body: Mapping[str, Any], key: str, *, where: str) -> bytes | None:
    value = body.get(key)
    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise ValueError(key)
        return base64.b64decode("".join(value.split()), validate=True)
    except (ValueError, binascii.Error) as exc:
        raise Invalid(f"kubeconfig {where}: {key} is not base64") from exc


def split_inline_tls(
    doc: Mapping[str, Any], *, context: str | None = None
) -> tuple[dict[str, Any], ClusterTls]:
    """(the kubeconfig without inline TLS data, that data decoded for the context in use).

    Purely computational; Invalid when the data is not base64.
    """
    names = _entry(doc, "contexts", context or doc.get("current-context"))
    cluster_name = str(names.get("cluster") or "")
    cluster = _entry(doc, "clusters", names.get("cluster"))
    user = _entry(doc, "users", names.get("user"))
    where = f"cluster {cluster_name!r}"
    tls = ClusterTls(
        cluster=cluster_name,
        ca=_decoded(cluster, "certificate-authority-data", where=where),
        client_cert=_decoded(user, "client-certificate-data", where=f"user of {where}"),
        client_key=_decoded(user, "client-key-data", where=f"user of {where}"),
    )
    stripped = copy.deepcopy(dict(doc))
    for section, keys in _INLINE_TLS.items():
        for entry in stripped.get(section) or []:
            body = entry.get(section[:-1]) if isinstance(entry, dict) else None
            if isinstance(body, dict):
                for key in keys:
                    body.pop(key, None)
    return stripped, tls


def tls_context(tls: ClusterTls, configuration: Configuration) -> ssl.SSLContext:
    """The client's TLS context, built in memory from `tls`; files only where the operator's
    own kubeconfig (or the pod's service account) names them, as `configuration` holds them."""
    if tls.ca is None:
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    else:
        try:
            if not tls.ca.strip():  # ssl would quietly trust the system's CAs instead
                raise ValueError("empty")
            context = ssl.create_default_context(cadata=tls.ca.decode("ascii"))
        except (ssl.SSLError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise Invalid(
                f"kubeconfig cluster {tls.cluster!r}: certificate-authority-data "
                "holds no PEM certificate"
            ) from exc
    if tls.client_cert is not None or tls.client_key is not None:
        _load_client_certificate(context, tls)
    elif configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:  # the kubeconfig's insecure-skip-tls-verify
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_client_certificate(context: ssl.SSLContext, tls: ClusterTls) -> None:
    """ssl loads a certificate and its key only by path: hand it anonymous in-memory files
    (Linux memfd, opened through /proc/self/fd), so nothing is written to any filesystem."""
    where = f"kubeconfig user of cluster {tls.cluster!r}"
    if tls.client_cert is None or tls.client_key is None:
        raise Invalid(f"{where}: client-certificate-data and client-key-data go together")
    if not hasattr(os, "memfd_create"):
        raise Invalid(f"{where}: client certificates need Linux (memfd); use a token")
    descriptors: list[int] = []
    try:
        for label, data in (("client-cert", tls.client_cert), ("client-key", tls.client_key)):
            descriptor = os.memfd_create(label, os.MFD_CLOEXEC)
            descriptors.append(descriptor)
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
        cert_path, key_path = (f"/proc/self/fd/{d}" for d in descriptors)
        context.load_cert_chain(cert_path, keyfile=key_path)
    except ssl.SSLError as exc:
        raise Invalid(
            f"{where}: client-certificate-data and client-key-data are not a usable pair"
        ) from exc
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


# OpenSSL's verify codes for a chain that ends in no CA the client trusts.
_UNTRUSTED_CODES = frozenset({2, 18, 19, 20, 21})


def certificate_refused(
    exc: aiohttp.ClientConnectorCertificateError, *, cluster: str
) -> CertificateRefused:
    """Our error for a refused server certificate, naming the cluster. Purely computational.

    The server's address stays out: callers of the apiserver see this message.
    """
    cause = exc.certificate_error
    reason = str(getattr(cause, "verify_message", None) or cause).rstrip(".")
    if getattr(cause, "verify_code", None) in _UNTRUSTED_CODES:
        reason += " (not signed by a CA the kubeconfig trusts: check certificate-authority-data)"
    return CertificateRefused(
        f"cluster {cluster!r}: the API server's TLS certificate was refused: {reason}",
        details={"cluster": cluster, "reason": reason},
    )


class _ClusterRestClient(RESTClientObject):
    """The library's REST client over a TLS context built by ``tls_context``, raising
    ``CertificateRefused`` for a refused server certificate.

    ``RESTClientObject.__init__`` is not called: it would build its own context from file
    paths. The session is set up here as the library sets it up.
    """

    def __init__(
        self, configuration: Configuration, *, context: ssl.SSLContext, tls: ClusterTls
    ) -> None:
        # The library keeps None where these are unset; "" and {} test false alike in request().
        self.server_hostname = configuration.tls_server_name or ""
        self.proxy = configuration.proxy or ""
        self.proxy_headers = configuration.proxy_headers or {}
        self.pool_manager = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=configuration.connection_pool_maxsize, ssl=context
            ),
            trust_env=True,
            read_bufsize=2**21,  # as the library: a watch event can carry a 1.5 MiB object
        )
        self._tls = tls

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().request(*args, **kwargs)
        except aiohttp.ClientConnectorCertificateError as exc:
            raise certificate_refused(exc, cluster=self._tls.cluster) from exc


async def _api_client(configuration: Configuration, tls: ClusterTls) -> ApiClient:
    context = tls_context(tls, configuration)
    client = ApiClient(configuration=configuration)
    await client.rest_client.close()  # the library's own, never used: ours replaces it
    client.rest_client = _ClusterRestClient(configuration, context=context, tls=tls)
    return client


def _new_configuration() -> Configuration:
    # Configuration() copies the library's process-wide default; type.__call__ does not.
    configuration: Configuration = type.__call__(Configuration)
    return configuration


async def _client_from_config(
    doc: Mapping[str, Any], *, context: str | None, base_path: str
) -> ApiClient:
    """An ApiClient for a parsed kubeconfig; the library's errors are the caller's to map."""
    stripped, tls = split_inline_tls(doc, context=context)
    configuration = _new_configuration()
    loader = KubeConfigLoader(
        config_dict=stripped, active_context=context, config_base_path=base_path
    )
    await loader.load_and_set(configuration)
    return await _api_client(configuration, tls)


async def client_from_kubeconfig(text: str, *, context: str | None = None) -> ApiClient:
    """An ApiClient for the cluster a registered kubeconfig describes (inline credentials only).

    Raises Invalid when the kubeconfig is malformed or asks for files or plugins. Nothing is
    written to disk: the TLS context is built in memory.
    """
    doc = parse_kubeconfig(text)
    try:
        return await _client_from_config(doc, context=context, base_path="")
    except (ConfigException, AssertionError, KeyError, TypeError, ValueError) as exc:
        raise Invalid(f"the kubeconfig cannot be used: {type(exc).__name__}") from exc


async def in_cluster_client(
    *,
    environ: Mapping[str, str] = os.environ,
    token_path: str = SERVICE_TOKEN_FILENAME,
    ca_path: str = SERVICE_CERT_FILENAME,
) -> ApiClient:
    """An ApiClient with the pod's service account (the token is re-read as it rotates)."""
    configuration = _new_configuration()
    try:
        InClusterConfigLoader(
            token_filename=token_path, cert_filename=ca_path, environ=dict(environ)
        ).load_and_set(configuration)
        return await _api_client(configuration, ClusterTls("in-cluster"))
    except (ConfigException, OSError, ssl.SSLError) as exc:
        raise ConfigError(f"in-cluster Kubernetes identity unusable: {exc}") from exc


async def host_client(settings: Settings, *, environ: Mapping[str, str] = os.environ) -> ApiClient:
    """The host cluster: in-cluster identity inside a pod, else the HOST_KUBECONFIG file.

    The file is the operator's own (a developer's kind or EKS context), so unlike a registered
    kubeconfig it may use exec plugins and file references (relative to the file).
    """
    if environ.get(SERVICE_HOST_ENV_NAME):
        return await in_cluster_client(environ=environ)
    if not settings.HOST_KUBECONFIG:
        raise ConfigError(
            "HOST_KUBECONFIG: required outside a Kubernetes pod (KUBERNETES_SERVICE_HOST unset)"
        )
    path = Path(settings.HOST_KUBECONFIG)
    try:
        doc = yaml.safe_load(path.read_text())  # noqa: ASYNC240 - once, at startup
        if not isinstance(doc, dict):
            raise TypeError("not a mapping")
        return await _client_from_config(doc, context=None, base_path=str(path.parent.absolute()))
    except (
        OSError,
        yaml.YAMLError,
        ConfigException,
        AssertionError,
        KeyError,
        TypeError,
        Invalid,
    ) as exc:
        raise ConfigError(f"HOST_KUBECONFIG: cannot be used ({type(exc).__name__})") from exc
