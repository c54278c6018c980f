"""The emulator's refusals at its edge (``sim.kube.faults``): a refused verb on a refused type,
in its namespace or all, gets the error until lifted; nothing else is refused."""

from __future__ import annotations

import pytest

from sim.kube.faults import Faults
from sim.kube.types import ApiError, ResourceType

CRONS = ResourceType("argoproj.io", "v1alpha1", "cronworkflows", "CronWorkflow", True)
SECRETS = ResourceType("", "v1", "secrets", "Secret", True)


def refused(faults: Faults, rtype: ResourceType, namespace: str, verb: str) -> int | None:
    try:
        faults.check(rtype, namespace, verb)
    except ApiError as error:
        return error.status
    return None


def test_writes_of_a_kind_are_refused_as_an_admission_webhook_would_until_lifted() -> None:
    faults = Faults()
    lift = faults.refuse(CRONS)
    for verb in ("create", "update", "patch", "delete"):
        assert refused(faults, CRONS, "a", verb) == 403
    assert refused(faults, CRONS, "a", "get") is None
    assert refused(faults, SECRETS, "a", "create") is None
    lift()
    lift()  # twice is harmless
    assert refused(faults, CRONS, "a", "create") is None


def test_a_refusal_can_name_its_verbs_namespace_and_error() -> None:
    faults = Faults()
    faults.refuse(
        SECRETS, verbs={"get"}, namespace="a", error=ApiError(500, "InternalError", "boom")
    )
    assert refused(faults, SECRETS, "a", "get") == 500
    assert refused(faults, SECRETS, "b", "get") is None
    assert refused(faults, SECRETS, "a", "create") is None


def test_unknown_verbs_are_a_mistake_in_the_test() -> None:
    with pytest.raises(ValueError, match="unknown verbs"):
        Faults().refuse(CRONS, verbs={"watch"})
