"""Who a change goes to, and what a reconnecting client missed. Purely computational.

``Routing`` groups subscribers by (scope, filters): with 1,000 streams over 100 tenants a
change is matched against the few groups that can see its tenant, once per group, instead of
once per subscriber. ``Recent`` keeps the last changes a replica dispatched, so a client
reconnecting a moment later is answered from memory rather than from ``run_changes``.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from apiserver.runs.query import RunFilters, matches
from apiserver.scope import Scope

GroupKey = tuple[Scope, RunFilters]
M = TypeVar("M", bound=Hashable)


class Sequenced(Protocol):
    @property
    def seq(self) -> int: ...


S = TypeVar("S", bound=Sequenced)


@dataclass(eq=False)
class Group(Generic[M]):
    """Subscribers that see exactly the same changes."""

    scope: Scope
    filters: RunFilters
    members: dict[M, None] = field(default_factory=dict)  # insertion-ordered set

    def wants(self, fields: Mapping[str, Any]) -> bool:
        return matches(self.filters, self.scope, fields)


def narrow_tenant(scope: Scope) -> str | None:
    """The one tenant whose runs ``scope`` can see, or None when it may see others' runs too
    (an administrator's, or a tenant's with access grants)."""
    return scope.tenant if scope.tenant is not None and not scope.grants else None


class Routing(Generic[M]):
    """Members grouped by (scope, filters), indexed by the tenant a group is confined to."""

    def __init__(self) -> None:
        self._groups: dict[GroupKey, Group[M]] = {}
        self._by_tenant: dict[str, dict[GroupKey, Group[M]]] = {}
        self._wide: dict[GroupKey, Group[M]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def group_count(self) -> int:
        return len(self._groups)

    def members(self) -> list[M]:
        return [member for group in self._groups.values() for member in group.members]

    def add(self, member: M, scope: Scope, filters: RunFilters) -> None:
        key = (scope, filters)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = Group(scope, filters)
            tenant = narrow_tenant(scope)
            index = self._wide if tenant is None else self._by_tenant.setdefault(tenant, {})
            index[key] = group
        if member not in group.members:
            group.members[member] = None
            self._count += 1

    def remove(self, member: M, scope: Scope, filters: RunFilters) -> bool:
        """Remove ``member`` (added with this scope and filters); False when it was absent."""
        key = (scope, filters)
        group = self._groups.get(key)
        if group is None or member not in group.members:
            return False
        del group.members[member]
        self._count -= 1
        if not group.members:
            del self._groups[key]
            tenant = narrow_tenant(scope)
            if tenant is None:
                del self._wide[key]
            else:
                confined = self._by_tenant[tenant]
                del confined[key]
                if not confined:
                    del self._by_tenant[tenant]
        return True

    def recipients(self, fields: Mapping[str, Any]) -> Iterator[M]:
        """Every member that should receive a change with these fields (the run's columns)."""
        tenant = fields.get("tenant")
        confined = self._by_tenant.get(tenant) if isinstance(tenant, str) else None
        for index in (confined, self._wide):
            if not index:
                continue
            for group in list(index.values()):
                if group.wants(fields):
                    yield from list(group.members)


class Recent(Generic[S]):
    """The last ``capacity`` (at least) items appended in increasing seq order, and the seq
    after which that record is complete: ``since`` answers only for ranges it fully covers."""

    def __init__(self, capacity: int, *, after: int = 0) -> None:
        self.capacity = capacity
        self._items: list[S] = []
        self._after = after  # every item with seq > _after is held

    @property
    def after(self) -> int:
        return self._after

    def __len__(self) -> int:
        return len(self._items)

    def reset(self, after: int) -> None:
        """Forget everything; the record is complete from ``after`` on."""
        self._items.clear()
        self._after = after

    def append(self, item: S) -> None:
        if self._items and item.seq <= self._items[-1].seq:
            raise ValueError(f"seq {item.seq} is not after {self._items[-1].seq}")
        self._items.append(item)
        if len(self._items) >= 2 * self.capacity:  # trim in bulk: amortised O(1)
            dropped = len(self._items) - self.capacity
            self._after = self._items[dropped - 1].seq
            del self._items[:dropped]

    def since(self, after: int, upto: int) -> list[S] | None:
        """The items with ``after < seq <= upto``; None when some of them may be gone."""
        if after < self._after:
            return None
        low = bisect.bisect_right(self._items, after, key=lambda item: item.seq)
        high = bisect.bisect_right(self._items, upto, key=lambda item: item.seq)
        return self._items[low:high]
