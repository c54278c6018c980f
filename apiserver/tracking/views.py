"""MLflow's run and metric documents as the ``/ml-tracking`` routes show them. Purely
computational.

MLflow's answers are read defensively (any field may be missing or of another type) and
reduced to what the interface shows: a run's identity, state, times, latest metrics, parameters
and the tags people set (MLflow's own ``mlflow.*`` tags are left out, save the user who
started the run). The artifact location is never shown: it names storage the caller does not
reach through us. A value that is not a finite number (NaN, infinities, which MLflow accepts)
is ``null``, since JSON has no spelling for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

SYSTEM_TAG_PREFIX: Final = "mlflow."
USER_TAG: Final = "mlflow.user"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _pairs(value: object) -> dict[str, Any]:
    """MLflow's ``[{key, value}, ...]`` lists as a dict (later entries win)."""
    found: dict[str, Any] = {}
    for entry in value if isinstance(value, list) else []:
        if isinstance(entry, Mapping) and isinstance(entry.get("key"), str):
            found[entry["key"]] = entry.get("value")
    return found


def number(value: object) -> float | None:
    """A finite number, or None (NaN, infinities, anything else)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        result = float(value)
    except ValueError:
        return None
    return result if math.isfinite(result) else None


def millis_iso(value: object) -> str | None:
    """MLflow's epoch milliseconds as RFC 3339 in UTC with ``Z``; None when absent or absurd."""
    millis = number(value)
    if millis is None or millis < 0:
        return None
    try:
        moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_item(run: Mapping[str, Any]) -> dict[str, Any]:
    info = _mapping(run.get("info"))
    data = _mapping(run.get("data"))
    tags = {key: str(value) for key, value in _pairs(data.get("tags")).items()}
    user = tags.get(USER_TAG) or info.get("user_id") or None
    return {
        "run_id": str(info.get("run_id") or info.get("run_uuid") or ""),
        "name": info.get("run_name") if isinstance(info.get("run_name"), str) else None,
        "status": str(info.get("status") or "UNKNOWN"),
        "started_at": millis_iso(info.get("start_time")),
        "ended_at": millis_iso(info.get("end_time")),
        "user": str(user) if user else None,
        "metrics": {key: number(value) for key, value in _pairs(data.get("metrics")).items()},
        "params": {key: str(value) for key, value in _pairs(data.get("params")).items()},
        "tags": {k: v for k, v in tags.items() if not k.startswith(SYSTEM_TAG_PREFIX)},
    }


def metric_item(metric: Mapping[str, Any]) -> dict[str, Any]:
    step = number(metric.get("step"))
    timestamp = number(metric.get("timestamp"))
    return {
        "step": int(step) if step is not None else 0,
        "value": number(metric.get("value")),
        "timestamp": int(timestamp) if timestamp is not None else None,
        "at": millis_iso(timestamp),
    }


def experiment_of(run: Mapping[str, Any]) -> str | None:
    """The id of the experiment a run belongs to."""
    experiment = _mapping(run.get("info")).get("experiment_id")
    return str(experiment) if experiment is not None else None
