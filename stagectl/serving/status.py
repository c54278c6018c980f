"""Reading an InferenceService's status as KServe (v1beta1, Knative mode) writes it. Pure.

- Ready: the ``Ready`` condition is ``True`` and the status is about the current spec
  (``status.observedGeneration`` at least ``metadata.generation``; without generations, once
  KServe wrote any condition).
- Failed: KServe says the model cannot be served (``modelStatus.transitionStatus`` is
  ``BlockedByFailedLoad`` or ``InvalidSpec``), or a condition is ``False`` with a reason
  KServe and Knative give to terminal failures; otherwise an InferenceService that is not
  ready is still in progress (Knative reports ``Unknown`` while a revision comes up).
- The message of a failure: ``modelStatus.lastFailureInfo.message`` first (the model server's
  own words, "failed to load model ..."), else the first failing condition's message.
- For a canary (part three): ``status.components.predictor``'s ``latestReadyRevision``,
  ``latestRolledoutRevision``, ``previousRolledoutRevision``, ``latestCreatedRevision`` and
  ``traffic`` (revision, percent, latest, tag). The canary is the latest ready revision when it
  differs from the latest rolled-out one.

Never raises on a malformed status: what cannot be read is absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

READY: Final = "Ready"
# Conditions that say where a failure is, in the order a message is taken from them.
CONDITIONS: Final = (
    READY,
    "PredictorReady",
    "PredictorConfigurationReady",
    "LatestDeploymentReady",
    "PredictorRouteReady",
    "RoutesReady",
    "IngressReady",
)
FAILED_TRANSITIONS: Final = frozenset({"BlockedByFailedLoad", "InvalidSpec"})
# Reasons of a False condition that no waiting cures (Knative's revision and KServe's own).
TERMINAL_REASONS: Final = frozenset(
    {
        "RevisionFailed",
        "RevisionMissing",
        "ContainerMissing",
        "ExitCode",
        "ProgressDeadlineExceeded",
        "ModelLoadFailed",
        "InvalidPredictorSpec",
        "RuntimeNotRecognized",
        "NoSupportingRuntime",
        "RuntimeDisabled",
        "InvalidGPUAllocation",
    }
)
MAX_MESSAGE: Final = 2000


@dataclass(frozen=True, slots=True)
class TrafficTarget:
    revision: str | None
    percent: int
    latest: bool
    tag: str | None


@dataclass(frozen=True, slots=True)
class ServingStatus:
    ready: bool
    failed: bool
    current: bool  # the status describes the spec as last written
    url: str | None
    message: str | None
    latest_ready_revision: str | None
    latest_created_revision: str | None
    latest_rolledout_revision: str | None
    previous_rolledout_revision: str | None
    traffic: tuple[TrafficTarget, ...]

    @property
    def canary_revision(self) -> str | None:
        """The latest ready revision while it is not the rolled-out one."""
        if self.latest_ready_revision and self.latest_ready_revision != (
            self.latest_rolledout_revision
        ):
            return self.latest_ready_revision
        return None


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str | None:
    return value[:MAX_MESSAGE] if isinstance(value, str) and value else None


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        kind = _map(condition).get("type")
        if isinstance(kind, str) and kind not in found:
            found[kind] = _map(condition)
    return found


def _traffic(predictor: Mapping[str, Any]) -> tuple[TrafficTarget, ...]:
    targets = []
    raw = predictor.get("traffic")
    for item in raw if isinstance(raw, list) else []:
        entry = _map(item)
        percent = entry.get("percent")
        targets.append(
            TrafficTarget(
                revision=_text(entry.get("revisionName")),
                percent=percent if isinstance(percent, int) and 0 <= percent <= 100 else 0,
                latest=entry.get("latestRevision") is True,
                tag=_text(entry.get("tag")),
            )
        )
    return tuple(targets)


def read_status(isvc: Mapping[str, Any] | None) -> ServingStatus:
    """The status of an InferenceService as read from the API (None: it does not exist)."""
    obj = _map(isvc)
    status = _map(obj.get("status"))
    generation = _map(obj.get("metadata")).get("generation")
    observed = status.get("observedGeneration")
    if isinstance(generation, int) and isinstance(observed, int):
        current = observed >= generation
    else:  # a status without generations: current once KServe wrote any condition
        current = bool(status.get("conditions"))
    conditions = _conditions(status)
    model_status = _map(status.get("modelStatus"))
    failure = _text(_map(model_status.get("lastFailureInfo")).get("message"))
    failing = [
        conditions[kind]
        for kind in CONDITIONS
        if kind in conditions and conditions[kind].get("status") == "False"
    ]
    failed = model_status.get("transitionStatus") in FAILED_TRANSITIONS or any(
        condition.get("reason") in TERMINAL_REASONS for condition in failing
    )
    ready = current and _map(conditions.get(READY)).get("status") == "True" and not failed
    message = None
    if not ready:
        message = failure or next(
            (m for m in (_text(c.get("message")) for c in failing) if m), None
        )
    predictor = _map(_map(status.get("components")).get("predictor"))
    return ServingStatus(
        ready=ready,
        failed=failed and current,
        current=current,
        url=_text(status.get("url")),
        message=message,
        latest_ready_revision=_text(predictor.get("latestReadyRevision")),
        latest_created_revision=_text(predictor.get("latestCreatedRevision")),
        latest_rolledout_revision=_text(predictor.get("latestRolledoutRevision")),
        previous_rolledout_revision=_text(predictor.get("previousRolledoutRevision")),
        traffic=_traffic(predictor),
    )
