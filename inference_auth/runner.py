"""Wires the inference_auth deployable.

For now it runs in the process frame every deployable shares (``shared.frame``): migrations,
the health and metrics side server, and a graceful stop on SIGTERM. Its routes and loops
arrive with their issues (docs/architecture.md lists what each deployable will do).
"""

from __future__ import annotations

from shared.config import Settings
from shared.frame import serve_frame
from shared.tasks import Supervisor


async def run(settings: Settings, workers: Supervisor) -> None:
    """Serve health and metrics until cancelled."""
    await serve_frame(settings, service="inference_auth")
