"""Refusals injected at the emulated API's edge, as an admission webhook or RBAC would answer
(tests only): a request of a refused verb on a refused type (in one namespace, or in all) gets
the error's Status; what the simulators write in-process is not refused."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from sim.kube.types import ApiError, ResourceType

WRITES: Final = frozenset({"create", "update", "patch", "delete"})
VERBS: Final = WRITES | {"get", "list"}


@dataclass(frozen=True, slots=True)
class _Refusal:
    key: tuple[str, str, str]
    namespace: str | None
    verbs: frozenset[str]
    error: ApiError


class Faults:
    """The refusals in force, checked by ``sim.kube.server`` before each request is served."""

    def __init__(self) -> None:
        self._refusals: list[_Refusal] = []

    def refuse(
        self,
        rtype: ResourceType,
        *,
        verbs: Iterable[str] = WRITES,
        namespace: str | None = None,
        error: ApiError | None = None,
    ) -> Callable[[], None]:
        """Refuse ``verbs`` on ``rtype`` (by default every write, with a 403 as an admission
        webhook denies); returns the function that lifts the refusal."""
        chosen = frozenset(verbs)
        if not chosen <= VERBS:
            raise ValueError(f"unknown verbs: {sorted(chosen - VERBS)}")
        refusal = _Refusal(
            rtype.key,
            namespace,
            chosen,
            error or ApiError(403, "Forbidden", f"admission webhook denied the {rtype.kind}"),
        )
        self._refusals.append(refusal)

        def lift() -> None:
            if refusal in self._refusals:
                self._refusals.remove(refusal)

        return lift

    def check(self, rtype: ResourceType, namespace: str | None, verb: str) -> None:
        """Raise the error of the first refusal matching the request."""
        for refusal in self._refusals:
            if (
                refusal.key == rtype.key
                and verb in refusal.verbs
                and refusal.namespace in (None, namespace)
            ):
                error = refusal.error
                raise ApiError(error.status, error.reason, error.message, details=error.details)
