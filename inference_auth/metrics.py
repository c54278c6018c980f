"""inference_auth's Prometheus metrics (on HEALTH_PORT's ``/metrics``).

Per request the check costs a few integer increments (``CheckStats``), never a log line: at the
request rates of inference traffic a structured log line per decision would cost more than the
decision. The deployment label is bounded by the deployments registered (a token's own
deployment, known only once the token is); refusals of unknown tokens carry ``-``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Final

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

NO_DEPLOYMENT: Final = "-"

CHECK_BUCKETS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)
LOOKUP_RESULTS: Final = ("hit", "unknown", "negative", "miss", "stale", "unavailable")


class CheckStats:
    """The per-request figures as plain integers, exported by ``collect`` at scrape time.

    prometheus_client's own Counter and Histogram take a lock per increment (a histogram one
    per observation and bucket): on this path, at tens of thousands of requests a second on
    one event loop, that was a measurable share of a request. Everything here runs on the
    event loop thread, the scrape included (the health server shares the loop), so no lock
    is needed.
    """

    def __init__(self) -> None:
        self.decisions: dict[tuple[str, str], int] = {}
        self.lookups = dict.fromkeys(LOOKUP_RESULTS, 0)
        self.buckets = [0] * (len(CHECK_BUCKETS) + 1)  # the last: above every bound (+Inf)
        self.seconds_sum = 0.0

    def record(self, outcome: str, deployment: str, seconds: float) -> None:
        key = (outcome, deployment)
        self.decisions[key] = self.decisions.get(key, 0) + 1
        self.buckets[bisect_left(CHECK_BUCKETS, seconds)] += 1
        self.seconds_sum += seconds

    def collect(self) -> Iterator[Metric]:
        decisions = CounterMetricFamily(
            "wm_inference_auth_decisions",
            "Token checks by outcome (allowed, unauthorized, forbidden, rate_limited) and "
            "deployment.",
            labels=["outcome", "deployment"],
        )
        for (outcome, deployment), count in sorted(self.decisions.items()):
            decisions.add_metric([outcome, deployment], count)
        yield decisions
        cumulative, buckets = 0, []
        for bound, count in zip((*map(str, CHECK_BUCKETS), "+Inf"), self.buckets, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            "wm_inference_auth_check_seconds",
            "Time inference_auth spends deciding one request (from handler entry to the answer).",
            buckets=buckets,
            sum_value=self.seconds_sum,
        )
        lookups = CounterMetricFamily(
            "wm_inference_auth_cache_lookups",
            "Token lookups by where they were answered: hit (in-process cache), unknown (not a "
            "live lookup id: refused from memory), negative (found unknown before, in-process or "
            "Redis), miss (read from PostgreSQL), stale (PostgreSQL could not be read: the cached "
            "entry answered), unavailable (PostgreSQL could not be read and nothing cached: "
            "refused).",
            labels=["result"],
        )
        for result, count in self.lookups.items():
            lookups.add_metric([result], count)
        yield lookups


STATS: Final = CheckStats()
REGISTRY.register(STATS)
CACHE_FLUSHES = Counter(
    "wm_inference_auth_cache_flushes",
    "Whole-cache flushes (after the LISTEN connection came back: notifications may be lost).",
)
REDIS_UP = Gauge(
    "wm_inference_auth_redis_up",
    "1 while Redis answers (rate limits and the shared negative cache apply); 0: checks go on "
    "without them.",
)
LISTENING = Gauge(
    "wm_inference_auth_listening",
    "1 while the LISTEN connection for token changes answers its pings (the cache and the set of "
    "live tokens are current); 0: tokens are read through the pool, or served stale.",
)
POSTGRESQL_UP = Gauge(
    "wm_inference_auth_postgresql_up",
    "1 while PostgreSQL answers (the LISTEN connection's pings, reads through the pool); 0: "
    "cached tokens answer for INFERENCE_AUTH_STALE_FOR, others are refused.",
)
KNOWN_TOKENS = Gauge(
    "wm_inference_auth_known_tokens",
    "Live lookup ids held in memory (an id outside them is refused without a round trip).",
)
