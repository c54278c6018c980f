"""inference_auth's Prometheus metrics (on HEALTH_PORT's ``/metrics``).

Per request the check costs a counter and a histogram observation, never a log line: at the
request rates of inference traffic a structured log line per decision would cost more than the
decision. The deployment label is bounded by the deployments registered (a token's own
deployment, known only once the token is); refusals of unknown tokens carry ``-``.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

NO_DEPLOYMENT: Final = "-"

DECISIONS = Counter(
    "wm_inference_auth_decisions",
    "Token checks by outcome (allowed, unauthorized, forbidden, rate_limited) and deployment.",
    ["outcome", "deployment"],
)
CHECK_SECONDS = Histogram(
    "wm_inference_auth_check_seconds",
    "Time inference_auth spends deciding one request (from handler entry to the answer).",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)
CACHE_LOOKUPS = Counter(
    "wm_inference_auth_cache_lookups",
    "Token lookups by where they were answered: hit (in-process cache), negative (known "
    "unknown, in-process or Redis), miss (read from PostgreSQL), unavailable (PostgreSQL "
    "could not be read: refused).",
    ["result"],
)
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
    "1 while the LISTEN connection for token changes is up (cached tokens are current).",
)
