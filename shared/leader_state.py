"""The decisions of Lease-based leader election, purely computational: no I/O, no clock reads.

Every function here takes the lease record as last read, the caller's identity and the local
monotonic time, and answers what to do; ``shared.leader`` performs the I/O around them.

Expiry is judged the way client-go judges it: never from the ``renewTime`` written by another
process (its wall clock may be skewed), but from the local monotonic time at which this process
first saw the lease's current ``resourceVersion``. Every write bumps the ``resourceVersion``, so
a lease that keeps the same one for a whole lease duration has not been renewed for at least that
long. The holder, in turn, stops believing it leads ``lease_duration - safety_margin`` after it
*sent* its last successful renewal, which is before any observer could have seen that renewal:
the holder always steps down before an observer may take over (see ``holder_deadline``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum

MICROTIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_NAME_UNSAFE = re.compile(r"[^a-z0-9-]+")
MAX_NAME_LENGTH = 253


@dataclass(frozen=True)
class LeaseSpec:
    """What a candidate writes into ``Lease.spec`` (coordination.k8s.io/v1)."""

    holder: str | None
    lease_duration_seconds: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int


@dataclass(frozen=True)
class LeaseRecord:
    """A Lease as read: its spec and the ``resourceVersion`` that optimistic concurrency needs."""

    spec: LeaseSpec
    resource_version: str

    @property
    def holder(self) -> str | None:
        return self.spec.holder or None


@dataclass(frozen=True)
class Observation:
    """When this process first saw a lease at ``resource_version`` (local monotonic seconds)."""

    resource_version: str
    since: float


class Action(Enum):
    CREATE = "create"  # no Lease yet: create it, holding it
    RENEW = "renew"  # the record names us: write it again with a fresh renewTime
    ACQUIRE = "acquire"  # released or expired: replace it with the resourceVersion read
    WAIT = "wait"  # someone else holds a live lease


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    wait: float = 0.0  # for WAIT: seconds until the lease expires unless renewed meanwhile


def observe(
    previous: Observation | None, record: LeaseRecord | None, now: float
) -> Observation | None:
    """The observation to keep after reading ``record`` at ``now``: unchanged while the
    ``resourceVersion`` is the same, restarted at ``now`` when it moved."""
    if record is None:
        return None
    if previous is not None and previous.resource_version == record.resource_version:
        return previous
    return Observation(resource_version=record.resource_version, since=now)


def expiry(
    record: LeaseRecord, observation: Observation | None, *, now: float, lease_duration: float
) -> float:
    """Local monotonic time after which ``record``, unless written again, may be taken over.

    The longer of our own lease duration and the one the holder advertises is used, so that a
    holder configured with a longer duration (say, during a rolling change) is respected.
    """
    if observation is None or observation.resource_version != record.resource_version:
        observation = Observation(resource_version=record.resource_version, since=now)
    duration = max(lease_duration, float(record.spec.lease_duration_seconds or 0))
    return observation.since + duration


def decide(
    record: LeaseRecord | None,
    observation: Observation | None,
    *,
    identity: str,
    now: float,
    lease_duration: float,
) -> Decision:
    """What a candidate named ``identity`` should do about ``record`` at local time ``now``."""
    if record is None:
        return Decision(Action.CREATE, "missing")
    if record.holder == identity:
        return Decision(Action.RENEW, "ours")
    if record.holder is None:
        return Decision(Action.ACQUIRE, "released")
    expires = expiry(record, observation, now=now, lease_duration=lease_duration)
    if now >= expires:
        return Decision(Action.ACQUIRE, "expired")
    return Decision(Action.WAIT, "held", wait=expires - now)


def acquisition_spec(
    record: LeaseRecord | None, *, identity: str, wall_now: datetime, lease_duration: float
) -> LeaseSpec:
    """The spec to write when ``identity`` creates, acquires or renews ``record``.

    ``leaseTransitions`` grows by one whenever the holder changes (a release counts: the next
    holder is a transition); ``acquireTime`` is kept across renewals by the same holder.
    """
    seconds = lease_duration_seconds(lease_duration)
    if record is None:
        return LeaseSpec(identity, seconds, wall_now, wall_now, 0)
    if record.holder == identity:
        acquired = record.spec.acquire_time or wall_now
        return LeaseSpec(identity, seconds, acquired, wall_now, record.spec.transitions)
    return LeaseSpec(identity, seconds, wall_now, wall_now, record.spec.transitions + 1)


def release_spec(record: LeaseRecord, *, wall_now: datetime) -> LeaseSpec:
    """The spec that gives a lease up: no holder, so any candidate may take it at once."""
    return LeaseSpec(
        holder=None,
        lease_duration_seconds=record.spec.lease_duration_seconds,
        acquire_time=record.spec.acquire_time,
        renew_time=wall_now,
        transitions=record.spec.transitions,
    )


def lease_duration_seconds(lease_duration: float) -> int:
    """``leaseDurationSeconds`` is a positive integer: round up, so observers never wait less."""
    return max(1, math.ceil(lease_duration))


def holder_deadline(sent_at: float, *, lease_duration: float, safety_margin: float) -> float:
    """Local monotonic time at which a holder stops believing it leads, ``sent_at`` being when it
    sent the write that last succeeded. Observers saw that write no earlier than ``sent_at`` and
    wait a whole ``lease_duration`` after seeing it; the margin absorbs clock-rate differences."""
    return sent_at + lease_duration - safety_margin


def default_safety_margin(lease_duration: float, renew_period: float) -> float:
    """A fifth of the lease, but never so much that one renew period eats the whole lease."""
    return min(lease_duration * 0.2, (lease_duration - renew_period) / 2)


def check_timings(
    *, lease_duration: float, renew_period: float, safety_margin: float
) -> str | None:
    """A sentence saying why these timings cannot work, or None when they can."""
    if lease_duration <= 0 or renew_period <= 0:
        return "lease duration and renew period must be positive"
    if renew_period >= lease_duration - safety_margin:
        return (
            "the renew period must be shorter than the lease duration minus the safety margin, "
            "or a holder loses its lease between two renewals"
        )
    if safety_margin < lease_duration / 100:
        return "the safety margin must be at least 1 % of the lease duration (clock-rate drift)"
    return None


def is_live(
    record: LeaseRecord, observation: Observation | None, *, now: float, lease_duration: float
) -> bool:
    """Whether a lease is held by someone who renewed it recently (membership liveness)."""
    if record.holder is None:
        return False
    return now < expiry(record, observation, now=now, lease_duration=lease_duration)


def is_abandoned(
    record: LeaseRecord, observation: Observation | None, *, now: float, after: float
) -> bool:
    """Whether a lease has neither changed nor been held for ``after`` seconds (garbage)."""
    if observation is None or observation.resource_version != record.resource_version:
        return False
    return now - observation.since >= after


def fair_share(shards: int, members: int) -> int:
    """How many shards one replica may hold: ceil(shards / live members), all of them alone."""
    return math.ceil(shards / max(members, 1))


def extras_to_release(held: Collection[str], share: int) -> list[str]:
    """The shards to give up when holding more than ``share``: the last ones in name order, so
    that the choice is stable from one pass to the next."""
    return sorted(held)[max(share, 0) :]


def format_microtime(moment: datetime) -> str:
    """RFC 3339 with microseconds and 'Z', as Kubernetes writes MicroTime."""
    return moment.astimezone(UTC).strftime(MICROTIME_FORMAT)


def lease_name(*parts: str) -> str:
    """A valid Lease name (DNS subdomain) made of ``parts`` joined by '-'.

    Characters a name cannot hold become '-'; when anything had to change, a short hash of the
    original is appended so that two different inputs never share a Lease.
    """
    original = "-".join(parts)
    cleaned = _NAME_UNSAFE.sub("-", original.lower()).strip("-")
    if cleaned == original and 0 < len(cleaned) <= MAX_NAME_LENGTH:
        return cleaned
    digest = hashlib.sha256(original.encode()).hexdigest()[:10]
    head = cleaned[: MAX_NAME_LENGTH - len(digest) - 1].strip("-")
    return f"{head}-{digest}" if head else digest
