"""KServe's canary bookkeeping (sim.serving.rollout) against the rules read upstream
(ksvc_reconciler.go createKnativeService, inference_service_status.go PropagateStatus)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sim.serving.rollout import PredictorStatus, reconcile, route_spec

R1, R2, R3 = "m-predictor-00001", "m-predictor-00002", "m-predictor-00003"


def split(status: PredictorStatus) -> dict[str, int]:
    totals: dict[str, int] = {}
    for target in status.traffic:
        totals[target.revision_name] = totals.get(target.revision_name, 0) + target.percent
    return {name: pct for name, pct in totals.items() if pct}


def test_first_revision_rolls_out_at_full_traffic() -> None:
    status = reconcile(PredictorStatus(), canary_percent=None, latest_created=R1, latest_ready=R1)
    assert (status.latest_rolledout, status.previous_rolledout) == (R1, "")
    assert split(status) == {R1: 100}


def test_canary_promote_and_roll_back() -> None:
    first = reconcile(PredictorStatus(), canary_percent=None, latest_created=R1, latest_ready=R1)
    waiting = reconcile(first, canary_percent=20, latest_created=R2, latest_ready=R1)
    assert split(waiting) == {R1: 100}
    assert waiting.latest_rolledout == R1
    canary = reconcile(waiting, canary_percent=20, latest_created=R2, latest_ready=R2)
    assert split(canary) == {R2: 20, R1: 80}
    assert [t.tag for t in canary.traffic] == ["", "prev"]
    assert canary.latest_rolledout == R1
    promoted = reconcile(canary, canary_percent=None, latest_created=R2, latest_ready=R2)
    assert split(promoted) == {R2: 100}
    assert (promoted.latest_rolledout, promoted.previous_rolledout) == (R2, R1)
    rolled_back = reconcile(promoted, canary_percent=0, latest_created=R2, latest_ready=R2)
    assert split(rolled_back) == {R1: 100}
    assert rolled_back.latest_rolledout == R1


def test_canary_zero_before_promotion_keeps_the_rolled_out_revision() -> None:
    first = reconcile(PredictorStatus(), canary_percent=None, latest_created=R1, latest_ready=R1)
    zero = reconcile(first, canary_percent=0, latest_created=R2, latest_ready=R2)
    assert split(zero) == {R1: 100}
    assert zero.latest_rolledout == R1


def test_a_canary_without_a_rolled_out_revision_takes_everything() -> None:
    assert [t.percent for t in route_spec(30, "")] == [100]
    assert [t.percent for t in route_spec(100, R1)] == [100]


@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.integers(0, 100)), st.booleans(), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_any_sequence_keeps_the_invariants(steps: list[tuple[int | None, bool, bool]]) -> None:
    status = PredictorStatus()
    created = ready = 0
    for canary, new_revision, becomes_ready in steps:
        if new_revision or not created:
            created += 1
        if becomes_ready:
            ready = created
        names = [f"m-predictor-{n:05d}" for n in range(1, created + 1)]
        latest_ready = names[ready - 1] if ready else ""
        before = status
        status = reconcile(
            status, canary_percent=canary, latest_created=names[-1], latest_ready=latest_ready
        )
        if not latest_ready:
            assert status.traffic == ()
            continue
        assert sum(t.percent for t in status.traffic) == 100
        # Only ready revisions are routed; `prev` is the last rolled-out one.
        for target in status.traffic:
            assert target.revision_name in names[:ready]
            if target.tag == "prev":
                assert target.revision_name == status.latest_rolledout
        # A revision is rolled out only once it had 100 %, or by a rollback to the previous.
        if status.latest_rolledout != before.latest_rolledout:
            assert status.latest_rolledout in (latest_ready, before.previous_rolledout)
        if canary is None and status.latest_rolledout == latest_ready:
            assert split(status) == {latest_ready: 100}
