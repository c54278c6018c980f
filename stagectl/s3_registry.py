"""The model registry's files in object storage (ARTIFACT_BUCKET), through boto3.

boto3 blocks, so every call runs in a worker thread of the adapter's own pool (as many threads
as boto3 keeps connections: the loop's default pool has a handful on a small node, and a burst
of registrations would queue behind it). Copies are
server-side (one CopyObject up to 5 GiB, a multipart copy above), so a model of up to 5 GiB never
passes through this process. Every write here is idempotent: a copy or a put of the
same source to the same key gives the same object, which is what lets a register stage that
crashed half-way simply run again.

A copy is pinned to the object that was checked: it is made only if the source's ETag is still
the one read (``CopySourceIfMatch``, on every part of a multipart copy too), and one CopyObject
asks storage for the SHA-256 of the bytes it wrote (``ChecksumAlgorithm``), which is the
registered file's digest. A multipart copy's checksum is one of its parts, not of its bytes, so
above 5 GiB (or where storage computes no checksum) the digest is read through once.

Errors: a missing object is ``NotFound``; a source written again since it was read (HTTP 412)
is ``Conflict``; anything else storage answers, or not being able to reach it, is
``DependencyDown`` (the stage is tried again later); refusals of our own rights are
``ConfigError`` (an operator must fix the policy, docs/iam.md).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import hashlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import boto3  # type: ignore[import-untyped]
import botocore.exceptions  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]

from shared.errors import ConfigError, Conflict, DependencyDown, NotFound

_MISSING = {"NoSuchKey", "NoSuchBucket", "404", "NotFound"}
_DENIED = {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"}
_CHANGED = {"PreconditionFailed", "412"}  # 412 alone: a HEAD's answer has no body
CONNECTIONS = 32
MAX_SINGLE_COPY = 5 * 1024**3  # S3's limit for one CopyObject
_READ_CHUNK = 8 * 1024**2  # bytes read at a time when a digest is read through


@dataclass(frozen=True, slots=True)
class Stored:
    """What object storage says of an object: its size and its ETag (for an object written in
    one part, the MD5 of its bytes: two equal ETags are the same content)."""

    size: int
    etag: str


@dataclass(frozen=True, slots=True)
class Copied:
    """A copy made: its ETag, and the SHA-256 of its bytes (hex) when storage computed it as
    it copied (None: a multipart copy, or storage that computes no checksum)."""

    etag: str
    sha256: str | None


def _sha256_hex(checksum: object) -> str | None:
    """S3's ``ChecksumSHA256`` (base64 of the digest) as hex; None for anything else (absent,
    or a multipart object's checksum of its parts, ``<base64>-<parts>``)."""
    if not isinstance(checksum, str):
        return None
    try:
        raw = base64.b64decode(checksum, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == hashlib.sha256().digest_size else None


# Seconds spent waiting for object storage by the stage running in this context.
_WAITED: ContextVar[list[float] | None] = ContextVar("storage_waited", default=None)


@contextmanager
def storage_time() -> Iterator[list[float]]:
    """Add up, in the list it yields (one element), the time calls made in this context wait
    for object storage: a stage's time less its copies is the controller's own."""
    waited = [0.0]
    token = _WAITED.set(waited)
    try:
        yield waited
    finally:
        _WAITED.reset(token)


@contextmanager
def _translated(key: str) -> Iterator[None]:
    try:
        yield
    except botocore.exceptions.ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in _MISSING:
            raise NotFound("the object is not in object storage", details={"key": key}) from exc
        if code in _CHANGED:
            raise Conflict(
                "the object was written again since it was read", details={"key": key}
            ) from exc
        if code in _DENIED:
            raise ConfigError(
                "object storage refused workflow-manager's own credentials",
                details={"code": code, "key": key},
            ) from exc
        raise DependencyDown(
            "object storage refused the request",
            details={"dependency": "object_storage", "code": code},
        ) from exc
    except (botocore.exceptions.BotoCoreError, OSError) as exc:
        raise DependencyDown(
            "object storage is unreachable",
            details={"dependency": "object_storage", "error": type(exc).__name__},
        ) from exc


class RegistryObjects:
    """Reads from tenants' artifact prefixes and writes into the registry's, in one bucket."""

    def __init__(
        self,
        *,
        bucket: str,
        region: str,
        endpoint_url: str | None = None,
        client: Any | None = None,
        single_copy_limit: int = MAX_SINGLE_COPY,
    ) -> None:
        self.bucket = bucket
        self._single_copy_limit = single_copy_limit
        self._client = client or boto3.client(
            "s3",
            region_name=region,
            endpoint_url=endpoint_url,
            config=Config(
                connect_timeout=5,
                read_timeout=60,
                retries={"max_attempts": 3, "mode": "standard"},
                max_pool_connections=CONNECTIONS,
            ),
        )
        self._threads = ThreadPoolExecutor(CONNECTIONS, thread_name_prefix="registry-s3")

    def close(self) -> None:
        """Let the threads go (calls still running finish first)."""
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def _call(self, key: str, function: Any, /, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            with _translated(key):
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(
                    self._threads, functools.partial(function, **kwargs)
                )
        finally:
            waited = _WAITED.get()
            if waited is not None:
                waited[0] += time.perf_counter() - started

    async def head(self, key: str) -> Stored:
        """The object's size and ETag; NotFound when it is not there."""
        answer = await self._call(key, self._client.head_object, Bucket=self.bucket, Key=key)
        return Stored(size=int(answer.get("ContentLength") or 0), etag=str(answer.get("ETag")))

    async def read(self, key: str, *, limit: int) -> tuple[bytes, Stored]:
        """At most ``limit + 1`` bytes of the object (the caller refuses anything longer),
        and its size and ETag, in one call."""

        def get() -> tuple[bytes, Stored]:
            answer = self._client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=0-{limit}")
            with contextlib.closing(answer["Body"]) as body:
                data: bytes = body.read()
            size = str(answer.get("ContentRange") or "").rpartition("/")[2]
            total = int(size) if size.isdigit() else int(answer.get("ContentLength") or 0)
            return data, Stored(size=total, etag=str(answer.get("ETag")))

        result: tuple[bytes, Stored] = await self._call(key, get)
        return result

    async def copy(self, source: str, destination: str, *, checked: Stored) -> Copied:
        """Copy ``source`` to ``destination`` inside the bucket, server-side, only while
        ``source`` is the object ``checked`` describes (its ETag: Conflict when it was written
        again since). One CopyObject up to S3's limit for it, which also answers the SHA-256
        of the bytes it wrote; a multipart copy above (no digest: ``sha256`` reads it)."""
        copy_source = {"Bucket": self.bucket, "Key": source}
        if checked.size <= self._single_copy_limit:
            answer = await self._call(
                source,
                self._client.copy_object,
                CopySource=copy_source,
                CopySourceIfMatch=checked.etag,
                ChecksumAlgorithm="SHA256",
                Bucket=self.bucket,
                Key=destination,
            )
            result = answer.get("CopyObjectResult") or {}
            return Copied(
                etag=str(result.get("ETag")), sha256=_sha256_hex(result.get("ChecksumSHA256"))
            )
        # boto3's managed copy heads the source with If-Match and puts the condition on
        # every UploadPartCopy, so no part comes from a newer object.
        await self._call(
            source,
            self._client.copy,
            CopySource=copy_source,
            Bucket=self.bucket,
            Key=destination,
            ExtraArgs={"CopySourceIfMatch": checked.etag},
        )
        return Copied(etag="", sha256=None)

    async def sha256(self, key: str) -> str:
        """The SHA-256 (hex) of the object's bytes, read through in chunks of 8 MiB."""

        def digest() -> str:
            answer = self._client.get_object(Bucket=self.bucket, Key=key)
            hashed = hashlib.sha256()
            with contextlib.closing(answer["Body"]) as body:
                while chunk := body.read(_READ_CHUNK):
                    hashed.update(chunk)
            return hashed.hexdigest()

        result: str = await self._call(key, digest)
        return result

    async def put_json(self, key: str, doc: Any) -> None:
        body = json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"
        await self._call(
            key,
            self._client.put_object,
            Bucket=self.bucket,
            Key=key,
            Body=body,
            ContentType="application/json",
        )

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; how many there were."""
        deleted = 0
        token: str | None = None
        while True:
            page_args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                page_args["ContinuationToken"] = token
            page = await self._call(prefix, self._client.list_objects_v2, **page_args)
            keys = [{"Key": item["Key"]} for item in page.get("Contents") or []]
            if keys:
                await self._call(
                    prefix,
                    self._client.delete_objects,
                    Bucket=self.bucket,
                    Delete={"Objects": keys, "Quiet": True},
                )
                deleted += len(keys)
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return deleted
