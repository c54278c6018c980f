"""Which runs a request may see: its tenant's and those its access grants add. Purely
computational (the run list's SQL and the live stream's filter both apply it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Scope:
    """Which runs a request may see. ``tenant`` None: every run (an administrator).

    ``grants`` are the (cluster_id, namespace) pairs access grants add to the tenant's own.
    """

    tenant: str | None
    grants: frozenset[tuple[str, str]] = field(default_factory=frozenset)

    @property
    def everything(self) -> bool:
        return self.tenant is None

    def allows(self, *, tenant: str | None, cluster_id: str, namespace: str) -> bool:
        """Whether a run with these coordinates is visible. Purely computational."""
        if self.tenant is None:
            return True
        return tenant == self.tenant or (cluster_id, namespace) in self.grants

    def with_grants(self, grants: frozenset[tuple[str, str]]) -> Scope:
        return Scope(self.tenant, grants)
