"""Who is calling: the shared key, the identity headers kubeopera-api forwards, and the scope
of runs that identity may see (docs/api.md, "Authentication and identity").

``identity_from`` and ``Scope`` (``apiserver.scope``) are purely computational;
``auth_middleware`` applies them to every request before any handler runs, with the access each
route declares (``Access``).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Middleware

from apiserver.scope import Scope
from shared.errors import Forbidden, Invalid, Unauthorized
from shared.identifiers import TENANT_ID
from shared.logging import bind
from shared.web import header_bytes, is_text

API_KEY_HEADER: Final = "X-API-Key"
TENANT_HEADER: Final = "X-Kubeopera-Tenant"
ADMIN_HEADER: Final = "X-Kubeopera-Admin"
PERMISSIONS_HEADER: Final = "X-Kubeopera-Permissions"
ACTOR_HEADER: Final = "X-Kubeopera-Actor"
ACTING_TENANT_PARAM: Final = "acting_tenant"

# Tenant ids end up in namespace names (kubeopera-data-<tenant>): a DNS-label-like shape.
_MAX_ACTOR = 256


class Permission(StrEnum):
    WORKFLOWS_READ = "workflows.read"
    WORKFLOWS_ACT = "workflows.act"
    PIPELINES_READ = "pipelines.read"
    PIPELINES_WRITE = "pipelines.write"
    PIPELINES_RUN = "pipelines.run"
    SECRETS_WRITE = "secrets.write"
    MODELS_READ = "models.read"
    MODELS_DEPLOY = "models.deploy"
    MODELS_APPROVE = "models.approve"
    TRACKING_READ = "tracking.read"


class Special(StrEnum):
    ADMIN = "admin"  # platform administrators only
    INTERNAL = "internal"  # the shared key is enough: kubeopera-api itself calls


Access = Permission | Special


@dataclass(frozen=True, slots=True)
class Identity:
    """The caller as kubeopera-api describes it. ``tenant`` is the effective tenant: the
    caller's own, or for an administrator ``acting_tenant`` (None: acting for everyone)."""

    tenant: str | None
    admin: bool
    permissions: frozenset[str]
    actor: str
    acting: bool = False  # an administrator acting for ``tenant``

    def allowed(self, access: Access) -> bool:
        if self.admin:
            return True
        if access is Special.ADMIN:
            return False
        return access is Special.INTERNAL or str(access) in self.permissions

    def require(self, access: Access) -> None:
        """Raise Forbidden naming what is missing."""
        if self.allowed(access):
            return
        if access is Special.ADMIN:
            raise Forbidden("this route is for platform administrators", details={"admin": True})
        raise Forbidden(f"the permission {access} is required", details={"permission": str(access)})

    @property
    def scope(self) -> Scope:
        """The tenant scope before access grants are added (the store adds them)."""
        return Scope(self.tenant)


def _tenant(value: str, *, source: str) -> str:
    if not TENANT_ID.fullmatch(value):
        raise Invalid(
            f"{source} is not a valid tenant id", details={"parameter": source, "value": value}
        )
    return value


def identity_from(headers: Mapping[str, str], acting_tenant: Sequence[str] = ()) -> Identity:
    """The caller's identity from kubeopera-api's headers. Purely computational.

    Raises Forbidden for a request without a tenant from a non-administrator, or for
    ``acting_tenant`` given by one; Invalid for malformed values.
    """
    admin_text = headers.get(ADMIN_HEADER, "false").strip().lower()
    if admin_text not in ("true", "false", ""):
        raise Invalid(f"{ADMIN_HEADER} must be true or false", details={"parameter": ADMIN_HEADER})
    admin = admin_text == "true"
    own = headers.get(TENANT_HEADER, "").strip()
    tenant = _tenant(own, source=TENANT_HEADER) if own else None
    if len(acting_tenant) > 1:
        raise Invalid("acting_tenant may be given once", details={"parameter": ACTING_TENANT_PARAM})
    acting = False
    if acting_tenant:
        if not admin:
            raise Forbidden(
                "acting_tenant is honoured only for platform administrators",
                details={"parameter": ACTING_TENANT_PARAM},
            )
        tenant = _tenant(acting_tenant[0].strip(), source=ACTING_TENANT_PARAM)
        acting = True
    elif admin:
        tenant = None  # an administrator not acting for anyone sees everything
    if tenant is None and not admin:
        raise Forbidden(
            "a request without a tenant is refused unless it comes from an administrator",
            details={"header": TENANT_HEADER},
        )
    permissions = frozenset(
        part.strip() for part in headers.get(PERMISSIONS_HEADER, "").split(",") if part.strip()
    )
    actor = headers.get(ACTOR_HEADER, "").strip()[:_MAX_ACTOR]
    if not is_text(actor):  # it is stored with every action: not bytes PostgreSQL refuses
        raise Invalid(f"{ACTOR_HEADER} must be UTF-8 text", details={"parameter": ACTOR_HEADER})
    if not actor:
        actor = f"tenant:{own}" if own else "admin"
    return Identity(tenant=tenant, admin=admin, permissions=permissions, actor=actor, acting=acting)


def key_matches(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison of the shared key; no key configured refuses everything."""
    if not expected or given is None:
        return False
    return hmac.compare_digest(header_bytes(given), expected.encode())


# --- the middleware -------------------------------------------------------------------------
IDENTITY: web.RequestKey[Identity] = web.RequestKey("identity", Identity)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
AccessLookup = Callable[[web.Request], Access | None]


def identity_of(request: web.Request) -> Identity:
    """The identity the middleware established for this request."""
    try:
        return request[IDENTITY]
    except KeyError:
        raise Unauthorized("the request carries no identity") from None


def auth_middleware(*, api_key: str | None, access_of: AccessLookup) -> Middleware:
    """Refuse without the shared key; establish the identity; check the route's access.

    ``access_of`` names what a matched route needs (None: an unmatched path, which still
    needs the key so that probing reveals nothing).
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not key_matches(request.headers.get(API_KEY_HEADER), api_key):
            raise Unauthorized(f"a valid {API_KEY_HEADER} header is required")
        access = access_of(request)
        if access is None or access is Special.INTERNAL:
            return await handler(request)
        identity = identity_from(request.headers, request.query.getall(ACTING_TENANT_PARAM, []))
        identity.require(access)
        request[IDENTITY] = identity
        bind(tenant=identity.tenant or "*", actor=identity.actor)
        return await handler(request)

    return middleware
