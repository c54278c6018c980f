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
