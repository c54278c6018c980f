"""Objects and readers shared by the Kubernetes API emulator tests."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio.client import (
    V1ConfigMap,
    V1ObjectMeta,
)
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
WF = ("argoproj.io", "v1alpha1")


def _status(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def _workflow(name: str, *, phase: str | None = None, **labels: str) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name, "labels": labels},
        "spec": {"entrypoint": "main"},
    }
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def _cm(name: str, **labels: str) -> V1ConfigMap:
    return V1ConfigMap(metadata=V1ObjectMeta(name=name, labels=labels), data={"k": "v"})


async def _collect(
    watch: Watch, func: Any, *args: Any, limit: int | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with watch:
        async for event in watch.stream(func, *args, **kwargs):
            events.append(event)
            if limit is not None and len(events) >= limit:
                watch.stop()
                break
    return events
