"""What a data secret may be, and the Secret it is. Purely computational.

A data secret is a Kubernetes Secret in the tenant's namespace, labelled
``kubeopera.io/data-secret=true`` (``shared.labels.DATA_SECRET``), written only through
``PUT /data-secrets/{name}``. The rules (docs/security.md, "Data secrets"):

- its name is a DNS-1123 subdomain of at most 253 characters, as Kubernetes names a Secret, and
  never under ``kubeopera-``: those are the platform's (the executor's token, the artifact
  credentials, the tracking credentials), so a tenant can neither overwrite nor delete one;
- its keys follow Kubernetes' Secret key rule: ``[-._a-zA-Z0-9]+``, at most 253 characters, not
  ``.`` or ``..`` and not starting with ``..``;
- its values are strings; keys and values together are at most ``MAX_BYTES`` (64 KiB, UTF-8),
  well under Kubernetes' own 1 MiB, so a namespace's etcd share stays small.

Nothing here ever puts a value into a message or a detail: an error names the key (or
``data``), never what was given for it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any, Final

from shared import labels as L
from shared.errors import Invalid
from shared.identifiers import DNS_SUBDOMAIN_PATTERN
from shared.validation import invalid_fields

RESERVED_PREFIX: Final = "kubeopera-"
MAX_NAME: Final = 253
MAX_KEY: Final = 253
MAX_BYTES: Final = 64 * 1024
_NAME: Final = re.compile(DNS_SUBDOMAIN_PATTERN)
_KEY: Final = re.compile(r"[-._a-zA-Z0-9]+")
_SHOWN: Final = 64  # of a refused key, in a message (keys are not secret, but may be long)

# Annotations a data secret carries: who wrote it first and last, and when it was last written
# (its creation time is ``metadata.creationTimestamp``).
CREATED_BY: Final = "kubeopera.io/created-by"
UPDATED_BY: Final = "kubeopera.io/updated-by"
UPDATED_AT: Final = "kubeopera.io/updated-at"


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a data secret, or None."""
    if not 1 <= len(name) <= MAX_NAME or not _NAME.fullmatch(name):
        return f"a data secret's name is a DNS-1123 subdomain of at most {MAX_NAME} characters"
    if name.startswith(RESERVED_PREFIX):
        return f"names under {RESERVED_PREFIX} belong to the platform"
    return None


def check_name(name: str) -> str:
    """``name``, or Invalid naming the rule it breaks."""
    problem = name_problem(name)
    if problem is not None:
        raise Invalid(f"name: {problem}", details={"parameter": "name"})
    return name


def is_own(name: str) -> bool:
    """Whether ``name`` may be a tenant's data secret at all (reads and deletes of any other
    name answer as for a missing one)."""
    return name_problem(name) is None


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a Secret's key (Kubernetes' rule), or None."""
    if not 1 <= len(key) <= MAX_KEY or not _KEY.fullmatch(key):
        return f"a key is 1-{MAX_KEY} of the characters a-z A-Z 0-9 - _ ."
    if key in (".", "..") or key.startswith(".."):
        return "a key may not be '.' or '..' or start with '..'"
    return None


def _shown(key: str) -> str:
    return key if len(key) <= _SHOWN else f"{key[:_SHOWN]}..."


def _encodes(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:  # a lone surrogate: not text a Secret can hold as UTF-8
        return False
    return True


def parse_body(body: object) -> dict[str, str]:
    """The ``data`` of a PUT body (``{"data": {key: value}}``), or Invalid listing every
    problem by field (``data.<key>``), never a value."""
    if not isinstance(body, Mapping):
        raise Invalid("the body must be a JSON object", details={"parameter": "body"})
    errors: list[dict[str, str]] = [
        {"field": str(field)[:_SHOWN], "message": "unknown field"}
        for field in body
        if field != "data"
    ]
    data = body.get("data")
    values: dict[str, str] = {}
    if not isinstance(data, Mapping) or not data:
        errors.append({"field": "data", "message": "an object of at least one key is required"})
    else:
        size = 0
        for key, value in data.items():
            field = f"data.{_shown(str(key))}"
            problem = key_problem(str(key))
            if problem is not None:
                errors.append({"field": field, "message": problem})
            elif not isinstance(value, str) or not _encodes(value):
                errors.append({"field": field, "message": "a value is a string of UTF-8 text"})
            else:
                values[str(key)] = value
                size += len(str(key).encode()) + len(value.encode())
        if size > MAX_BYTES:
            errors.append({"field": "data", "message": f"keys and values exceed {MAX_BYTES} bytes"})
    if errors:
        raise invalid_fields("the data secret is invalid", errors, parameter=errors[0]["field"])
    return values


def manifest(
    *,
    tenant: str,
    name: str,
    values: Mapping[str, str],
    actor: str,
    at: str,
    created_by: str | None = None,
) -> dict[str, Any]:
    """The Secret a data secret is: Opaque, labelled as a data secret of ``tenant``, annotated
    with who wrote it (``created_by``: kept from the Secret it replaces) and when."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": f"{L.DATA_NAMESPACE_PREFIX}{tenant}",
            "labels": {
                L.DATA_SECRET: L.DATA_SECRET_VALUE,
                L.MANAGED_BY: L.MANAGED_BY_US,
                L.TENANT: tenant,
            },
            "annotations": {
                CREATED_BY: created_by if created_by is not None else actor,
                UPDATED_BY: actor,
                UPDATED_AT: at,
            },
        },
        "type": "Opaque",
        "data": {
            key: base64.b64encode(value.encode()).decode() for key, value in sorted(values.items())
        },
    }


def describe(secret: Mapping[str, Any]) -> dict[str, Any]:
    """What a read shows of a data secret: its name, its key names, when and by whom it was
    created and last changed. Never a value."""
    metadata = secret.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    keys = {*(secret.get("data") or {}), *(secret.get("stringData") or {})}
    created_at = metadata.get("creationTimestamp")
    return {
        "name": str(metadata.get("name")),
        "keys": sorted(str(key) for key in keys),
        "created_at": created_at,
        "created_by": annotations.get(CREATED_BY),
        "updated_at": annotations.get(UPDATED_AT) or created_at,
        "updated_by": annotations.get(UPDATED_BY),
    }
