"""``wm-stagectl`` / ``python -m stagectl``."""

from shared import logging
from shared.config import Settings, settings_or_exit
from shared.tasks import serve
from stagectl import runner


def main() -> None:
    settings = settings_or_exit(Settings)
    logging.configure(service="stagectl", json=settings.LOG_JSON, level=settings.LOG_LEVEL)
    serve(lambda workers: runner.run(settings, workers), grace=settings.SHUTDOWN_GRACE)


if __name__ == "__main__":
    main()
