"""``wm-inference-auth`` / ``python -m inference_auth``."""

import uvloop

from inference_auth import runner
from shared import logging
from shared.config import Settings, settings_or_exit
from shared.tasks import serve


def main() -> None:
    settings = settings_or_exit(Settings)
    logging.configure(service="inference_auth", json=settings.LOG_JSON, level=settings.LOG_LEVEL)
    # uvloop: this deployable answers every inference request, and its event loop's own
    # overhead is most of what a cached check costs.
    serve(
        lambda workers: runner.run(settings, workers),
        grace=settings.SHUTDOWN_GRACE,
        loop_factory=uvloop.new_event_loop,
    )


if __name__ == "__main__":
    main()
