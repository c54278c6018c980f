"""KServe's storage initializer for S3, run in-process: download every object under a
storageUri's prefix with the predictor's credentials (boto3 against moto or S3), as
`kserve_storage.Storage._download_s3` does, failing with its messages."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    NoCredentialsError,
)

from sim.serving.credentials import (
    S3Access,
    StorageError,
    StorageUri,
    failed_downloads,
    no_model_found,
    storage_error_message,
)


def _client(access: S3Access) -> Any:
    return boto3.session.Session().client(
        "s3",
        endpoint_url=access.endpoint_url or None,
        region_name=access.region or None,
        aws_access_key_id=access.access_key_id,
        aws_secret_access_key=access.secret_access_key,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            connect_timeout=5,
            read_timeout=15,
        ),
    )


def _failure(error: Exception, bucket: str) -> StorageError:
    response = getattr(error, "response", None) or {}
    details = response.get("Error") or {}
    return StorageError(
        storage_error_message(
            error,
            error_code=str(details.get("Code") or ""),
            error_message=str(details.get("Message") or ""),
            bucket=bucket,
        )
    )


def download_sync(uri: StorageUri, access: S3Access) -> dict[str, bytes]:
    """The objects under the prefix, by path relative to it (an exact key: its base name)."""
    if access.access_key_id is None:
        # Without a Secret boto3 would look for the machine's own credentials; the pod has none.
        raise StorageError(storage_error_message(NoCredentialsError(), bucket=uri.bucket))
    s3 = _client(access)
    tasks: list[tuple[str, str]] = []
    try:
        # No HeadBucket first, as upstream lists straight away: a reader allowed to list only
        # its prefix (an `s3:prefix` condition) could not pass one, which names no prefix.
        paginator = s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=uri.bucket, Prefix=uri.prefix):
            for obj in page.get("Contents") or []:
                key, size = str(obj["Key"]), int(obj.get("Size") or 0)
                if key.endswith("/") or size == 0:
                    continue
                if key == uri.prefix:
                    tasks = [(key, key.rsplit("/", 1)[-1])]
                    break
                tasks.append((key, key.removeprefix(uri.prefix).lstrip("/")))
            else:
                continue
            break
    except (ClientError, NoCredentialsError) as error:
        raise _failure(error, uri.bucket) from error
    except BotoCoreError as error:
        raise _failure(error, uri.bucket) from error
    if not tasks:
        raise StorageError(no_model_found(uri.prefix))
    files: dict[str, bytes] = {}
    failures: list[tuple[str, str]] = []
    for key, target in tasks:
        try:
            buffer = io.BytesIO()  # download_fileobj heads the object first, as download_file
            s3.download_fileobj(uri.bucket, key, buffer)
            files[target] = buffer.getvalue()
        except (ClientError, BotoCoreError) as error:
            failures.append((key, str(error)))
    if failures:
        raise StorageError(failed_downloads(failures))
    return files


async def download(uri: StorageUri, access: S3Access) -> dict[str, bytes]:
    return await asyncio.to_thread(download_sync, uri, access)
