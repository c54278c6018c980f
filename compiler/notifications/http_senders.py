"""POSTing a notification (Slack's incoming webhook, PagerDuty's Events API v2) over aiohttp.

A Slack webhook URL and a PagerDuty routing key are credentials: whoever holds one can post. So
nothing here logs a URL or a body, and no error raised from here carries either (aiohttp's own
exceptions name the URL: they are replaced, never chained).

One connection per request (no keep-alive): a request written on a pooled connection the
receiver had just closed would fail after it may have been read, which for Slack is a message
we could no longer send again. Redirects are not followed (a webhook that redirects is refused
like any other 3xx). Proxies from the environment (``HTTPS_PROXY``, ``NO_PROXY``) are honoured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

REQUEST_TIMEOUT: Final = 10.0
CONNECT_TIMEOUT: Final = 5.0
MAX_ANSWER: Final = 4096


@dataclass(frozen=True, slots=True)
class Answer:
    """The receiver's answer: status, the start of its body, its ``Retry-After`` header."""

    status: int
    body: str
    retry_after: str | None


class NoAnswer(Exception):
    """No answer came back. ``reached``: the request may have arrived (it was written, or
    the answer was lost); False only when no byte of it was sent: the connection (or the
    proxy's tunnel) was never made, the name never resolved, the TLS handshake failed."""

    def __init__(self, error: str, *, reached: bool) -> None:
        super().__init__(error)
        self.error = error
        self.reached = reached


def open_session() -> aiohttp.ClientSession:
    """The sender's HTTP session (the caller closes it)."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT, sock_connect=CONNECT_TIMEOUT),
        connector=aiohttp.TCPConnector(force_close=True, limit=16),
        trust_env=True,
        headers={"User-Agent": "workflow-manager-notifications"},
    )


async def post_json(session: aiohttp.ClientSession, url: str, body: Mapping[str, Any]) -> Answer:
    """POST ``body`` as JSON to ``url``; ``NoAnswer`` when no answer came back."""
    try:
        async with session.post(url, json=dict(body), allow_redirects=False) as response:
            data = await response.content.read(MAX_ANSWER)
            return Answer(
                response.status,
                data.decode(errors="replace"),
                response.headers.get("Retry-After"),
            )
    except (
        aiohttp.ClientConnectorError,  # refused, DNS, TLS handshake, certificate
        aiohttp.ConnectionTimeoutError,
        aiohttp.ClientHttpProxyError,  # the proxy refused the tunnel (CONNECT): nothing sent
    ) as exc:
        raise NoAnswer(f"could not connect ({type(exc).__name__})", reached=False) from None
    except aiohttp.InvalidURL:
        raise NoAnswer("the URL cannot be used (InvalidURL)", reached=False) from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise NoAnswer(f"no answer ({type(exc).__name__})", reached=True) from None
