"""structlog, configured once per process: JSON in production, console in a terminal.

Context (cluster, namespace, workflow, tenant, request_id) is bound through contextvars with
``bind`` so every line logged inside a request or a task carries it.
"""

from __future__ import annotations

import logging
import sys

import structlog
from aiohttp.http_exceptions import HttpProcessingError

_SECRET_KEYS = frozenset(
    {"password", "token", "secret", "api_key", "authorization", "kubeconfig", "access_key"}
)


def _redact(_: object, __: str, event: structlog.types.EventDict) -> structlog.types.EventDict:
    """Never log a secret, even by accident: blank every key that names one."""
    for key in event:
        if any(word in key.lower() for word in _SECRET_KEYS):
            event[key] = "[redacted]"
    return event


class _MalformedRequests(logging.Filter):
    """aiohttp answers a request it cannot parse (bad header bytes, a raw non-ASCII byte in
    the path, an over-long header) with a 400 itself and logs the parser's exception with its
    traceback through ``aiohttp.server``. That is the client's mistake: one line, no traceback,
    and none of the request's bytes (they may hold a credential)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        reason = (exc.message or "").strip().splitlines()
        structlog.get_logger("aiohttp.server").info(
            "request_malformed",
            status=exc.code,
            error=type(exc).__name__,
            reason=reason[0].split(":")[0].strip() if reason else None,
            remote=record.args[0] if isinstance(record.args, tuple) and record.args else None,
        )
        return False


def configure(*, service: str, json: bool | None = None, level: str = "info") -> None:
    """Configure structlog and the stdlib root logger for ``service``."""
    use_json = (not sys.stderr.isatty()) if json is None else json
    numeric = logging.getLevelName(level.upper())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact,
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service)
    logging.basicConfig(level=max(numeric, logging.INFO), stream=sys.stderr, format="%(message)s")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # The Kubernetes client's debug lines are whole response bodies, Secrets' data included
    # (the compiler writes and lists the tenants' data secrets): never, at any level.
    logging.getLogger("kubernetes_asyncio").setLevel(logging.INFO)
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(known, _MalformedRequests) for known in server.filters):
        server.addFilter(_MalformedRequests())


bind = structlog.contextvars.bind_contextvars
get_logger = structlog.get_logger
