"""Container logs of pods: appended by the Argo simulator, read (and followed) through the API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sim.kube.types import ApiError


class ContainerLog:
    """Lines of one container; followers wake on every append and on close."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.closed = False
        self._changed = asyncio.Event()

    def append(self, line: str) -> None:
        self.lines.append(line)
        self._notify()

    def close(self) -> None:
        self.closed = True
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def read(self, *, follow: bool, tail_lines: int | None = None) -> AsyncIterator[str]:
        """Existing lines (the last `tail_lines` of them), then new ones until closed."""
        start = 0 if tail_lines is None else max(0, len(self.lines) - tail_lines)
        while True:
            changed = self._changed
            while start < len(self.lines):
                yield self.lines[start]
                start += 1
            if not follow or self.closed:
                return
            await changed.wait()


class PodLogs:
    """Every container log of one cluster, keyed by namespace, pod and container."""

    def __init__(self) -> None:
        self._logs: dict[tuple[str, str], dict[str, ContainerLog]] = {}

    def get_or_create(self, namespace: str, pod: str, container: str) -> ContainerLog:
        containers = self._logs.setdefault((namespace, pod), {})
        log = containers.get(container)
        if log is None:
            log = containers[container] = ContainerLog()
        return log

    def containers(self, namespace: str, pod: str) -> dict[str, ContainerLog]:
        return self._logs.get((namespace, pod), {})

    def open(self, namespace: str, pod: str, container: str | None) -> ContainerLog:
        """The log a request names (no container: "main", or the only one); 400 when none."""
        containers = self.containers(namespace, pod)
        if container is None:
            if "main" in containers or len(containers) != 1:
                container = "main"
            else:
                container = next(iter(containers))
        log = containers.get(container)
        if log is None:
            raise ApiError(
                400,
                "BadRequest",
                f'container "{container}" in pod "{pod}" is not available: choose one of: '
                f"[{' '.join(sorted(containers))}]",
            )
        return log

    def drop_pod(self, namespace: str, pod: str) -> None:
        """The pod is gone: followers end, its logs are forgotten."""
        for log in self._logs.pop((namespace, pod), {}).values():
            log.close()

    def close_all(self) -> None:
        for containers in self._logs.values():
            for log in containers.values():
                log.close()
