"""A pipeline's schedule rendered as the one CronWorkflow it becomes. Purely computational.
(What a schedule may be is checked when the version is rendered: ``shared.schedules.check``.)

``cron_workflow`` renders the CronWorkflow ``p-<pipeline id>`` in the tenant namespace. It is
labelled with the data controller's instance ID, so that controller's cron informer (which
selects CronWorkflows by the label, as it does workflows) takes it and the CI/CD controller does
not; Argo copies that label and ``workflowMetadata.labels`` (our pipeline identity) onto every
workflow it creates. Its ``workflowSpec`` is only a reference to the current version's template:
the data controller runs only template references, and the template's own defaults are the
run's parameters. ``suspend`` is the version's ``suspended`` or the pipeline's pause.
"""

from __future__ import annotations

from typing import Any, Final

from compiler.pipelines.stamping import identity_labels
from shared import labels as L
from shared.pipelines import PipelineKind, Schedule

API_VERSION: Final = "argoproj.io/v1alpha1"
KIND: Final = "CronWorkflow"
# Finished runs Argo keeps in the cluster per CronWorkflow (its defaults are 3 and 1); every
# run's record stays in workflow-manager's history either way.
SUCCESSFUL_KEPT: Final = 3
FAILED_KEPT: Final = 3


def cron_workflow_name(pipeline_id: str) -> str:
    """``p-<id>``: at most 52 characters, as Argo requires (its runs add ``-<unix time>``)."""
    return f"p-{pipeline_id}"[:52]


def cron_workflow(
    schedule: Schedule,
    *,
    tenant: str,
    kind: PipelineKind,
    pipeline_id: str,
    version: int,
    template_name: str,
    paused: bool,
    instance_id: str,
) -> dict[str, Any]:
    """The CronWorkflow a pipeline's schedule becomes (see the module docstring)."""
    labels = identity_labels(pipeline_id=pipeline_id, version=version, kind=kind)
    labels[L.ARGO_CONTROLLER_INSTANCE_ID] = instance_id
    spec: dict[str, Any] = {
        "schedules": list(schedule.cron),
        "timezone": schedule.timezone,
        "concurrencyPolicy": schedule.concurrency_policy,
        "suspend": schedule.suspended or paused,
        "successfulJobsHistoryLimit": SUCCESSFUL_KEPT,
        "failedJobsHistoryLimit": FAILED_KEPT,
        "workflowMetadata": {"labels": dict(labels)},
        "workflowSpec": {"workflowTemplateRef": {"name": template_name}},
    }
    if schedule.starting_deadline_seconds is not None:
        spec["startingDeadlineSeconds"] = schedule.starting_deadline_seconds
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": cron_workflow_name(pipeline_id),
            "namespace": f"{L.DATA_NAMESPACE_PREFIX}{tenant}",
            "labels": labels,
        },
        "spec": spec,
    }
