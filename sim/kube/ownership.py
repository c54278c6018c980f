"""Owner references of one emulated cluster's objects, indexed for garbage collection.

``OwnerIndex`` knows which uids exist and which objects name each uid in their
``metadata.ownerReferences``, so that when an object is deleted for good the store can find its
dependents and delete those whose owners are all gone, as Kubernetes' garbage collector does
(background propagation). Purely computational: the store performs the deletions.
"""

from __future__ import annotations

from sim.kube.objects import Stored
from sim.kube.types import JsonObject

Key = tuple[str, str, str]
ObjectRef = tuple[Key, str, str]


class OwnerIndex:
    """Where each live uid is stored, and the objects that name each uid as an owner."""

    def __init__(self) -> None:
        self._uids: dict[str, ObjectRef] = {}
        self._dependents: dict[str, set[ObjectRef]] = {}

    def exists(self, uid: object) -> bool:
        """Whether an object with this uid is stored now."""
        return uid in self._uids

    def take_dependents(self, owner_uid: str) -> set[ObjectRef]:
        """The objects that named `owner_uid` as an owner, forgetting them under it."""
        return self._dependents.pop(owner_uid, set())

    def update(self, ref: ObjectRef, new: Stored | None, old: Stored | None) -> None:
        """Index the object at `ref` now stored as `new` (None: deleted) instead of `old`."""
        if old is not None:
            for owner in owner_uids(old.meta):
                dependents = self._dependents.get(owner)
                if dependents is not None:
                    dependents.discard(ref)
                    if not dependents:
                        del self._dependents[owner]
            if new is None:
                self._uids.pop(str(old.meta.get("uid")), None)
        if new is not None:
            self._uids[str(new.meta["uid"])] = ref
            for owner in owner_uids(new.meta):
                self._dependents.setdefault(owner, set()).add(ref)


def owner_uids(meta: JsonObject) -> list[str]:
    """The uids in `meta.ownerReferences`."""
    refs = meta.get("ownerReferences") or []
    return [str(ref["uid"]) for ref in refs if isinstance(ref, dict) and ref.get("uid")]
