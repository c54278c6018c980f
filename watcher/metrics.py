"""Prometheus metrics of the watcher (exposed on the side server's /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from shared.k8s_informer import InformerMetrics

EVENTS = Counter("wm_watcher_events_total", "Watch events received", ["cluster", "type"])
WATCH_RESTARTS = Counter("wm_watcher_watch_restarts_total", "Watches re-opened", ["cluster"])
RELISTS = Counter("wm_watcher_relists_total", "Full lists (start, 410 Gone)", ["cluster"])
INFORMER = InformerMetrics(events=EVENTS, watch_restarts=WATCH_RESTARTS, relists=RELISTS)
QUEUE_DEPTH = Gauge("wm_watcher_queue_depth", "Workflows waiting to be written")
UPSERT_SECONDS = Histogram(
    "wm_watcher_upsert_seconds",
    "Time to commit one batch",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
LAG_SECONDS = Histogram(
    "wm_watcher_lag_seconds",
    "From receiving a workflow change to committing it",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
ARGO_LAG_SECONDS = Histogram(
    "wm_watcher_argo_lag_seconds",
    "From the newest time Argo wrote into a workflow (whole seconds) to committing it",
    buckets=(1, 2, 5, 10, 30, 60, 300, 3600),
)
WRITE_FAILURES = Counter("wm_watcher_write_failures_total", "Batches that failed to commit")
RECORDS_REFUSED = Counter(
    "wm_watcher_records_refused_total",
    "Workflow changes skipped: refused by PostgreSQL for their contents, or unreadable",
    ["cluster"],
)
CLUSTERS_WATCHED = Gauge("wm_watcher_clusters_watched", "Clusters this replica informs on")
CLUSTERS_REGISTERED = Gauge(
    "wm_watcher_clusters_registered",
    "Clusters the registry holds for watching (every replica counts all of them): the sum of "
    "wm_watcher_clusters_watched over the replicas falls short of it while a cluster is unwatched",
)
