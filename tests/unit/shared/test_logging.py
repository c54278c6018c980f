"""Logging: JSON lines with bound context, and secrets never written."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import structlog

from shared import logging


@pytest.fixture(autouse=True)
def restore_structlog() -> Iterator[None]:
    """configure() is process-wide; hand the next tests the defaults back."""
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def test_json_lines_carry_context_and_redact_secrets(capsys: pytest.CaptureFixture[str]) -> None:
    logging.configure(service="test", json=True, level="info")
    logging.bind(cluster="c1", request_id="r-1")
    logging.get_logger("t").info("run_seen", workflow="wf", api_key="k", mlflow_password="p")
    logging.get_logger("t").debug("hidden_below_level")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]
    assert len(lines) == 1
    line = lines[0]
    assert line["event"] == "run_seen"
    assert line["service"] == "test"
    assert (line["cluster"], line["request_id"], line["workflow"]) == ("c1", "r-1", "wf")
    assert line["api_key"] == line["mlflow_password"] == "[redacted]"
    assert line["level"] == "info"
    assert "timestamp" in line


def test_a_request_aiohttp_cannot_parse_is_one_line_without_its_bytes(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    import logging as stdlib

    from aiohttp.http_exceptions import BadHttpMessage

    logging.configure(service="test", json=True, level="info")
    server = stdlib.getLogger("aiohttp.server")
    try:
        raise BadHttpMessage("Invalid header value char:\n\n  b'X-Key: secret\\x00'\n  ^")
    except BadHttpMessage as exc:
        server.exception("Error handling request from %s", "10.0.0.7", exc_info=exc)
    try:
        raise RuntimeError("a handler bug")
    except RuntimeError as exc:  # anything else still reaches the log with its traceback
        server.exception("Error handling request from %s", "10.0.0.7", exc_info=exc)
    err = capsys.readouterr().err
    (line,) = [json.loads(text) for text in err.splitlines() if text]
    assert line["event"] == "request_malformed"
    assert (line["status"], line["error"], line["remote"]) == (400, "BadHttpMessage", "10.0.0.7")
    assert line["reason"] == "Invalid header value char"
    assert "secret" not in err
    (passed,) = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert passed.exc_info is not None
    assert isinstance(passed.exc_info[1], RuntimeError)


def test_the_kubernetes_clients_debug_lines_are_never_written_even_at_debug() -> None:
    """They hold whole response bodies: a Secret's data among them."""
    import logging as stdlib

    logging.configure(service="test", json=True, level="debug")
    assert stdlib.getLogger("kubernetes_asyncio.client.rest").getEffectiveLevel() == stdlib.INFO
