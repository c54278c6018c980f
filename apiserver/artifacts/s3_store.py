"""Reading objects from S3 (boto3 in worker threads), streamed in chunks, never whole."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import boto3  # type: ignore[import-untyped]
import botocore.exceptions  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]

from apiserver.artifacts.objects import StoredObject
from shared.errors import DependencyDown, NotFound

CHUNK = 64 * 1024
_MISSING = {"NoSuchKey", "NoSuchBucket", "404", "NotFound"}


class S3ObjectStore:
    def __init__(
        self,
        *,
        region: str,
        endpoint_url: str | None = None,
        client: Any | None = None,
        chunk_size: int = CHUNK,
    ) -> None:
        self._client = client or boto3.client(
            "s3",
            region_name=region,
            endpoint_url=endpoint_url,
            config=Config(
                connect_timeout=5, read_timeout=30, retries={"max_attempts": 2, "mode": "standard"}
            ),
        )
        self._chunk = chunk_size

    async def open(self, bucket: str, key: str) -> StoredObject:
        """Start reading ``bucket``/``key``; NotFound when it is not there."""
        try:
            answer = await asyncio.to_thread(self._client.get_object, Bucket=bucket, Key=key)
        except botocore.exceptions.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise NotFound("the object is not in object storage", details={"key": key}) from exc
            raise DependencyDown(
                "object storage refused the request",
                details={"dependency": "object_storage", "code": code},
            ) from exc
        except (botocore.exceptions.BotoCoreError, OSError) as exc:
            raise DependencyDown(
                "object storage is unreachable",
                details={"dependency": "object_storage", "error": type(exc).__name__},
            ) from exc
        body = answer["Body"]
        return StoredObject(
            content_type=str(answer.get("ContentType") or "application/octet-stream"),
            length=int(answer.get("ContentLength") or 0),
            chunks=self._chunks(body),
        )

    async def _chunks(self, body: Any) -> AsyncIterator[bytes]:
        try:
            while True:
                try:
                    chunk: bytes = await asyncio.to_thread(body.read, self._chunk)
                except (botocore.exceptions.BotoCoreError, OSError) as exc:
                    raise DependencyDown(
                        "object storage failed mid-read",
                        details={"dependency": "object_storage", "error": type(exc).__name__},
                    ) from exc
                if not chunk:
                    return
                yield chunk
        finally:
            with contextlib.suppress(Exception):
                body.close()
