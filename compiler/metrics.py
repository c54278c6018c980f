"""Prometheus metrics of the compiler's reconcilers (on HEALTH_PORT's ``/metrics``); Git sync's
are ``compiler.gitsync.metrics``, the notification sender's in ``compiler.notifications``."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter

TENANT: Final = "tenant"
PIPELINE: Final = "pipeline"
OK: Final = "ok"
FAILED: Final = "failed"

RECONCILES = Counter(
    "wm_compiler_reconciles_total",
    "Reconciliations of one tenant (its namespaces, RBAC, storage user) or one pipeline's "
    "attachments (CronWorkflow, event objects), by what and outcome (ok, failed: the next pass "
    "tries again)",
    ["what", "outcome"],
)
for _what in (TENANT, PIPELINE):
    for _outcome in (OK, FAILED):
        RECONCILES.labels(what=_what, outcome=_outcome)
