"""Reads the cluster registry from kubeopera-api (contract in docs/api.md)."""

from __future__ import annotations

import aiohttp

from shared.clusters import RegistryEntry, parse_registry
from shared.errors import DependencyDown, Invalid


class RegistryClient:
    """``GET {base}/internal/v1/clusters`` with ``X-Internal-Key``."""

    def __init__(
        self, session: aiohttp.ClientSession, *, base_url: str, internal_key: str | None
    ) -> None:
        self._session = session
        self._url = base_url.rstrip("/") + "/internal/v1/clusters"
        self._headers = {"X-Internal-Key": internal_key} if internal_key else {}

    async def clusters(self) -> list[RegistryEntry]:
        try:
            async with self._session.get(
                self._url, headers=self._headers, timeout=aiohttp.ClientTimeout(total=15)
            ) as response:
                if response.status != 200:
                    raise DependencyDown(
                        "the cluster registry refused the request",
                        details={"status": response.status},
                    )
                payload = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DependencyDown(
                "the cluster registry is unreachable", details={"error": type(exc).__name__}
            ) from exc
        except ValueError as exc:
            raise Invalid("the cluster registry answered something that is not JSON") from exc
        return parse_registry(payload)
