"""Prometheus metrics of the stage controller (exposed on the side server's /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from shared.k8s_informer import InformerMetrics
from shared.stages import STAGES as STAGES_KNOWN

STAGES = Counter(
    "wm_stagectl_stages_total",
    "Stage nodes completed, by stage and the phase they were completed with",
    ["stage", "phase"],
)
STAGE_SECONDS = Histogram(
    "wm_stagectl_stage_seconds",
    "The controller's own time per stage: from the node seen waiting (or the approval decided) "
    "to the Argo server's answer to resume, less the waits for object storage",
    ["stage"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
STORAGE_SECONDS = Histogram(
    "wm_stagectl_storage_seconds",
    "Time a stage waited for object storage (the register stage's copies)",
    ["stage"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
REFUSED = Counter(
    "wm_stagectl_stages_refused_total",
    "Waiting nodes that look like a stage but are not one their pipeline version contains",
    ["stage"],
)
ERRORS = Counter(
    "wm_stagectl_stage_errors_total",
    "Stage attempts that failed for a reason outside the run (tried again later)",
    ["stage", "error"],
)
WAITING = Gauge("wm_stagectl_workflows_queued", "Workflows waiting for a worker")
STUCK_SECONDS = Gauge(
    "wm_stagectl_stage_stuck_seconds",
    "How long the longest-failing workflow has been failing this stage (tried again with a "
    "backoff; 0 when none is), as of its last attempt",
    ["stage"],
)
for _stage in STAGES_KNOWN:
    STUCK_SECONDS.labels(stage=_stage).set(0)
INFORMER = InformerMetrics(
    events=Counter("wm_stagectl_watch_events_total", "Watch events received", ["cluster", "type"]),
    watch_restarts=Counter("wm_stagectl_watch_restarts_total", "Watches re-opened", ["cluster"]),
    relists=Counter("wm_stagectl_relists_total", "Full lists (start, 410 Gone)", ["cluster"]),
)
