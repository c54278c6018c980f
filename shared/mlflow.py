"""The MLflow tracking server (``MLFLOW_URL``) as workflow-manager uses it: its administrator.

MLflow runs its basic-auth app with ``default_permission = NO_PERMISSIONS``; workflow-manager
holds the administrator account (``MLFLOW_ADMIN_USERNAME`` / ``MLFLOW_ADMIN_PASSWORD``). The
compiler creates each tenant's account and each ML pipeline's experiment and grants the one
its rights on the other; the apiserver reads runs and metric histories back for the interface,
after checking the caller's tenant itself. Every call here is made as the administrator,
except ``authenticates``, which tries a tenant's own credentials.

The routes and payloads are MLflow 3.17's, checked against the real server (docs/operations.md,
"Experiment tracking"): users under ``/api/2.0/mlflow/users/*``; per-user grants under
``/api/3.0/mlflow/users/permissions/*`` since 3.14 (the 2.x
``/api/2.0/mlflow/experiments/permissions/*`` routes answer 404 there); tracking under
``/api/2.0/mlflow/*``.

MLflow's error texts are never passed on: a refused user creation, for one, quotes the SQL
statement with the new password's hash in it. Errors leave as ``shared.errors`` types naming
MLflow's error code only; passwords never reach a log line or an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from shared.config import Settings
from shared.errors import Conflict, DependencyDown, Invalid, NotFound

_API2: Final = "/api/2.0/mlflow"
_API3: Final = "/api/3.0/mlflow"
_EXPERIMENT: Final = "experiment"
DEPENDENCY: Final = {"dependency": "mlflow"}


@dataclass(frozen=True, slots=True)
class Page:
    """One page of an MLflow list and the token of the next one (None: the last)."""

    items: list[dict[str, Any]]
    next_token: str | None


class MlflowClient:
    """The administrator's calls over one aiohttp session, which the caller owns; without one,
    each call opens its own (the compiler's: a few calls per ML pipeline save)."""

    def __init__(
        self,
        session: aiohttp.ClientSession | None,
        *,
        base_url: str,
        username: str,
        password: str,
        timeout: float = 15.0,
    ) -> None:
        self._session = session
        self._base = base_url.rstrip("/")
        self._admin = aiohttp.encode_basic_auth(username, password)
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    @classmethod
    def from_settings(
        cls, session: aiohttp.ClientSession | None, settings: Settings
    ) -> MlflowClient | None:
        """The client when ``MLFLOW_URL`` and the administrator's credentials are all set."""
        password = settings.MLFLOW_ADMIN_PASSWORD
        if not (settings.MLFLOW_URL and settings.MLFLOW_ADMIN_USERNAME and password):
            return None
        return cls(
            session,
            base_url=settings.MLFLOW_URL,
            username=settings.MLFLOW_ADMIN_USERNAME,
            password=password.get_secret_value(),
        )

    @property
    def url(self) -> str:
        return self._base

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        auth: str | None = None,
    ) -> dict[str, Any]:
        try:
            if self._session is not None:
                status, text = await self._send(self._session, method, path, params, body, auth)
            else:
                async with aiohttp.ClientSession() as session:
                    status, text = await self._send(session, method, path, params, body, auth)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DependencyDown(
                "the tracking server is unreachable",
                details={**DEPENDENCY, "error": type(exc).__name__},
            ) from None
        try:
            document = json.loads(text) if text else {}
        except ValueError:
            document = {}
        if not isinstance(document, dict):
            document = {}
        if status < 300:
            return document
        code = str(document.get("error_code") or status)
        details = {**DEPENDENCY, "mlflow_error": code}
        if status == 404 or code == "RESOURCE_DOES_NOT_EXIST":
            raise NotFound("not found in the tracking server", details=details)
        if code == "RESOURCE_ALREADY_EXISTS":
            raise Conflict("it exists already in the tracking server", details=details)
        if status in (401, 403):
            raise DependencyDown(
                "the tracking server refused workflow-manager's administrator credentials",
                details=details,
            )
        if status == 400:
            raise Invalid("the tracking server refused the request", details=details)
        raise DependencyDown(f"the tracking server answered {status}", details=details)

    async def _send(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: Mapping[str, Any] | None,
        auth: str | None,
    ) -> tuple[int, str]:
        async with session.request(
            method,
            f"{self._base}{path}",
            params=dict(params or {}),
            json=None if body is None else dict(body),
            headers={"Authorization": auth or self._admin},
            timeout=self._timeout,
        ) as answer:
            return answer.status, await answer.text()

    # --- accounts -----------------------------------------------------------------------------
    async def user_exists(self, username: str) -> bool:
        try:
            await self._call("GET", f"{_API2}/users/get", params={"username": username})
        except NotFound:
            return False
        return True

    async def create_user(self, username: str, password: str) -> None:
        """Create an ordinary (not administrator) account; Conflict when the name is taken."""
        await self._call(
            "POST", f"{_API2}/users/create", body={"username": username, "password": password}
        )

    async def update_password(self, username: str, password: str) -> None:
        await self._call(
            "PATCH",
            f"{_API2}/users/update-password",
            body={"username": username, "password": password},
        )

    async def authenticates(self, username: str, password: str) -> bool:
        """Whether the server takes these credentials (a call made as that account)."""
        try:
            await self._call(
                "GET", f"{_API2}/users/current", auth=aiohttp.encode_basic_auth(username, password)
            )
        except DependencyDown as refused:
            if refused.details.get("mlflow_error") in ("401", "403"):
                return False
            raise
        return True

    # --- experiments and grants ---------------------------------------------------------------
    async def experiment(self, experiment_id: str) -> dict[str, Any] | None:
        """The experiment, or None when it does not exist."""
        try:
            answer = await self._call(
                "GET", f"{_API2}/experiments/get", params={"experiment_id": experiment_id}
            )
        except (NotFound, Invalid):
            return None
        experiment = answer.get("experiment")
        return experiment if isinstance(experiment, dict) else None

    async def experiment_by_name(self, name: str) -> dict[str, Any] | None:
        try:
            answer = await self._call(
                "GET", f"{_API2}/experiments/get-by-name", params={"experiment_name": name}
            )
        except NotFound:
            return None
        experiment = answer.get("experiment")
        return experiment if isinstance(experiment, dict) else None

    async def create_experiment(self, name: str, *, tags: Mapping[str, str] | None = None) -> str:
        """The new experiment's id; Conflict when the name is taken."""
        body: dict[str, Any] = {"name": name}
        if tags:
            body["tags"] = [{"key": key, "value": value} for key, value in tags.items()]
        answer = await self._call("POST", f"{_API2}/experiments/create", body=body)
        return str(answer["experiment_id"])

    async def rename_experiment(self, experiment_id: str, new_name: str) -> None:
        """Rename an active experiment; Conflict when the name is taken."""
        await self._call(
            "POST",
            f"{_API2}/experiments/update",
            body={"experiment_id": experiment_id, "new_name": new_name},
        )

    async def restore_experiment(self, experiment_id: str) -> None:
        await self._call(
            "POST", f"{_API2}/experiments/restore", body={"experiment_id": experiment_id}
        )

    async def permission(self, username: str, experiment_id: str) -> str:
        """The account's effective permission on the experiment (``NO_PERMISSIONS`` when none)."""
        answer = await self._call(
            "GET",
            f"{_API3}/users/permissions/get",
            params={
                "username": username,
                "resource_type": _EXPERIMENT,
                "resource_id": experiment_id,
            },
        )
        return str(answer.get("permission") or "NO_PERMISSIONS")

    async def grant(self, username: str, experiment_id: str, permission: str) -> None:
        """Make ``permission`` the account's grant on the experiment (replacing another)."""
        body = {
            "username": username,
            "resource_type": _EXPERIMENT,
            "resource_id": experiment_id,
            "permission": permission,
        }
        try:
            await self._call("POST", f"{_API3}/users/permissions/grant", body=body)
        except Conflict:
            if await self.permission(username, experiment_id) == permission:
                return
            await self.revoke(username, experiment_id)
            await self._call("POST", f"{_API3}/users/permissions/grant", body=body)

    async def revoke(self, username: str, experiment_id: str) -> None:
        await self._call(
            "POST",
            f"{_API3}/users/permissions/revoke",
            body={"username": username, "resource_type": _EXPERIMENT, "resource_id": experiment_id},
        )

    # --- reads --------------------------------------------------------------------------------
    async def search_runs(
        self, experiment_id: str, *, max_results: int, page_token: str | None
    ) -> Page:
        """The experiment's runs, newest first."""
        body: dict[str, Any] = {
            "experiment_ids": [experiment_id],
            "max_results": max_results,
            "order_by": ["attributes.start_time DESC"],
        }
        if page_token:
            body["page_token"] = page_token
        answer = await self._call("POST", f"{_API2}/runs/search", body=body)
        runs = [run for run in answer.get("runs") or [] if isinstance(run, dict)]
        return Page(runs, _token(answer))

    async def run(self, run_id: str) -> dict[str, Any] | None:
        """The run, or None when it does not exist."""
        try:
            answer = await self._call("GET", f"{_API2}/runs/get", params={"run_id": run_id})
        except (NotFound, Invalid):
            return None
        run = answer.get("run")
        return run if isinstance(run, dict) else None

    async def metric_history(
        self, run_id: str, key: str, *, max_results: int, page_token: str | None
    ) -> Page:
        """One metric's values in the order MLflow keeps them (by step, then time)."""
        params = {"run_id": run_id, "metric_key": key, "max_results": str(max_results)}
        if page_token:
            params["page_token"] = page_token
        answer = await self._call("GET", f"{_API2}/metrics/get-history", params=params)
        metrics = [item for item in answer.get("metrics") or [] if isinstance(item, dict)]
        return Page(metrics, _token(answer))


def _token(answer: Mapping[str, Any]) -> str | None:
    token = answer.get("next_page_token")
    return token if isinstance(token, str) and token else None
