"""The process frame a deployable runs in before it has work of its own: migrations, a pool,
the health and metrics side server with a database readiness check, then wait for SIGTERM."""

from __future__ import annotations

import asyncio

from shared.config import Settings
from shared.db.migrations import apply_migrations
from shared.db.pool import create_pool, database_ready
from shared.health import HealthServer
from shared.logging import get_logger

log = get_logger(__name__)


async def serve_frame(settings: Settings, *, service: str) -> None:
    """Serve health and metrics for ``service`` until cancelled."""
    await apply_migrations(settings)
    pool = await create_pool(settings, application_name=f"wm-{service}")
    try:
        async with HealthServer.from_settings(settings) as health:
            health.add_check("postgresql", database_ready(pool))
            log.info("service_frame_started", deployable=service, health_port=health.port)
            await asyncio.Event().wait()
    finally:
        await pool.close()
