"""Which files of a model version are served, and where they are. Purely computational.

Only the two files that say what a version is, ``eval_scorecard.json`` and ``lineage.json``,
are served, from the version's registry prefix, and only once the version is registered (while
``registering`` its files are being copied; an ``abandoned`` one's are removed). The prefix is
read from the version's row, which stagectl wrote; it is still checked to lie under the model's
tenant's registry prefix (``tenants/<tenant>/models/``), so no row, however it came to be,
makes us read another tenant's objects. Any other name is a 404 like a missing file: the model
artifact itself is for serving, not for download through the API.
"""

from __future__ import annotations

from typing import Final

from shared.errors import NotFound
from shared.storage import LINEAGE_FILE, SCORECARD_FILE, tenant_models

SERVED: Final = (SCORECARD_FILE, LINEAGE_FILE)
UNREGISTERED: Final = frozenset({"registering", "abandoned"})


def served_file(name: str) -> str:
    """``name`` when it is one of the served files; NotFound otherwise."""
    if name not in SERVED:
        raise NotFound(
            f"a model version has no file {name[:64]!r}: only {', '.join(SERVED)} are served",
            details={"file": name[:64]},
        )
    return name


def object_key(*, tenant: str, prefix: str, state: str, name: str) -> str:
    """The object key of a registered version's file ``name``; NotFound when the version is
    not registered or its prefix is not under its tenant's registry prefix."""
    served_file(name)
    if state in UNREGISTERED:
        raise NotFound(
            f"the version is {state}: it has no files", details={"file": name, "state": state}
        )
    root = tenant_models(tenant)
    if (
        not prefix.startswith(root)
        or not prefix.endswith("/")
        or ".." in prefix.split("/")
        or "//" in prefix
    ):
        raise NotFound("the version's files are not in the registry", details={"file": name})
    return f"{prefix}{name}"
