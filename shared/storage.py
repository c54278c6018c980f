"""Where things live in the artifact bucket (ARTIFACT_BUCKET). Constants and pure functions.

One bucket, a prefix per tenant: ``tenants/<tenant>/`` holds its pipeline artifacts and
archived logs (``artifacts/``), its ML training storage (``training/``) and its registered
models (``models/``, read-only for the tenant's own storage user). Runs in namespaces that are
not a tenant's data namespace (clusters' own Argo, CI/CD) keep Argo's convention of
``<namespace>/``. The compiler's repository configuration, IAM policies and allowlist, and the
apiserver's artifact and log checks, and the register stage's check of what it copies into the
registry (``is_tenant_artifact``), all take their prefixes from here.
"""

from __future__ import annotations

from typing import Final

from shared import labels as L

TENANTS_ROOT: Final = "tenants/"


def tenant_prefix(tenant: str) -> str:
    return f"{TENANTS_ROOT}{tenant}/"


def tenant_artifacts(tenant: str) -> str:
    return f"{tenant_prefix(tenant)}artifacts/"


def is_tenant_artifact(tenant: str, key: str) -> bool:
    """Whether ``key`` names an object under the tenant's ``artifacts/`` prefix exactly as it is
    written: something after the prefix, and no empty, ``.`` or ``..`` segment in it. S3 takes a
    key literally, but whatever normalises it later (a path join, a sync tool, a console) would
    find another object: ``tenants/acme/artifacts/../models/churn/1/model.tgz`` is the tenant's
    registry, ``tenants/acme/artifacts//x`` is ``tenants/acme/artifacts/x`` to some tools."""
    prefix = tenant_artifacts(tenant)
    if not key.startswith(prefix) or key == prefix:
        return False
    return all(segment not in ("", ".", "..") for segment in key[len(prefix) :].split("/"))


def tenant_training(tenant: str) -> str:
    return f"{tenant_prefix(tenant)}training/"


def tenant_models(tenant: str) -> str:
    return f"{tenant_prefix(tenant)}models/"


def namespace_prefix(namespace: str) -> str:
    """The prefix a run in ``namespace`` may read and write artifacts under."""
    if namespace.startswith(L.DATA_NAMESPACE_PREFIX):
        return tenant_prefix(namespace.removeprefix(L.DATA_NAMESPACE_PREFIX))
    return f"{namespace}/"


# A registered model version's files under its registry prefix (``tenant_models(tenant)``
# ``<model>/<number>/``): the copied scorecard and the lineage stagectl writes beside it, the
# two the /models routes serve; the model artifact keeps its own name.
SCORECARD_FILE: Final = "eval_scorecard.json"
LINEAGE_FILE: Final = "lineage.json"
