"""An InferenceService's status as KServe (Serverless mode) writes it over the Knative
Service it owns; purely computational, no side effects.

Conditions after kserve `pkg/apis/serving/v1beta1/inference_service_status.go`
(`PropagateStatus`: PredictorReady, PredictorRouteReady and PredictorConfigurationReady copy
the Knative Service's Ready, RoutesReady and ConfigurationsReady; the component's URL is
taken only while Knative is Ready, then kept) and `reconcilers/ingress/ingress_reconciler.go`
(with `disableIstioVirtualHost`, `status.url` is the predictor's URL and IngressReady is True
once there is one); Ready is PredictorReady and IngressReady (a living condition set: False
when either is, Unknown until both are True). Knative's wording after knative/serving
`pkg/apis/serving/v1/configuration_lifecycle.go` (`Revision %q failed with message: %s.`,
reason RevisionFailed) and `revision_lifecycle.go` (`Container failed with: <message>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sim.serving.rollout import PredictorStatus, TrafficTarget

Phase = Literal["Loading", "Ready", "Failed"]
Condition = dict[str, str]
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


@dataclass(frozen=True)
class RevisionState:
    name: str
    phase: Phase
    reason: str = ""  # why it failed: ModelLoadFailed, ...
    message: str = ""  # the container's termination message


@dataclass(frozen=True)
class Knative:
    """The Knative Service's status for the predictor."""

    ready: Condition
    routes_ready: Condition
    configurations_ready: Condition
    url: str


def condition(
    kind: str, status: str, *, reason: str = "", message: str = "", now: str
) -> Condition:
    body = {"type": kind, "status": status, "lastTransitionTime": now}
    if reason:
        body["reason"] = reason
    if message:
        body["message"] = message
    return body


def knative_status(
    *,
    service: str,
    latest: RevisionState | None,
    traffic: tuple[TrafficTarget, ...],
    url: str,
    now: str,
) -> Knative:
    """Knative's Ready / RoutesReady / ConfigurationsReady for the latest created revision and
    the route's resolved traffic."""
    if latest is None or latest.phase == "Loading":
        configurations = condition(
            "ConfigurationsReady",
            UNKNOWN,
            reason="RevisionMissing",
            message=f'Configuration "{service}" is waiting for a Revision to become ready.',
            now=now,
        )
    elif latest.phase == "Ready":
        configurations = condition("ConfigurationsReady", TRUE, now=now)
    else:
        configurations = condition(
            "ConfigurationsReady",
            FALSE,
            reason="RevisionFailed",
            message=f'Revision "{latest.name}" failed with message: {latest.message}.',
            now=now,
        )
    if traffic:
        routes = condition("RoutesReady", TRUE, now=now)
    else:
        routes = condition(
            "RoutesReady",
            UNKNOWN if configurations["status"] != FALSE else FALSE,
            reason="RevisionMissing",
            message=f'Configuration "{service}" does not have any ready Revision.',
            now=now,
        )
    ready = _all("Ready", (configurations, routes), now=now)
    return Knative(ready, routes, configurations, url if ready["status"] == TRUE else "")


def _all(kind: str, parts: tuple[Condition, ...], *, now: str) -> Condition:
    for status in (FALSE, UNKNOWN):
        for part in parts:
            if part["status"] == status:
                return condition(
                    kind,
                    status,
                    reason=part.get("reason", f"{part['type']}NotReady"),
                    message=part.get("message", ""),
                    now=now,
                )
    return condition(kind, TRUE, now=now)


def _keep_time(previous: list[Any], conditions: list[Condition]) -> list[Condition]:
    """A condition whose status did not change keeps its lastTransitionTime."""
    before = {c.get("type"): c for c in previous if isinstance(c, dict)}
    kept = []
    for item in conditions:
        old = before.get(item["type"])
        if old and old.get("status") == item["status"] and old.get("lastTransitionTime"):
            item = {**item, "lastTransitionTime": str(old["lastTransitionTime"])}
        kept.append(item)
    return kept


def parse_predictor(status: dict[str, Any]) -> PredictorStatus:
    predictor = (status.get("components") or {}).get("predictor") or {}
    traffic = tuple(
        TrafficTarget(
            percent=int(t.get("percent") or 0),
            latest_revision=bool(t.get("latestRevision")),
            revision_name=str(t.get("revisionName") or ""),
            tag=str(t.get("tag") or ""),
        )
        for t in predictor.get("traffic") or []
        if isinstance(t, dict)
    )
    return PredictorStatus(
        latest_created=str(predictor.get("latestCreatedRevision") or ""),
        latest_ready=str(predictor.get("latestReadyRevision") or ""),
        latest_rolledout=str(predictor.get("latestRolledoutRevision") or ""),
        previous_rolledout=str(predictor.get("previousRolledoutRevision") or ""),
        traffic=traffic,
    )


def isvc_status(
    previous: dict[str, Any],
    *,
    generation: int,
    predictor: PredictorStatus,
    knative: Knative,
    latest: RevisionState | None,
    failure: tuple[str, str] | None = None,
    now: str,
) -> dict[str, Any]:
    """The whole `status` to write. `failure` (reason, message) is a spec KServe refused before
    any revision (NoSupportingRuntime)."""
    components = (previous.get("components") or {}).get("predictor") or {}
    url = knative.url or str(components.get("url") or "")
    component: dict[str, Any] = {}
    for key, value in (
        ("latestCreatedRevision", predictor.latest_created),
        ("latestReadyRevision", predictor.latest_ready),
        ("latestRolledoutRevision", predictor.latest_rolledout),
        ("previousRolledoutRevision", predictor.previous_rolledout),
    ):
        if value:
            component[key] = value
    if predictor.traffic:
        component["traffic"] = [target.to_json() for target in predictor.traffic]
    predictor_ready = {**knative.ready, "type": "PredictorReady"}
    if failure is not None:
        predictor_ready = condition(
            "PredictorReady", FALSE, reason=failure[0], message=failure[1], now=now
        )
    conditions = [
        predictor_ready,
        {**knative.routes_ready, "type": "PredictorRouteReady"},
        {**knative.configurations_ready, "type": "PredictorConfigurationReady"},
    ]
    status: dict[str, Any] = {"observedGeneration": generation, "deploymentMode": "Serverless"}
    if url:
        component["url"] = url
        component["address"] = {"url": url}
        status["url"] = url
        status["address"] = {"url": url}
        conditions.append(condition("IngressReady", TRUE, now=now))
        ingress = conditions[-1]
    else:
        ingress = condition("IngressReady", UNKNOWN, now=now)
    conditions.append({**_all("Ready", (predictor_ready, ingress), now=now)})
    conditions.append({**knative.routes_ready, "type": "RoutesReady"})
    conditions.append({**knative.configurations_ready, "type": "LatestDeploymentReady"})
    status["conditions"] = sorted(
        _keep_time(list(previous.get("conditions") or []), conditions), key=lambda c: c["type"]
    )
    status["components"] = {"predictor": component}
    status["modelStatus"] = _model_status(latest, predictor, failure)
    return status


def _model_status(
    latest: RevisionState | None, predictor: PredictorStatus, failure: tuple[str, str] | None
) -> dict[str, Any]:
    """KServe's `modelStatus` (UpdateModelRevisionStates / PropagateModelStatus)."""
    active = "Loaded" if predictor.latest_ready else ""
    if failure is not None:
        states = {"targetModelState": "FailedToLoad"}
        body: dict[str, Any] = {"transitionStatus": "InvalidSpec", "states": states}
        body["lastFailureInfo"] = {"reason": failure[0], "message": failure[1]}
        return body
    if latest is None or latest.phase == "Loading":
        target, transition = "Loading", "InProgress"
    elif latest.phase == "Ready":
        target, transition = "Loaded", "UpToDate"
    else:
        target, transition = "FailedToLoad", "BlockedByFailedLoad"
    states = {"targetModelState": target}
    if active:
        states["activeModelState"] = active
    body = {"transitionStatus": transition, "states": states}
    if latest is not None and latest.phase == "Failed":
        body["lastFailureInfo"] = {
            "reason": latest.reason or "ModelLoadFailed",
            "message": latest.message,
            "location": f"{latest.name}-deployment-0",
            "modelRevisionName": latest.name,
        }
    return body
