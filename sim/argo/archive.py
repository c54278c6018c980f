"""Object storage for archived step logs and output artifacts (boto3 against moto or S3)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import boto3  # type: ignore[import-untyped]


@dataclass(frozen=True)
class S3Settings:
    endpoint: str
    bucket: str
    access_key: str = "testing"
    secret_key: str = "testing"
    region: str = "us-east-1"


class S3Archive:
    """Writes objects to the controller's default bucket or a namespace repository's."""

    def __init__(self, settings: S3Settings) -> None:
        self.settings = settings
        self._client = boto3.client(
            "s3",
            endpoint_url=settings.endpoint,
            aws_access_key_id=settings.access_key,
            aws_secret_access_key=settings.secret_key,
            region_name=settings.region,
        )

    @property
    def bucket(self) -> str:
        return self.settings.bucket

    async def put(self, key: str, body: bytes, *, bucket: str | None = None) -> None:
        await asyncio.to_thread(
            self._client.put_object, Bucket=bucket or self.bucket, Key=key, Body=body
        )

    async def ensure_bucket(self, bucket: str | None = None) -> None:
        """Create the bucket when it does not exist yet."""
        name = bucket or self.bucket

        def create() -> None:
            existing = {b["Name"] for b in self._client.list_buckets().get("Buckets", [])}
            if name not in existing:
                self._client.create_bucket(Bucket=name)

        await asyncio.to_thread(create)
