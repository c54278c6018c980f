"""stagectl.serving.status: an InferenceService's status as KServe writes it."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from stagectl.serving.status import TrafficTarget, read_status


def isvc(generation: int = 1, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "churn-staging", "generation": generation}, "status": status}


def condition(kind: str, state: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": state, "reason": reason, "message": message}


URL = "http://churn-staging-predictor.kubeopera-serve-acme.svc.cluster.local"
READY_STATUS: dict[str, Any] = {
    "observedGeneration": 1,
    "url": URL,
    "conditions": [
        condition("IngressReady", "True"),
        condition("PredictorReady", "True"),
        condition("Ready", "True"),
    ],
    "components": {
        "predictor": {
            "latestCreatedRevision": "churn-staging-predictor-00002",
            "latestReadyRevision": "churn-staging-predictor-00002",
            "latestRolledoutRevision": "churn-staging-predictor-00001",
            "previousRolledoutRevision": "churn-staging-predictor-00000",
            "traffic": [
                {
                    "revisionName": "churn-staging-predictor-00002",
                    "percent": 10,
                    "latestRevision": True,
                    "tag": "latest",
                },
                {
                    "revisionName": "churn-staging-predictor-00001",
                    "percent": 90,
                    "latestRevision": False,
                    "tag": "prev",
                },
            ],
        }
    },
    "modelStatus": {"transitionStatus": "UpToDate"},
}


def test_a_ready_service_with_its_url_and_revisions() -> None:
    status = read_status(isvc(**READY_STATUS))
    assert status.ready
    assert not status.failed
    assert status.url == URL
    assert status.message is None
    assert status.latest_ready_revision == "churn-staging-predictor-00002"
    assert status.latest_rolledout_revision == "churn-staging-predictor-00001"
    assert status.previous_rolledout_revision == "churn-staging-predictor-00000"
    assert status.canary_revision == "churn-staging-predictor-00002"
    assert status.traffic == (
        TrafficTarget("churn-staging-predictor-00002", 10, True, "latest"),
        TrafficTarget("churn-staging-predictor-00001", 90, False, "prev"),
    )


def test_a_status_about_an_older_spec_is_not_ready() -> None:
    status = read_status(isvc(generation=2, **READY_STATUS))
    assert not status.current
    assert not status.ready
    assert not status.failed


def test_a_new_service_without_status_is_in_progress() -> None:
    for obj in (isvc(), {"metadata": {"name": "x"}}, None):
        status = read_status(obj)
        assert not status.ready
        assert not status.failed
        assert status.url is None


def test_coming_up_is_in_progress() -> None:
    status = read_status(
        isvc(
            observedGeneration=1,
            conditions=[
                condition("PredictorReady", "Unknown", "RevisionMissing", "waiting"),
                condition("Ready", "Unknown", "RevisionMissing", "waiting"),
            ],
            modelStatus={"transitionStatus": "InProgress"},
        )
    )
    assert not status.ready
    assert not status.failed
    assert status.message is None  # nothing False yet


def test_a_model_that_cannot_load_fails_with_the_servers_message() -> None:
    status = read_status(
        isvc(
            observedGeneration=1,
            conditions=[
                condition("PredictorReady", "False", "RevisionFailed", "Revision failed"),
                condition("Ready", "False", "RevisionFailed", "Revision failed"),
            ],
            modelStatus={
                "transitionStatus": "BlockedByFailedLoad",
                "lastFailureInfo": {
                    "reason": "ModelLoadFailed",
                    "message": "failed to load model: no model.joblib in /mnt/models",
                },
            },
        )
    )
    assert status.failed
    assert not status.ready
    assert status.message == "failed to load model: no model.joblib in /mnt/models"


def test_a_failed_condition_gives_its_message_without_failure_info() -> None:
    status = read_status(
        isvc(
            observedGeneration=1,
            conditions=[
                condition("Ready", "False", "ProgressDeadlineExceeded", "Initial scale never met"),
            ],
        )
    )
    assert status.failed
    assert status.message == "Initial scale never met"


def test_a_false_condition_with_a_passing_reason_is_not_a_failure() -> None:
    status = read_status(
        isvc(observedGeneration=1, conditions=[condition("Ready", "False", "Deploying", "scaling")])
    )
    assert not status.failed
    assert not status.ready
    assert status.message == "scaling"


def test_no_canary_once_rolled_out() -> None:
    predictor = {"latestReadyRevision": "r-2", "latestRolledoutRevision": "r-2"}
    status = read_status(isvc(**{**READY_STATUS, "components": {"predictor": predictor}}))
    assert status.canary_revision is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "status",
                    "metadata",
                    "conditions",
                    "type",
                    "reason",
                    "message",
                    "components",
                    "predictor",
                    "traffic",
                    "percent",
                    "modelStatus",
                    "lastFailureInfo",
                    "generation",
                    "observedGeneration",
                    "Ready",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@given(obj=json_values)
def test_a_malformed_status_never_raises(obj: Any) -> None:
    status = read_status(obj if isinstance(obj, dict) else {"status": obj})
    assert isinstance(status.ready, bool)
