"""Kubernetes clients (kubernetes-asyncio) and the translation of their errors into ours.

One ``ApiClient`` per cluster: built from the kubeconfig text the cluster registry holds (never
from files or the library's global default configuration), or from the pod's service account
on the host cluster. Every adapter wraps its calls in ``translating()`` (or calls
``translate``) so callers only ever see ``shared.errors`` types.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException
from kubernetes_asyncio.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)
from kubernetes_asyncio.config.kube_config import KubeConfigLoader, new_client_from_config

from shared.config import Settings
from shared.errors import (
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


def _new_configuration() -> Configuration:
    # Configuration() copies the library's process-wide default; type.__call__ does not.
    configuration: Configuration = type.__call__(Configuration)
    return configuration


async def client_from_kubeconfig(text: str, *, context: str | None = None) -> ApiClient:
    """An ApiClient for the cluster a registered kubeconfig describes (inline credentials only).

    Raises Invalid when the kubeconfig is malformed or asks for files or plugins.
    """
    doc = parse_kubeconfig(text)
    configuration = _new_configuration()
    try:
        loader = KubeConfigLoader(config_dict=doc, active_context=context, config_base_path="")
        await loader.load_and_set(configuration)
    except (ConfigException, AssertionError, KeyError, TypeError, ValueError) as exc:
        raise Invalid(f"the kubeconfig cannot be used: {type(exc).__name__}") from exc
    return ApiClient(configuration=configuration)


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
    except ConfigException as exc:
        raise ConfigError(f"in-cluster Kubernetes identity unusable: {exc}") from exc
    return ApiClient(configuration=configuration)


async def host_client(settings: Settings, *, environ: Mapping[str, str] = os.environ) -> ApiClient:
    """The host cluster: in-cluster identity inside a pod, else the HOST_KUBECONFIG file.

    The file is the operator's own (a developer's kind or EKS context), so unlike a registered
    kubeconfig it may use exec plugins and file references.
    """
    if environ.get(SERVICE_HOST_ENV_NAME):
        return await in_cluster_client(environ=environ)
    if not settings.HOST_KUBECONFIG:
        raise ConfigError(
            "HOST_KUBECONFIG: required outside a Kubernetes pod (KUBERNETES_SERVICE_HOST unset)"
        )
    try:
        return await new_client_from_config(
            config_file=settings.HOST_KUBECONFIG, persist_config=False
        )
    except (OSError, yaml.YAMLError, ConfigException, AssertionError, KeyError, TypeError) as exc:
        raise ConfigError(f"HOST_KUBECONFIG: cannot be used ({type(exc).__name__})") from exc
