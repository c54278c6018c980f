"""Model endpoints and their bearer tokens in PostgreSQL (tables ``inference_deployments`` and
``inference_tokens``, migration 0007), and the channel that announces their changes.

The issuer (stagectl, later) writes through ``TokenStore``: a token is returned once, at issue
or rotation, and only its hash is stored. inference_auth reads through ``TokenStore.lookup``
as the role ``wm_inference_auth``, which may read these two tables and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import asyncpg

from shared.db.pool import translate_db_errors
from shared.errors import Invalid, NotFound
from shared.inference_tokens import (
    DeploymentRef,
    check_deployment,
    endpoint_host,
    new_token,
    token_hash,
)

CHANNEL: Final = "inference_tokens"
# inference_auth's role (migration 0007): SELECT on the two tables only.
READER_ROLE: Final = "wm_inference_auth"


@dataclass(frozen=True, slots=True)
class Deployment:
    id: int
    tenant: str
    model: str
    environment: str
    host: str
    rate_limit: int | None  # requests per second for the deployment; None: no limit
    token_rate_limit: int | None  # requests per second for each token; None: no limit

    @property
    def ref(self) -> DeploymentRef:
        return DeploymentRef(tenant=self.tenant, model=self.model, environment=self.environment)


@dataclass(frozen=True, slots=True)
class IssuedToken:
    token: str  # shown once; never stored
    token_id: int
    lookup_id: str
    deployment: Deployment


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A token's metadata (what ``list`` shows): never the token nor its hash."""

    id: int
    lookup_id: str
    tenant: str
    model: str
    environment: str
    host: str
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None
    replaced_by: int | None


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """What inference_auth checks a presented token against."""

    token_id: int
    lookup_id: str
    secret_hash: bytes
    deployment: Deployment
    expires_at: datetime | None
    revoked_at: datetime | None

    def valid_at(self, now: datetime) -> bool:
        if self.revoked_at is not None and self.revoked_at <= now:
            return False
        return self.expires_at is None or now < self.expires_at


_DEPLOYMENT_COLUMNS: Final = (
    "d.id, d.tenant, d.model, d.environment, d.host, d.rate_limit, d.token_rate_limit"
)


def _deployment(row: Any) -> Deployment:
    return Deployment(
        id=row["id"],
        tenant=row["tenant"],
        model=row["model"],
        environment=row["environment"],
        host=row["host"],
        rate_limit=row["rate_limit"],
        token_rate_limit=row["token_rate_limit"],
    )


def _check_limit(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise Invalid(f"{name}: expected a positive number of requests per second or None")


class TokenStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    # --- deployments ----------------------------------------------------------------------
    async def register_deployment(
        self,
        *,
        tenant: str,
        model: str,
        environment: str,
        domain: str,
        rate_limit: int | None = None,
        token_rate_limit: int | None = None,
    ) -> Deployment:
        """Create the deployment, or update its host and limits (idempotent)."""
        try:
            host = endpoint_host(tenant=tenant, model=model, environment=environment, domain=domain)
        except ValueError as exc:
            raise Invalid(str(exc)) from None
        _check_limit("rate_limit", rate_limit)
        _check_limit("token_rate_limit", token_rate_limit)
        with translate_db_errors():
            row = await self._pool.fetchrow(
                "INSERT INTO inference_deployments AS d "
                "(tenant, model, environment, host, rate_limit, token_rate_limit) "
                "VALUES ($1, $2, $3, $4, $5, $6) "
                "ON CONFLICT (tenant, model, environment) DO UPDATE SET host = EXCLUDED.host, "
                "rate_limit = EXCLUDED.rate_limit, token_rate_limit = EXCLUDED.token_rate_limit "
                f"RETURNING {_DEPLOYMENT_COLUMNS}",
                tenant,
                model,
                environment,
                host,
                rate_limit,
                token_rate_limit,
            )
        return _deployment(row)

    async def deployment(self, *, tenant: str, model: str, environment: str) -> Deployment:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_DEPLOYMENT_COLUMNS} FROM inference_deployments d "
                "WHERE tenant = $1 AND model = $2 AND environment = $3",
                tenant,
                model,
                environment,
            )
        if row is None:
            raise NotFound("no such deployment")
        return _deployment(row)

    async def _deployment_by_id(self, conn: Any, deployment_id: int) -> Deployment:
        row = await conn.fetchrow(
            f"SELECT {_DEPLOYMENT_COLUMNS} FROM inference_deployments d WHERE id = $1",
            deployment_id,
        )
        if row is None:
            raise NotFound("no such deployment")
        return _deployment(row)

    # --- tokens ---------------------------------------------------------------------------
    async def issue(
        self,
        *,
        actor: str,
        deployment_id: int | None = None,
        tenant: str | None = None,
        model: str | None = None,
        environment: str | None = None,
    ) -> IssuedToken:
        """A new token for the deployment (by id, or by tenant, model and environment)."""
        if deployment_id is None:
            if tenant is None or model is None or environment is None:
                raise Invalid("name the deployment: deployment_id, or tenant, model, environment")
            try:
                check_deployment(tenant=tenant, model=model, environment=environment)
            except ValueError as exc:
                raise Invalid(str(exc)) from None
            deployment = await self.deployment(tenant=tenant, model=model, environment=environment)
            deployment_id = deployment.id
        with translate_db_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                deployment = await self._deployment_by_id(conn, deployment_id)
                return await self._insert(conn, deployment, actor=actor)

    async def _insert(self, conn: Any, deployment: Deployment, *, actor: str) -> IssuedToken:
        token, lookup_id, secret = new_token()
        token_id = await conn.fetchval(
            "INSERT INTO inference_tokens (lookup_id, secret_hash, deployment_id, created_by) "
            "VALUES ($1, $2, $3, $4) RETURNING id",
            lookup_id,
            token_hash(lookup_id, secret),
            deployment.id,
            actor,
        )
        return IssuedToken(
            token=token, token_id=token_id, lookup_id=lookup_id, deployment=deployment
        )

    async def rotate(self, token_id: int, *, actor: str, grace_seconds: float = 0) -> IssuedToken:
        """A new token for the same deployment; the old one stays valid for ``grace_seconds``
        (0: revoked at once). Only a token still valid can be rotated."""
        if not isinstance(grace_seconds, int | float) or not 0 <= grace_seconds <= 30 * 86400:
            raise Invalid("grace_seconds: expected 0 to 30 days in seconds")
        with translate_db_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                old = await conn.fetchrow(
                    "SELECT deployment_id FROM inference_tokens WHERE id = $1 "
                    "AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()) "
                    "FOR UPDATE",
                    token_id,
                )
                if old is None:
                    raise NotFound("no valid token with this id")
                deployment = await self._deployment_by_id(conn, old["deployment_id"])
                issued = await self._insert(conn, deployment, actor=actor)
                if grace_seconds == 0:
                    await conn.execute(
                        "UPDATE inference_tokens SET revoked_at = now(), revoked_by = $2, "
                        "replaced_by = $3 WHERE id = $1",
                        token_id,
                        actor,
                        issued.token_id,
                    )
                else:
                    await conn.execute(
                        "UPDATE inference_tokens SET replaced_by = $3, expires_at = "
                        "least(expires_at, now() + make_interval(secs => $2)) WHERE id = $1",
                        token_id,
                        float(grace_seconds),
                        issued.token_id,
                    )
                return issued

    async def revoke(self, token_id: int, *, actor: str) -> None:
        """End the token at once (idempotent for a token already revoked)."""
        with translate_db_errors():
            status = await self._pool.execute(
                "UPDATE inference_tokens SET revoked_at = coalesce(revoked_at, now()), "
                "revoked_by = coalesce(revoked_by, $2) WHERE id = $1",
                token_id,
                actor,
            )
        if status == "UPDATE 0":
            raise NotFound("no token with this id")

    async def list(self, *, tenant: str, model: str | None = None) -> list[TokenInfo]:
        """The tenant's tokens (of one model), newest first: metadata only."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                "SELECT t.id, t.lookup_id, d.tenant, d.model, d.environment, d.host, "
                "t.created_by, t.created_at, t.expires_at, t.revoked_at, t.revoked_by, "
                "t.replaced_by FROM inference_tokens t "
                "JOIN inference_deployments d ON d.id = t.deployment_id "
                "WHERE d.tenant = $1 AND ($2::text IS NULL OR d.model = $2) "
                "ORDER BY t.id DESC",
                tenant,
                model,
            )
        return [TokenInfo(**dict(row)) for row in rows]

    # --- inference_auth's read ------------------------------------------------------------
    async def lookup(self, lookup_id: str) -> TokenRecord | None:
        """The token with this lookup id and its deployment (valid or not), or None."""
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT t.id AS token_id, t.secret_hash, t.expires_at, t.revoked_at, "
                f"{_DEPLOYMENT_COLUMNS} FROM inference_tokens t "
                "JOIN inference_deployments d ON d.id = t.deployment_id WHERE t.lookup_id = $1",
                lookup_id,
            )
        if row is None:
            return None
        return TokenRecord(
            token_id=row["token_id"],
            lookup_id=lookup_id,
            secret_hash=bytes(row["secret_hash"]),
            deployment=_deployment(row),
            expires_at=row["expires_at"],
            revoked_at=row["revoked_at"],
        )
