"""KServe's canary bookkeeping in Knative (Serverless) mode, purely computational, no side
effects.

Three steps make one reconcile of an InferenceService's predictor, each after its upstream:

- `route_spec`: the Knative Service's `spec.traffic` KServe writes from the ISVC's spec and its
  *current* status (kserve `pkg/controller/v1beta1/inferenceservice/reconcilers/knative/
  ksvc_reconciler.go`, `createKnativeService`): with `canaryTrafficPercent` set and a
  `latestRolledoutRevision` known, P % to the latest revision and the rest (when P < 100) to
  the last rolled-out revision tagged `prev`; otherwise 100 % to the latest revision.
- `route_status`: what Knative's route makes of it (`status.traffic`): a target with
  `latestRevision: true` goes to the latest *ready* revision; nothing routes before one is.
- `propagate`: KServe's `InferenceServiceStatus.PropagateStatus` (`pkg/apis/serving/v1beta1/
  inference_service_status.go`): when the latest ready revision gets 100 % it becomes
  `latestRolledoutRevision` and the old one `previousRolledoutRevision`; when the rolled-out
  revision is the latest and is given less than 100 % while the route's total for it is 100
  (rolled back with `canaryTrafficPercent: 0`), `latestRolledoutRevision` returns to
  `previousRolledoutRevision`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

PREV_TAG = "prev"


@dataclass(frozen=True)
class TrafficTarget:
    """One entry of Knative's traffic list (`revisionName`, `percent`, `latestRevision`,
    `tag`)."""

    percent: int
    latest_revision: bool
    revision_name: str = ""
    tag: str = ""

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {"latestRevision": self.latest_revision, "percent": self.percent}
        if self.revision_name:
            body["revisionName"] = self.revision_name
        if self.tag:
            body["tag"] = self.tag
        return body


@dataclass(frozen=True)
class PredictorStatus:
    """`status.components.predictor`'s revision names ("" when unset)."""

    latest_created: str = ""
    latest_ready: str = ""
    latest_rolledout: str = ""
    previous_rolledout: str = ""
    traffic: tuple[TrafficTarget, ...] = ()


def route_spec(canary_percent: int | None, latest_rolledout: str) -> tuple[TrafficTarget, ...]:
    """The Knative Service's `spec.traffic` KServe writes (createKnativeService)."""
    if canary_percent is not None and latest_rolledout:
        latest = TrafficTarget(percent=canary_percent, latest_revision=True)
        if canary_percent < 100:
            previous = TrafficTarget(
                percent=100 - canary_percent,
                latest_revision=False,
                revision_name=latest_rolledout,
                tag=PREV_TAG,
            )
            return (latest, previous)
        return (latest,)
    return (TrafficTarget(percent=100, latest_revision=True),)


def route_status(spec: tuple[TrafficTarget, ...], latest_ready: str) -> tuple[TrafficTarget, ...]:
    """Knative's `status.traffic` for `spec`: `latestRevision` targets resolved to the latest
    ready revision; empty while there is none (the route is not ready)."""
    if not latest_ready:
        return ()
    return tuple(
        replace(target, revision_name=latest_ready) if target.latest_revision else target
        for target in spec
    )


def propagate(
    status: PredictorStatus,
    *,
    latest_created: str,
    latest_ready: str,
    traffic: tuple[TrafficTarget, ...],
) -> PredictorStatus:
    """KServe's PropagateStatus for the predictor: the new bookkeeping after Knative reported
    `latest_created`, `latest_ready` and its `traffic`."""
    latest_rolledout = status.latest_rolledout
    previous_rolledout = status.previous_rolledout
    per_revision: dict[str, int] = {}
    for target in traffic:
        per_revision[target.revision_name] = per_revision.get(target.revision_name, 0) + (
            target.percent
        )
    for target in traffic:
        if target.revision_name != latest_ready or not target.latest_revision:
            continue
        if latest_rolledout != latest_ready:
            if target.percent == 100:
                previous_rolledout = latest_rolledout
                latest_rolledout = latest_ready
        elif (
            latest_ready == latest_created
            and target.percent < 100
            and per_revision.get(target.revision_name) == 100
            and previous_rolledout
        ):
            latest_rolledout = previous_rolledout
    return PredictorStatus(
        latest_created=latest_created,
        latest_ready=latest_ready,
        latest_rolledout=latest_rolledout,
        previous_rolledout=previous_rolledout,
        traffic=traffic,
    )


def reconcile(
    status: PredictorStatus,
    *,
    canary_percent: int | None,
    latest_created: str,
    latest_ready: str,
    max_passes: int = 4,
) -> PredictorStatus:
    """Reconcile until nothing changes (a rollback takes two passes upstream: the first moves
    `latestRolledoutRevision` back, the second routes `prev` to it)."""
    for _ in range(max_passes):
        spec = route_spec(canary_percent, status.latest_rolledout)
        following = propagate(
            status,
            latest_created=latest_created,
            latest_ready=latest_ready,
            traffic=route_status(spec, latest_ready),
        )
        if following == status:
            break
        status = following
    return status
