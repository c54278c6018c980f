"""``wm-watcher`` / ``python -m watcher``."""

from shared import logging
from shared.config import Settings, settings_or_exit
from shared.tasks import serve
from watcher import runner


def main() -> None:
    settings = settings_or_exit(Settings)
    logging.configure(service="watcher", json=settings.LOG_JSON, level=settings.LOG_LEVEL)
    serve(lambda workers: runner.run(settings, workers), grace=settings.SHUTDOWN_GRACE)


if __name__ == "__main__":
    main()
