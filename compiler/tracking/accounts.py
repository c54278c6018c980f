"""The names of experiment tracking and the Secret of a tenant's MLflow account. Purely
computational.

A tenant has one MLflow account, ``tenant-<tenant>``, whose credentials live only in the Secret
``kubeopera-mlflow`` of its namespace (``MLFLOW_TRACKING_USERNAME``,
``MLFLOW_TRACKING_PASSWORD``, ``MLFLOW_TRACKING_URI``: the variables MLflow's client reads).
Each ML pipeline has one experiment, named ``<tenant>/<pipeline id>``: by id, not by the
pipeline's name, so a rename needs nothing and a new pipeline never inherits the runs of a
deleted one of the same name. The name is known when a version is rendered, before the
experiment exists, so every container of the pipeline gets it as ``MLFLOW_EXPERIMENT_NAME``
(which MLflow's client uses when the code names no experiment) beside the account's variables
(``compiler.pipelines.stamping.with_tracking_credentials``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Final

from shared import labels as L

SECRET_NAME: Final = "kubeopera-mlflow"
ACCOUNT_PREFIX: Final = "tenant-"
USERNAME_KEY: Final = "MLFLOW_TRACKING_USERNAME"
PASSWORD_KEY: Final = "MLFLOW_TRACKING_PASSWORD"
URI_KEY: Final = "MLFLOW_TRACKING_URI"
EXPERIMENT_VARIABLE: Final = "MLFLOW_EXPERIMENT_NAME"
KEYS: Final = (USERNAME_KEY, PASSWORD_KEY, URI_KEY)
# The only permission a tenant's account is ever given, on its own pipelines' experiments:
# read, create runs and log to them; not delete them nor change who may see them (MANAGE).
TENANT_PERMISSION: Final = "EDIT"


def account_name(tenant: str) -> str:
    return f"{ACCOUNT_PREFIX}{tenant}"


def experiment_name(tenant: str, pipeline_id: str) -> str:
    return f"{tenant}/{pipeline_id}"


def experiment_tags(tenant: str, pipeline_id: str, pipeline_name: str) -> dict[str, str]:
    """Tags for people browsing MLflow; informational only (the tenant may edit them)."""
    return {
        "kubeopera.tenant": tenant,
        "kubeopera.pipeline_id": pipeline_id,
        "kubeopera.pipeline_name": pipeline_name,
    }


def secret_manifest(tenant: str, *, username: str, password: str, uri: str) -> dict[str, Any]:
    """The Secret holding the account's credentials and where the server is."""
    values = {USERNAME_KEY: username, PASSWORD_KEY: password, URI_KEY: uri}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": SECRET_NAME,
            "namespace": f"{L.DATA_NAMESPACE_PREFIX}{tenant}",
            "labels": {L.MANAGED_BY: L.MANAGED_BY_US, L.TENANT: tenant},
        },
        "type": "Opaque",
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in values.items()},
    }


def secret_values(secret: Mapping[str, Any]) -> dict[str, str]:
    """The Secret's decoded values among ``KEYS`` (a value that is not text is left out)."""
    values: dict[str, str] = {}
    data = secret.get("data")
    for key, encoded in (data if isinstance(data, Mapping) else {}).items():
        if key not in KEYS:
            continue
        try:
            values[str(key)] = base64.b64decode(str(encoded), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            continue
    return values
