"""How long the stage controller has been stuck on a stage (``wm_stagectl_stage_stuck_seconds``,
the StagectlStageStuck alert's signal): the longest-failing workflow's time per stage, back to 0
once it goes through."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from shared import stages as S
from shared.errors import DependencyDown
from shared.k8s_informer import ChangeQueue
from shared.queueing import Pending
from stagectl.controller import Dispatcher, stuck_for
from stagectl.workflow import WaitingStage


def test_every_stage_is_named_and_the_oldest_failure_counts() -> None:
    failing = {
        ("c", "ns", "a"): (S.REGISTER, 100.0),
        ("c", "ns", "b"): (S.REGISTER, 40.0),
        ("c", "ns", "c"): (S.GATE, 90.0),
    }
    stuck = stuck_for(failing, now=130.0)
    assert stuck[S.REGISTER] == 90.0
    assert stuck[S.GATE] == 40.0
    assert set(stuck) == set(S.STAGES)
    assert stuck[S.CLEANUP] == 0.0


def test_nothing_failing_is_zero_everywhere() -> None:
    assert set(stuck_for({}, now=5.0).values()) == {0.0}


class _Work:
    """Stands in for StageWork: fails while ``failing`` is set, as when PostgreSQL is away."""

    def __init__(self) -> None:
        self.failing = True

    async def handle(self, workflow: Any, waiting: WaitingStage, *, seen_at: float) -> None:
        if self.failing:
            raise DependencyDown("PostgreSQL did not answer")


def _waiting_workflow() -> dict[str, Any]:
    return {
        "metadata": {"name": "run-1", "namespace": "ns"},
        "status": {
            "nodes": {
                "n1": {
                    "name": "run-1.wm-gate",
                    "templateName": S.template_name(S.GATE),
                    "type": "Suspend",
                    "phase": "Running",
                }
            }
        },
    }


def _stuck(stage: str) -> float | None:
    return REGISTRY.get_sample_value("wm_stagectl_stage_stuck_seconds", {"stage": stage})


async def test_the_gauge_grows_while_a_stage_fails_and_drops_when_it_passes() -> None:
    now = [1000.0]
    work = _Work()
    dispatcher = Dispatcher(
        queue=ChangeQueue(),
        work=work,
        concurrency=1,
        clock=lambda: now[0],  # type: ignore[arg-type]
    )
    key = ("c", "ns", "run-1")
    pending = Pending(_waiting_workflow(), first_seen=0.0)
    assert not await dispatcher._attempt(key, pending)
    assert _stuck(S.GATE) == 0.0
    now[0] += 300.0
    assert not await dispatcher._attempt(key, pending)
    assert _stuck(S.GATE) == 300.0
    work.failing = False
    now[0] += 10.0
    assert await dispatcher._attempt(key, pending)
    assert _stuck(S.GATE) == 0.0
