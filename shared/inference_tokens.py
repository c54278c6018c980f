"""Bearer tokens of model endpoints and the endpoint host scheme (docs/inference-auth.md).

Shared by the issuer (stagectl, through ``shared.db.inference_tokens``) and the checker
(inference_auth). Purely computational apart from ``new_token``, which draws its randomness
from ``secrets``.

- A token is ``wmi_<lookup id>_<secret>``: the prefix lets secret scanners recognise a leaked
  one; the lookup id (16 base62 characters, about 95 bits) finds the row without a scan and is
  not secret; the secret is 256 random bits written as 43 base62 characters. Only
  ``token_hash`` of it is stored.
- The hash is one SHA-256 over the lookup id and the secret. A slow password hash (bcrypt,
  argon2) defends low-entropy human passwords against offline guessing; a 256-bit random
  secret cannot be guessed offline whatever the hash, so a fast hash loses nothing and keeps
  the check cheap on the hottest path of the platform. Comparison is constant-time.
- A deployment's host is ``<model>-<environment>.<tenant>.<domain>``: the environment has no
  hyphen, so the last hyphen of the first label splits it from the model unambiguously, and
  one wildcard certificate per tenant (``*.<tenant>.<domain>``) covers every endpoint of it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Final

from shared.identifiers import DNS_SUBDOMAIN_PATTERN, TENANT_ID

PREFIX: Final = "wmi_"
_BASE62: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
LOOKUP_ID_LENGTH: Final = 16
SECRET_LENGTH: Final = 43  # 62**43 > 2**256: 256 random bits fit, with no modulo bias
SECRET_BITS: Final = 256
_LOOKUP_BITS: Final = 95  # 62**16 > 2**95
TOKEN_LENGTH: Final = len(PREFIX) + LOOKUP_ID_LENGTH + 1 + SECRET_LENGTH
_TOKEN: Final = re.compile(
    rf"wmi_([0-9A-Za-z]{{{LOOKUP_ID_LENGTH}}})_([0-9A-Za-z]{{{SECRET_LENGTH}}})", re.ASCII
)
LOOKUP_ID: Final = re.compile(rf"[0-9A-Za-z]{{{LOOKUP_ID_LENGTH}}}", re.ASCII)
_BEARER: Final = re.compile(r"[ \t]*[Bb][Ee][Aa][Rr][Ee][Rr][ \t]+(\S+)[ \t]*", re.ASCII)

# A model name is a DNS label without the environment's hyphen-free suffix; an environment is a
# short lower-case word (staging, production); together with the hyphen they stay one label.
MODEL_NAME: Final = re.compile(r"[a-z0-9]([a-z0-9-]{0,44}[a-z0-9])?", re.ASCII)
ENVIRONMENT: Final = re.compile(r"[a-z][a-z0-9]{0,15}", re.ASCII)
_DOMAIN: Final = re.compile(DNS_SUBDOMAIN_PATTERN, re.ASCII)
_MAX_HOST: Final = 253


def _base62(value: int, width: int) -> str:
    digits = []
    for _ in range(width):
        value, digit = divmod(value, 62)
        digits.append(_BASE62[digit])
    return "".join(reversed(digits))


def format_token(lookup_id: str, secret: str) -> str:
    return f"{PREFIX}{lookup_id}_{secret}"


def new_token() -> tuple[str, str, str]:
    """A fresh ``(token, lookup_id, secret)`` from the operating system's CSPRNG."""
    lookup_id = _base62(secrets.randbits(_LOOKUP_BITS), LOOKUP_ID_LENGTH)
    secret = _base62(secrets.randbits(SECRET_BITS), SECRET_LENGTH)
    return format_token(lookup_id, secret), lookup_id, secret


def parse_token(text: object) -> tuple[str, str] | None:
    """``(lookup_id, secret)`` of a well-formed token, else None. Never raises."""
    if not isinstance(text, str) or len(text) != TOKEN_LENGTH:
        return None
    match = _TOKEN.fullmatch(text)
    return None if match is None else (match.group(1), match.group(2))


def bearer_token(authorization: object) -> tuple[str, str] | None:
    """``(lookup_id, secret)`` from an ``Authorization: Bearer <token>`` value, else None."""
    if not isinstance(authorization, str) or len(authorization) > 256:
        return None
    match = _BEARER.fullmatch(authorization)
    return None if match is None else parse_token(match.group(1))


def token_hash(lookup_id: str, secret: str) -> bytes:
    """What is stored for a token: SHA-256 binding the secret to its lookup id."""
    return hashlib.sha256(f"{PREFIX}{lookup_id}_{secret}".encode("ascii")).digest()


def hash_matches(lookup_id: str, secret: str, stored: bytes) -> bool:
    """Constant-time comparison of a presented secret with the stored hash."""
    return hmac.compare_digest(token_hash(lookup_id, secret), stored)


@dataclass(frozen=True, slots=True)
class DeploymentRef:
    tenant: str
    model: str
    environment: str

    @property
    def name(self) -> str:
        """``tenant/model/environment``: the response header and metric label."""
        return f"{self.tenant}/{self.model}/{self.environment}"


def check_deployment(*, tenant: str, model: str, environment: str) -> None:
    """Raise ValueError naming the part that does not fit the host scheme."""
    if not isinstance(tenant, str) or not TENANT_ID.fullmatch(tenant):
        raise ValueError("tenant: expected a tenant id (a DNS label of at most 48 characters)")
    if not isinstance(model, str) or not MODEL_NAME.fullmatch(model):
        raise ValueError("model: expected lower-case letters, digits and '-', at most 46")
    if not isinstance(environment, str) or not ENVIRONMENT.fullmatch(environment):
        raise ValueError("environment: expected a lower-case word of at most 16 characters")


def check_domain(domain: str) -> str:
    """The domain lower-cased without a trailing dot; ValueError unless DNS-valid."""
    normal = domain.lower().rstrip(".") if isinstance(domain, str) else ""
    if not normal or len(normal) > 200 or not _DOMAIN.fullmatch(normal):
        raise ValueError("domain: expected a DNS name such as models.example.com")
    if any(len(label) > 63 for label in normal.split(".")):
        raise ValueError("domain: a label is longer than 63 characters")
    return normal


def endpoint_host(*, tenant: str, model: str, environment: str, domain: str) -> str:
    """``<model>-<environment>.<tenant>.<domain>``; ValueError when a part does not fit."""
    check_deployment(tenant=tenant, model=model, environment=environment)
    host = f"{model}-{environment}.{tenant}.{check_domain(domain)}"
    if len(host) > _MAX_HOST:
        raise ValueError("domain: the endpoint host would exceed 253 characters")
    return host


def normalise_host(host: object) -> str | None:
    """A ``Host`` value lower-cased, without port or trailing dot; None when malformed."""
    if not isinstance(host, str) or not host or len(host) > 300:
        return None
    name, colon, port = host.partition(":")
    if colon and (not port.isascii() or not port.isdigit() or len(port) > 5):
        return None
    name = name.lower()
    if name.endswith("."):
        name = name[:-1]
    if not name or len(name) > _MAX_HOST or not _DOMAIN.fullmatch(name):
        return None
    return name


def parse_host(host: object, *, domain: str) -> DeploymentRef | None:
    """The deployment an endpoint host names under ``domain``; None for anything else."""
    name = normalise_host(host)
    if name is None:
        return None
    suffix = "." + check_domain(domain)
    if not name.endswith(suffix):
        return None
    labels = name[: -len(suffix)].split(".")
    if len(labels) != 2:
        return None
    first, tenant = labels
    model, hyphen, environment = first.rpartition("-")
    if not hyphen:
        return None
    try:
        check_deployment(tenant=tenant, model=model, environment=environment)
    except ValueError:
        return None
    return DeploymentRef(tenant=tenant, model=model, environment=environment)
