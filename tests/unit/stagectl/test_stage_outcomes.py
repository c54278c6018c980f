"""stagectl.outcomes: a scorecard from any bytes is a JSON object PostgreSQL can store or a
ScorecardError with a message for the tenant; how a release ended; a stage's outcome."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import stages as S
from stagectl.outcomes import (
    MAX_SCORECARD_BYTES,
    Outcome,
    ScorecardError,
    approval_outcome,
    artifact_refusal,
    commit_of,
    parse_scorecard,
    release_ending,
)

WHERE = "the scorecard (artifact 'scorecard' of step 'evaluate')"


@settings(max_examples=500)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_are_a_storable_object_or_a_scorecard_error(data: bytes) -> None:
    try:
        doc = parse_scorecard(data, where=WHERE)
    except ScorecardError as exc:
        message = str(exc)
        doc = None
    else:
        message = WHERE
    assert WHERE in message
    if doc is None:
        return
    assert isinstance(doc, dict)
    # What PostgreSQL's jsonb accepts: no NaN or infinities, no NUL characters.
    assert "\\u0000" not in json.dumps(doc, allow_nan=False)


@given(
    st.dictionaries(
        st.text(max_size=10).filter(lambda t: "\x00" not in t),
        st.floats(allow_nan=False, allow_infinity=False) | st.integers() | st.booleans(),
        max_size=6,
    )
)
def test_a_json_object_is_read_as_written(doc: dict[str, object]) -> None:
    assert parse_scorecard(json.dumps(doc).encode(), where=WHERE) == doc


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "is not valid JSON"),
        (b"auc: 0.9", "is not valid JSON"),
        (b"[0.9]", "is not a JSON object"),
        (b'"auc"', "is not a JSON object"),
        (b'{"auc": NaN}', "is not valid JSON"),
        (b'{"auc": 1e999}', "too large"),
        (b'{"auc": "\\u0000"}', "NUL"),
        (b"\xff\xfe", "not UTF-8"),
        (b" " * (MAX_SCORECARD_BYTES + 1), "at most"),
    ],
)
def test_what_is_wrong_is_said(data: bytes, message: str) -> None:
    with pytest.raises(ScorecardError, match=message):
        parse_scorecard(data, where=WHERE)


@pytest.mark.parametrize(
    ("state", "root", "shutdown", "ending"),
    [
        (None, "Failed", None, "not_registered"),
        (None, "Failed", "Stop", "stopped"),
        ("registering", "Failed", "Stop", "abandoned"),
        ("abandoned", "Failed", None, "abandoned"),
        ("failed", "Succeeded", None, "gate_failed"),
        ("rejected", "Succeeded", None, "rejected"),
        ("expired", "Succeeded", None, "expired"),
        ("passed", "Failed", "Stop", "stopped"),
        ("registered", "Failed", None, "failed"),
        ("passed", "Succeeded", None, "completed"),
        ("approved", "Succeeded", None, "completed"),
    ],
)
def test_how_a_release_ended(
    state: str | None, root: str, shutdown: str | None, ending: str
) -> None:
    assert release_ending(version_state=state, root_phase=root, shutdown=shutdown) == ending


@pytest.mark.parametrize(
    ("state", "ending"),
    [
        (None, "deleted"),
        ("registering", "abandoned"),
        ("registered", "deleted"),
        ("passed", "deleted"),
        ("approved", "deleted"),
        ("failed", "gate_failed"),
        ("rejected", "rejected"),
        ("expired", "expired"),
    ],
)
def test_how_a_deleted_run_s_release_ended(state: str | None, ending: str) -> None:
    """A decided ending stands; anything still in flight ended because the run was deleted."""
    assert (
        release_ending(version_state=state, root_phase=None, shutdown=None, deleted=True) == ending
    )


def test_approval_outcomes() -> None:
    assert approval_outcome("pending", None) is None
    approved = approval_outcome("approved", "ship it")
    assert approved == Outcome("Succeeded", {S.DECISION: "approved"}, "ship it")
    expired = approval_outcome("expired", "expired")
    assert expired is not None
    assert expired.outputs == {S.DECISION: "rejected"}
    rejected = approval_outcome("rejected", None)
    assert rejected is not None
    assert (rejected.outputs, rejected.message) == ({S.DECISION: "rejected"}, "rejected")


def test_a_failed_stage_sets_every_output_it_declares() -> None:
    for stage in S.OUTPUTS:
        failed = Outcome.failed(stage, "why")
        assert set(failed.outputs) == set(S.OUTPUTS[stage])
        assert (failed.phase, failed.message) == ("Failed", "why")
    assert Outcome.failed(S.GATE, "why").outputs[S.VERDICT] == S.VERDICT_FAILED
    outcome = Outcome("Succeeded", {"version": "3"}, "registered")
    assert Outcome.from_json(json.loads(json.dumps(outcome.to_json()))) == outcome


def test_the_commit_of_a_version() -> None:
    assert commit_of({"type": "git", "commit": "abc"}, {}) == "abc"
    assert commit_of({"type": "wizard"}, {"commit": "def"}) == "def"
    assert commit_of({"type": "wizard"}, {}) is None


BUCKET = "wm-artifacts"
WHAT = "artifact 'model' of step 'train'"


def refusal_of(key: str, stored_in: str = BUCKET) -> str | None:
    return artifact_refusal(key, stored_in=stored_in, bucket=BUCKET, tenant="acme", what=WHAT)


@pytest.mark.parametrize(
    ("key", "stored_in", "says"),
    [
        ("tenants/globex/artifacts/p-1/model.tgz", BUCKET, "outside the tenant's artifacts"),
        ("tenants/acme-2/artifacts/p-1/model.tgz", BUCKET, "outside the tenant's artifacts"),
        ("tenants/acme/training/model.tgz", BUCKET, "outside the tenant's artifacts"),
        ("tenants/acme/models/churn/1/model.tgz", BUCKET, "in the model registry"),
        ("tenants/acme/artifacts/../models/churn/1/model.tgz", BUCKET, "'..' segment"),
        ("tenants/acme/artifacts/p-1/../../../globex/x", BUCKET, "'..' segment"),
        ("tenants/acme/artifacts//model.tgz", BUCKET, "an empty"),
        ("tenants/acme/artifacts/p-1//model.tgz", BUCKET, "an empty"),
        ("tenants/acme/artifacts/p-1/model.tgz", "other-bucket", "bucket 'other-bucket'"),
        ("tenants/globex/artifacts/p-1/model.tgz", "other-bucket", "bucket 'other-bucket'"),
    ],
)
def test_an_artifact_outside_the_tenants_artifacts_is_refused_with_what_to_fix(
    key: str, stored_in: str, says: str
) -> None:
    message = refusal_of(key, stored_in)
    assert message is not None
    assert message.startswith(WHAT)
    assert says in message


def test_an_artifact_the_run_wrote_to_its_repository_is_registered() -> None:
    assert refusal_of("tenants/acme/artifacts/p-1-x7k2q/p-1-x7k2q-train-1/model.tgz") is None


def test_a_refusal_repeats_at_most_a_bounded_part_of_the_key() -> None:
    message = refusal_of("tenants/globex/" + "k" * 10_000)
    assert message is not None
    assert len(message) < 600
