"""``wm-migrate`` / ``python -m shared.db``: apply the missing migrations and exit."""

import asyncio

from shared import logging
from shared.config import Settings, settings_or_exit
from shared.db.migrations import apply_migrations
from shared.errors import WorkflowManagerError


def main() -> None:
    settings = settings_or_exit(Settings)
    logging.configure(service="migrate", json=settings.LOG_JSON, level=settings.LOG_LEVEL)
    try:
        asyncio.run(apply_migrations(settings))
    except WorkflowManagerError as exc:
        logging.get_logger(__name__).error("migrations_failed", error=exc.code, reason=exc.message)
        raise SystemExit(1) from exc


if __name__ == "__main__":
    main()
