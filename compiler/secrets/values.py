"""Reading a data secret's values, for the compiler's own use only (Git credentials,
notification channels). Values never leave the compiler: never logged, never in an error,
never returned through any API.

A data secret is a Kubernetes Secret in the tenant's namespace (``kubeopera-data-<tenant>``)
labelled ``kubeopera.io/data-secret=true``; a Secret without that label (the executor's token,
the artifact credentials, ...) is never read here, whatever its name.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Protocol

from shared import labels as L
from shared.errors import NotFound


class SecretGetter(Protocol):
    """``shared.k8s_objects.KubeObjects.get``."""

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None: ...


def is_data_secret(secret: Mapping[str, Any]) -> bool:
    labels = (secret.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(L.DATA_SECRET) == L.DATA_SECRET_VALUE)


async def read_data_secret(objects: SecretGetter, tenant: str, name: str) -> dict[str, str]:
    """The decoded values of the tenant's data secret ``name``; ``NotFound`` (naming the secret,
    never a value) when it does not exist or is not a data secret."""
    namespace = f"{L.DATA_NAMESPACE_PREFIX}{tenant}"
    secret = await objects.get("v1", "Secret", namespace, name)
    if secret is None or not is_data_secret(secret):
        raise NotFound(f"no data secret {name!r}", details={"secret": name})
    values: dict[str, str] = {}
    for key, encoded in (secret.get("data") or {}).items():
        try:
            values[str(key)] = base64.b64decode(str(encoded), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            continue  # not text: no caller of ours can use it, and it is never echoed
    for key, text in (secret.get("stringData") or {}).items():
        values.setdefault(str(key), str(text))
    return values
