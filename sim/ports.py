"""A free TCP port on the loopback interface, for the servers tests, benchmarks and the demo
start (nginx, moto, emulators' neighbours)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on right now (the caller binds it soon after)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
