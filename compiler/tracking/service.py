"""Experiment tracking, done by the compiler as MLflow's administrator: an ML pipeline's
attachment (``compiler.pipelines.service.Attachment``).

Why the compiler, at save time, and not stagectl: the account's Secret must exist before the
first run's training steps start (their pods refer to it), and the save is the one moment that
precedes every run of a version; the compiler already owns the tenant namespace and the save
path, and holds the rights to write Secrets there.

On every save, update and rollback of an ML pipeline (data pipelines get nothing):

1. the tenant's account, under the tenant's MLflow lock (``ExperimentStore.account_lock``):
   the Secret ``kubeopera-mlflow`` holds the password. No Secret (the tenant's first ML
   pipeline, or the Secret was lost): a new random password; the account is created, or, if
   MLflow has it already, its password is reset (update-password). A Secret: MLflow must take
   its password, else the account is created again (MLflow's store was replaced) or its
   password set back to the Secret's. The Secret is written last, and rewritten when the
   server's URL (``MLFLOW_URL``) changed;
2. the pipeline's experiment: the one recorded in ``ml_experiments`` while MLflow has it
   (restored if an administrator deleted it), else a new one, recorded. Its name is
   ``<tenant>/<pipeline id>``, which the containers were given when the version was rendered:
   if the tenant renamed it, it gets its name back, and an experiment holding that name that is
   not the recorded one (anyone with an account can create one under any name) is renamed
   aside, never adopted;
3. EDIT on that experiment for the tenant's account, and nothing else anywhere.

Delete forgets the recorded experiment once the delete is recorded (``settle``); the
experiment and its runs stay in MLflow, as a
deleted pipeline's runs stay in the run history. Passwords are never logged.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any, Protocol

from compiler.tracking import accounts
from shared import labels as L
from shared.config import Settings
from shared.db.experiments import ExperimentStore
from shared.errors import Conflict
from shared.logging import get_logger
from shared.mlflow import MlflowClient

log = get_logger(__name__)

_DELETED = "deleted"


class SecretObjects(Protocol):
    """What this needs of ``shared.k8s_objects.KubeObjects``."""

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None: ...

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    async def replace(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...


class SavedPipeline(Protocol):
    """What an attachment is given (``compiler.pipelines.service.Current``)."""

    @property
    def tenant(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def pipeline_id(self) -> str: ...

    @property
    def name(self) -> str: ...


def tracking_configured(settings: Settings) -> bool:
    """Whether ML pipelines get experiment tracking: the server and its administrator set."""
    return bool(
        settings.MLFLOW_URL and settings.MLFLOW_ADMIN_USERNAME and settings.MLFLOW_ADMIN_PASSWORD
    )


def new_password() -> str:
    return secrets.token_urlsafe(32)


class ExperimentTracking:
    """Gives each ML pipeline its experiment and its tenant an account (module docstring)."""

    def __init__(
        self,
        *,
        mlflow: MlflowClient,
        objects: SecretObjects,
        store: ExperimentStore,
        tracking_uri: str,
    ) -> None:
        self._mlflow = mlflow
        self._objects = objects
        self._store = store
        self._uri = tracking_uri

    @classmethod
    def from_settings(
        cls, settings: Settings, *, objects: SecretObjects, store: ExperimentStore
    ) -> list[ExperimentTracking]:
        """The attachment when tracking is configured; none (logged) otherwise."""
        client = MlflowClient.from_settings(None, settings)
        if client is None or not settings.MLFLOW_URL:
            log.warning(
                "experiment_tracking_disabled",
                reason="MLFLOW_URL and MLFLOW_ADMIN_USERNAME/PASSWORD are not all set",
                consequence="ML pipelines get no MLflow account or experiment",
            )
            return []
        return [cls(mlflow=client, objects=objects, store=store, tracking_uri=settings.MLFLOW_URL)]

    async def attach(self, current: SavedPipeline) -> None:
        if current.kind != L.PIPELINE_KIND_ML:
            return
        async with self._store.account_lock(current.tenant):
            username = await self._ensure_account(current.tenant)
        experiment_id = await self._ensure_experiment(current)
        await self._mlflow.grant(username, experiment_id, accounts.TENANT_PERMISSION)

    async def detach(self, tenant: str, kind: str, pipeline_id: str) -> None:
        """Nothing yet: a delete that fails must find its experiment again (``settle``)."""

    async def settle(
        self, tenant: str, kind: str, pipeline_id: str, current: SavedPipeline | None
    ) -> None:
        """The pipeline is gone (``current`` None): forget its experiment. The account and the
        experiment outlive versions."""
        if current is None and kind == L.PIPELINE_KIND_ML:
            await self._store.forget(pipeline_id)

    # --- the account --------------------------------------------------------------------------
    async def _ensure_account(self, tenant: str) -> str:
        username = accounts.account_name(tenant)
        namespace = f"{L.DATA_NAMESPACE_PREFIX}{tenant}"
        secret = await self._objects.get("v1", "Secret", namespace, accounts.SECRET_NAME)
        stored = accounts.secret_values(secret) if secret is not None else {}
        password = stored.get(accounts.PASSWORD_KEY)
        if stored.get(accounts.USERNAME_KEY) != username or not password:
            password = new_password()
            if await self._mlflow.user_exists(username):
                await self._mlflow.update_password(username, password)
                log.info("mlflow_password_reset", tenant=tenant, reason="secret_missing")
            else:
                await self._create_user(tenant, username, password)
        elif not await self._mlflow.user_exists(username):
            await self._create_user(tenant, username, password)
        elif not await self._mlflow.authenticates(username, password):
            await self._mlflow.update_password(username, password)
            log.info("mlflow_password_reset", tenant=tenant, reason="server_diverged")
        wanted = accounts.secret_manifest(
            tenant, username=username, password=password, uri=self._uri
        )
        if secret is None:
            await self._objects.create(wanted)
        elif stored != accounts.secret_values(wanted) or not _ours(secret):
            version = (secret.get("metadata") or {}).get("resourceVersion")
            metadata = {**wanted["metadata"], "resourceVersion": version}
            await self._objects.replace({**wanted, "metadata": metadata})
        return username

    async def _create_user(self, tenant: str, username: str, password: str) -> None:
        try:
            await self._mlflow.create_user(username, password)
        except Conflict:  # created outside our lock since we looked: ours now
            await self._mlflow.update_password(username, password)
        log.info("mlflow_account_created", tenant=tenant, username=username)

    # --- the experiment -----------------------------------------------------------------------
    async def _ensure_experiment(self, current: SavedPipeline) -> str:
        name = accounts.experiment_name(current.tenant, current.pipeline_id)
        recorded = await self._store.find(current.pipeline_id, tenant=current.tenant)
        experiment = None
        if recorded is not None:
            experiment = await self._mlflow.experiment(recorded.experiment_id)
        if recorded is not None and experiment is not None:
            if experiment.get("lifecycle_stage") == _DELETED:
                await self._mlflow.restore_experiment(recorded.experiment_id)
            if experiment.get("name") != name:
                await self._free(name, keep=recorded.experiment_id)
                await self._mlflow.rename_experiment(recorded.experiment_id, name)
                log.info("mlflow_experiment_renamed_back", pipeline=current.pipeline_id)
            return recorded.experiment_id
        await self._free(name, keep=None)
        tags = accounts.experiment_tags(current.tenant, current.pipeline_id, current.name)
        experiment_id = await self._mlflow.create_experiment(name, tags=tags)
        await self._store.record(
            pipeline_id=current.pipeline_id,
            tenant=current.tenant,
            experiment_id=experiment_id,
            name=name,
        )
        log.info(
            "mlflow_experiment_created",
            tenant=current.tenant,
            pipeline=current.pipeline_id,
            experiment_id=experiment_id,
        )
        return experiment_id

    async def _free(self, name: str, *, keep: str | None) -> None:
        """Rename aside whatever experiment other than ``keep`` holds ``name``."""
        holder = await self._mlflow.experiment_by_name(name)
        if holder is None or str(holder.get("experiment_id")) == keep:
            return
        holder_id = str(holder.get("experiment_id"))
        if holder.get("lifecycle_stage") == _DELETED:  # MLflow renames only active ones
            await self._mlflow.restore_experiment(holder_id)
        await self._mlflow.rename_experiment(holder_id, f"{name}-displaced-{secrets.token_hex(4)}")
        log.warning("mlflow_experiment_displaced", name=name, experiment_id=holder_id)


def _ours(secret: Mapping[str, Any]) -> bool:
    labels = (secret.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(L.MANAGED_BY) == L.MANAGED_BY_US)
