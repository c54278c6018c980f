"""The one error hierarchy of workflow-manager.

Every deployable raises these; the apiserver's middleware turns them into the JSON error shape
``{"error": <code>, "message": <sentence>, "details": {...}}`` with ``status``.
Adapters translate library errors (ApiException, asyncpg errors) into these with ``raise ... from``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class WorkflowManagerError(Exception):
    """Base of every error we raise on purpose."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def to_json(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, "details": self.details}


class Invalid(WorkflowManagerError):
    status = 400
    code = "invalid"


class Unauthorized(WorkflowManagerError):
    status = 401
    code = "unauthorized"


class Forbidden(WorkflowManagerError):
    status = 403
    code = "forbidden"


class NotFound(WorkflowManagerError):
    status = 404
    code = "not_found"


class Conflict(WorkflowManagerError):
    status = 409
    code = "conflict"


class Refused(WorkflowManagerError):
    """A tenant document refused by the allowlist; details carry every violation by path."""

    status = 422
    code = "refused"


class DependencyDown(WorkflowManagerError):
    """A dependency (cluster, database, object storage, Argo server) did not answer: retry later."""

    status = 503
    code = "dependency_unavailable"
    retryable = True

    def __init__(
        self,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        delay: float | None = None,
    ) -> None:
        super().__init__(message, details=details)
        self.delay = delay


class CertificateRefused(DependencyDown):
    """A cluster's TLS certificate failed verification (unknown CA, wrong name, expired).

    Retried like any unreachable cluster, since the cure (a corrected kubeconfig in the registry
    or a renewed certificate) arrives without a restart; the message names the cluster.
    """

    code = "certificate_refused"


class ConfigError(WorkflowManagerError):
    """The process cannot start: a setting is missing or malformed."""

    code = "config"
