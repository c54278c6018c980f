"""Git sync's Prometheus metrics (served on the compiler's /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PASSES = Counter("wm_git_sync_passes_total", "Poller passes over every Git-defined pipeline")
PASS_SECONDS = Histogram(
    "wm_git_sync_pass_seconds",
    "Duration of one poller pass",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
)
CHECKS = Counter(
    "wm_git_sync_checks_total",
    "Repositories checked, by outcome (unchanged, updated, failed)",
    ["outcome"],
)
SOURCES = Gauge("wm_git_sync_sources", "Git-defined pipelines in the last pass")
FETCHES_RUNNING = Gauge(
    "wm_git_fetches_running", "Documents being fetched with git now (saves and the poller)"
)
FETCHES_WAITING = Gauge(
    "wm_git_fetches_waiting", "Fetches waiting for a place under GIT_FETCH_CONCURRENCY"
)
