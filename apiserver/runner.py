"""Wires the apiserver deployable.

For now this is the process frame every deployable shares: migrations, the health and metrics
side server, and a graceful stop on SIGTERM. Its routes and loops arrive with their issues
(docs/architecture.md lists what each deployable will do).
"""

from __future__ import annotations

import asyncio

from shared.config import Settings
from shared.db.migrations import apply_migrations
from shared.db.pool import create_pool
from shared.health import HealthServer
from shared.logging import get_logger
from shared.tasks import Supervisor

log = get_logger(__name__)


async def run(settings: Settings, workers: Supervisor) -> None:
    """Serve health and metrics until cancelled."""
    await apply_migrations(settings)
    pool = await create_pool(settings, application_name="wm-apiserver")
    try:
        async with HealthServer.from_settings(settings) as health:

            async def database() -> None:
                await pool.fetchval("SELECT 1")

            health.add_check("postgresql", database)
            log.info("apiserver_started", health_port=health.port)
            await asyncio.Event().wait()
    finally:
        await pool.close()
