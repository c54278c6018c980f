"""What the pipelines service needs from the outside, and what it hands its attachments: the
ports ``compiler.runner`` wires (the host's objects, provisioning, the tenant's data secrets,
Argo's linter, Git) and the caller and current version the other compiler packages see.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from compiler.pipelines.definitions import Fetched
from shared import labels as L
from shared.db.pipelines import PipelineRow, VersionRow
from shared.pipelines import GitDefinition, PipelineKind


class Objects(Protocol):
    """The host cluster's objects (``shared.k8s_objects.KubeObjects``)."""

    async def apply(self, obj: Mapping[str, Any]) -> str: ...

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    async def delete(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> bool: ...

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]: ...


class Tenants(Protocol):
    """Provisioning on first use (``compiler.tenants.service.TenantProvisioner``)."""

    async def ensure(self, tenant: str) -> None: ...


class DataSecrets(Protocol):
    """The names of a tenant's data secrets (``compiler.secrets.service.DataSecretService``),
    the tenant provisioned already: it takes no PostgreSQL connection, so a save may ask while
    holding its transaction's."""

    async def names(self, tenant: str) -> frozenset[str]: ...


Lint = Callable[[str, Mapping[str, Any]], Awaitable[object]]


class GitReader(Protocol):
    """Reads a Git definition's document at its branch's head (``compiler.gitsync``);
    ``Invalid`` naming what failed (repository, credentials, branch, path, size)."""

    async def read(self, tenant: str, definition: GitDefinition) -> Fetched: ...


@dataclass(frozen=True, slots=True)
class Pause:
    """A schedule's pause as PostgreSQL records it: who paused it and when."""

    by: str
    at: datetime


def pause_of(pipeline: PipelineRow) -> Pause | None:
    by, at = pipeline.schedule_paused_by, pipeline.schedule_paused_at
    return None if by is None or at is None else Pause(by, at)


@dataclass(frozen=True, slots=True)
class Current:
    """A pipeline and the version now current, with its recorded schedule pause: what its
    attachments follow. ``pause_unadopted``: the pipeline predates recorded pauses and the
    reconciler has not yet adopted the pause its CronWorkflow may carry (migration 0014)."""

    tenant: str
    kind: PipelineKind
    pipeline_id: str
    name: str
    version: VersionRow
    pause: Pause | None = None
    pause_unadopted: bool = False

    @property
    def namespace(self) -> str:
        return f"{L.DATA_NAMESPACE_PREFIX}{self.tenant}"


class Attachment(Protocol):
    """Something a pipeline owns that follows its current version
    (``compiler.pipelines.attaching``).

    ``attach`` (create, update, rollback) and ``detach`` (delete) run inside the save's
    transaction and must leave what the previous version needs restorable: something that cannot
    be made again as it was (a webhook's token) is dropped only in ``settle``, called once the
    outcome is recorded, with the version then current (None: the pipeline is gone).
    """

    async def attach(self, current: Current) -> None: ...

    async def detach(self, tenant: str, kind: PipelineKind, pipeline_id: str) -> None: ...

    async def settle(
        self, tenant: str, kind: PipelineKind, pipeline_id: str, current: Current | None
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Caller:
    tenant: str
    actor: str
