"""Which owned clusters make the watcher not ready: those failing to be watched for a while."""

from __future__ import annotations

from watcher.fleet import unwatched


def test_a_replica_that_owns_no_cluster_is_ready_whatever_fails_elsewhere() -> None:
    failing = {"c1": (0.0, "ClientConnectorError")}
    assert unwatched([], failing, now=1000.0, after=60.0) == {}


def test_an_owned_cluster_failing_for_the_bound_is_named_with_its_error() -> None:
    failing = {"c1": (100.0, "ClientConnectorError"), "c2": (130.0, "ApiException 500")}
    late = unwatched(["c1", "c2", "c3"], failing, now=160.0, after=60.0)
    assert late == {"c1": "not watching for 60s (ClientConnectorError)"}


def test_a_brief_failure_and_a_cluster_held_by_another_replica_are_not_named() -> None:
    failing = {"c1": (150.0, "TimeoutError"), "elsewhere": (0.0, "ClientConnectorError")}
    assert unwatched(["c1"], failing, now=160.0, after=60.0) == {}
