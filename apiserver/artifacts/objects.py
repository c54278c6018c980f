"""What the artifact routes need of object storage: the port ``apiserver.artifacts.s3_store``
implements (tests may hand the app another)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object being read from object storage: its metadata and a chunk iterator."""

    content_type: str
    length: int
    chunks: AsyncIterator[bytes]


class ObjectStore(Protocol):
    """Read access to object storage (``apiserver.artifacts.s3_store``)."""

    async def open(self, bucket: str, key: str) -> StoredObject: ...
