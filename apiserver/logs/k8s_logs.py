"""A pod's container log through the owning cluster's Kubernetes API, streamed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from shared.errors import DependencyDown
from shared.k8s import translate_status, translating

CHUNK = 16 * 1024


@contextlib.asynccontextmanager
async def pod_log(
    api: ApiClient, *, namespace: str, pod: str, container: str, follow: bool
) -> AsyncIterator[AsyncIterator[bytes]]:
    """Open the log (errors such as a missing pod are raised here, before any byte is sent)
    and yield its chunks; the connection is released on exit."""
    with translating():
        response: Any = await CoreV1Api(api).read_namespaced_pod_log(
            pod, namespace, container=container, follow=follow, _preload_content=False
        )
    try:
        if not 200 <= response.status <= 299:
            body = await response.read()
            raise translate_status(response.status, body, dict(response.headers))

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.content.iter_chunked(CHUNK):
                    yield chunk
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise DependencyDown(
                    "the cluster stopped sending the log", details={"error": type(exc).__name__}
                ) from exc

        yield chunks()
    finally:
        response.release()
