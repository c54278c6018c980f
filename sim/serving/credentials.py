"""Which S3 credentials and endpoint KServe's storage initializer gets for a predictor, and
how it words a storage failure; purely computational, no side effects.

After kserve `pkg/credentials/service_account_credentials.go` (`CreateSecretVolumeAndEnv`:
each Secret listed on the predictor's ServiceAccount that holds the secret-access-key field
gives `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`; the field names are
`inferenceservice-config`'s `s3AccessKeyIDName` / `s3SecretAccessKeyName`, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY in KServe's shipped config) and `pkg/credentials/s3/utils.go`
(`BuildS3EnvVars`: `serving.kserve.io/s3-endpoint`, `s3-usehttps`, `s3-region`,
`s3-verifyssl` from the Secret's annotations, else the same keys in its data, else the
config's defaults; the ServiceAccount's annotations are read after the Secret's, as the IAM
role path does). Messages after `python/storage/kserve_storage/storage_errors.py`
(`get_storage_error_message`) and `kserve_storage.py` (`_download_s3`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

ANNOTATION = "serving.kserve.io/"
ENDPOINT = ANNOTATION + "s3-endpoint"
USE_HTTPS = ANNOTATION + "s3-usehttps"
REGION = ANNOTATION + "s3-region"
VERIFY_SSL = ANNOTATION + "s3-verifyssl"
# The same settings as Secret data keys (getEnvValue's fallback).
DATA_KEYS = {ENDPOINT: "S3_ENDPOINT", USE_HTTPS: "S3_USE_HTTPS", REGION: "AWS_DEFAULT_REGION"}


@dataclass(frozen=True)
class S3Config:
    """`inferenceservice-config`'s `credentials.s3` (defaults as KServe ships them) plus the
    controller's default endpoint."""

    access_key_id_name: str = "AWS_ACCESS_KEY_ID"
    secret_access_key_name: str = "AWS_SECRET_ACCESS_KEY"
    endpoint: str = ""
    use_https: str = ""
    region: str = "us-east-1"


@dataclass(frozen=True)
class S3Access:
    """What the storage initializer runs with: keys (None: no Secret gave any) and where."""

    endpoint_url: str
    region: str
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    secret: str | None = None  # the Secret the keys came from


@dataclass(frozen=True)
class StorageUri:
    bucket: str
    prefix: str


class StorageError(Exception):
    """The storage initializer failed; the message is its termination message."""


def parse_storage_uri(uri: object) -> StorageUri:
    """`s3://bucket/prefix`; StorageError (KServe's wording) for anything else."""
    if not isinstance(uri, str) or not uri:
        raise StorageError("storageUri is required")
    parts = urlsplit(uri)
    if parts.scheme != "s3":
        raise StorageError(f"Cannot recognize storage type for {uri}")
    if not parts.netloc:
        raise StorageError(f"Invalid S3 URI {uri}: no bucket")
    return StorageUri(parts.netloc, parts.path.lstrip("/"))


def secret_value(secret: Mapping[str, Any], key: str) -> str | None:
    """A Secret's value: `data` (base64) or, as the API server folds it in, `stringData`."""
    data = secret.get("data") or {}
    if key in data:
        try:
            return base64.b64decode(str(data[key]), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
    string_data = secret.get("stringData") or {}
    value = string_data.get(key)
    return str(value) if value is not None else None


def _setting(
    name: str, secret: Mapping[str, Any] | None, account: Mapping[str, Any], default: str
) -> str:
    for found in (
        ((secret or {}).get("metadata") or {}).get("annotations") or {},
        (account.get("metadata") or {}).get("annotations") or {},
    ):
        if name in found:
            return str(found[name])
    if secret is not None and name in DATA_KEYS:
        value = secret_value(secret, DATA_KEYS[name])
        if value is not None:
            return value
    return default


def endpoint_url(endpoint: str, use_https: str) -> str:
    """getEndpointConfiguration: a scheme in the endpoint wins; else `s3-usehttps` "0" means
    http, anything else https."""
    endpoint = endpoint.strip()
    if endpoint.lower().startswith(("http://", "https://")):
        return endpoint
    scheme = "http" if use_https == "0" else "https"
    return f"{scheme}://{endpoint}"


def s3_access(
    account: Mapping[str, Any], secrets: Mapping[str, Mapping[str, Any]], config: S3Config
) -> S3Access:
    """The storage initializer's S3 settings for a ServiceAccount and the Secrets of its
    namespace (by name): the last listed Secret with the secret-key field wins, as each one's
    env vars replace the previous ones."""
    chosen: Mapping[str, Any] | None = None
    chosen_name: str | None = None
    for reference in account.get("secrets") or []:
        name = str((reference or {}).get("name") or "")
        secret = secrets.get(name)
        if secret is not None and secret_value(secret, config.secret_access_key_name) is not None:
            chosen, chosen_name = secret, name
    endpoint = _setting(ENDPOINT, chosen, account, config.endpoint)
    use_https = _setting(USE_HTTPS, chosen, account, config.use_https)
    region = _setting(REGION, chosen, account, config.region)
    if chosen is None:
        return S3Access(endpoint_url(endpoint, use_https) if endpoint else "", region)
    return S3Access(
        endpoint_url=endpoint_url(endpoint, use_https) if endpoint else "",
        region=region,
        access_key_id=secret_value(chosen, config.access_key_id_name),
        secret_access_key=secret_value(chosen, config.secret_access_key_name),
        secret=chosen_name,
    )


def storage_error_message(
    error: Exception, *, error_code: str = "", error_message: str = "", bucket: str = ""
) -> str:
    """get_storage_error_message for S3: the user-facing sentence for a failed S3 call
    (`error_code` and `error_message` are botocore's `Error.Code` and `Error.Message`)."""
    kind = type(error).__name__
    text = str(error).lower()
    if kind == "NoCredentialsError" or "credential" in text or "auth" in text:
        return (
            "S3 authentication failed. Set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or use "
            "awsAnonymousCredential=true."
        )
    if kind == "NotFound" or "not found" in text or "does not exist" in text:
        return f"S3 resource '{bucket}' not found." if bucket else "S3 resource not found."
    if kind in ("Forbidden", "AccessDenied") or "access denied" in text or "permission" in text:
        if bucket:
            return f"Access denied to S3 resource '{bucket}'. Verify permissions."
        return "Access denied. Verify S3 permissions."
    if kind == "ConnectionError" or "connection" in text or "timeout" in text:
        if bucket:
            return f"Failed to connect to S3 endpoint '{bucket}'."
        return "Failed to connect to S3 endpoint."
    if error_code in ("InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return "Invalid AWS credentials. Verify AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY."
    if error_code == "NoSuchBucket":
        return f"S3 bucket '{bucket}' does not exist."
    if error_code:
        return f"S3 error [{error_code}]: {error_message}"
    return f"S3 error: {error}"


def no_model_found(prefix: str) -> str:
    return f"Failed to fetch model. No model found in {prefix}."


def failed_downloads(failures: list[tuple[str, str]]) -> str:
    details = "; ".join(f"{key}: {message}" for key, message in failures)
    return f"Failed to download {len(failures)} files: {details}"
