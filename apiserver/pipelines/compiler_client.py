"""The compiler's internal API as the apiserver calls it (``compiler.internal_api``).

Errors come back in the public error shape and are raised again as the same status, code,
message and details, so a 422 listing violations reaches the caller unchanged. A compiler that
cannot be reached, or answers with something that is not our error shape, is a 503.
"""

from __future__ import annotations

from typing import Any, Final

import aiohttp

from shared.errors import (
    Conflict,
    DependencyDown,
    Forbidden,
    Invalid,
    NotFound,
    Refused,
    WorkflowManagerError,
)

INTERNAL_KEY_HEADER: Final = "X-Internal-Key"
# What the compiler answers with, by status: raised again as the same error here.
_RELAYED: Final[dict[int, type[WorkflowManagerError]]] = {
    400: Invalid,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: Refused,
    503: DependencyDown,
}


class CompilerClient:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        base_url: str,
        internal_key: str | None,
        timeout: float = 60.0,
    ) -> None:
        self._session = session
        self._base = base_url.rstrip("/") + "/internal/v1"
        self._headers = {INTERNAL_KEY_HEADER: internal_key or ""}
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    async def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        *,
        resource: str = "pipelines",
        query: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """``method`` on ``/internal/v1/<resource>/<path>`` with ``body`` (None: no body) and
        ``query``; the JSON answer."""
        url = f"{self._base}/{resource}/{path}".rstrip("/")
        try:
            async with self._session.request(
                method,
                url,
                json=body,
                params=query,
                headers=self._headers,
                timeout=self._timeout,
            ) as response:
                try:
                    payload = await response.json(content_type=None)
                except (ValueError, aiohttp.ContentTypeError):
                    payload = None
                status = response.status
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise DependencyDown(
                "the pipeline compiler could not be reached", details={"error": type(exc).__name__}
            ) from exc
        if not isinstance(payload, dict):
            raise DependencyDown(
                f"the pipeline compiler answered unexpectedly (HTTP {status})",
                details={"http_status": status},
            )
        if status < 400:
            return payload
        if status == 401:  # our key, not the caller's: an operator must fix the configuration
            raise DependencyDown(
                "the pipeline compiler refused this apiserver's internal key",
                details={"http_status": status},
            )
        details = payload.get("details")
        message = str(payload.get("message") or f"HTTP {status}")
        error = _RELAYED.get(status)
        if error is None:
            raise DependencyDown(
                f"the pipeline compiler failed: {message}", details={"http_status": status}
            )
        raise error(message, details=details if isinstance(details, dict) else {})
