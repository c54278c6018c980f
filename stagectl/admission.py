"""Whether a waiting node is a control stage the platform put there: the stage controller acts
only on stages the pipeline version stored in its own database contains. Purely computational.

A workflow's labels say which pipeline and version it runs; they are the tenant's to write, so
they are claims, checked here against what we recorded when the compiler applied the version:

- the pipeline exists, is an ML pipeline, and belongs to the tenant of the workflow's namespace
  (``kubeopera-data-<tenant>``): a tenant cannot borrow another's pipeline;
- the version exists and its ``stages`` contain this stage;
- the workflow runs that version's own template (``workflowTemplateRef``) from the top (no
  overridden entrypoint: with Strict template referencing the entrypoint is the one thing a
  submitter could change to jump straight to a stage);
- the node sits where the compiler puts the stage: the release DAG's task, or the exit handler.

Anything else is refused with a reason, which the controller logs and audits once; it does
nothing else for that node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from shared import labels as L
from shared import stages as S
from stagectl.workflow import RunFacts, WaitingStage, stage_node_name


class PipelineFacts(Protocol):
    """What admission reads of a pipeline (``shared.db.pipelines.PipelineRow``)."""

    @property
    def tenant(self) -> str: ...
    @property
    def kind(self) -> str: ...


class VersionFacts(Protocol):
    """What admission reads of a pipeline version (``shared.db.pipelines.VersionRow``)."""

    @property
    def stages(self) -> Sequence[str]: ...
    @property
    def template_name(self) -> str: ...


def tenant_of(namespace: str) -> str | None:
    """The tenant whose data namespace this is; None for any other namespace."""
    if not namespace.startswith(L.DATA_NAMESPACE_PREFIX):
        return None
    return namespace.removeprefix(L.DATA_NAMESPACE_PREFIX) or None


def refusal(
    run: RunFacts,
    waiting: WaitingStage,
    pipeline: PipelineFacts | None,
    version: VersionFacts | None,
) -> str | None:
    """Why the stage controller must not act on ``waiting``; None when it may. ``pipeline`` and
    ``version`` are what our database holds for the run's claimed labels (None: nothing)."""
    tenant = tenant_of(run.namespace)
    if tenant is None:
        return "the workflow is not in a tenant's pipeline namespace"
    if run.pipeline_id is None or run.pipeline_version is None:
        return "the workflow names no pipeline version"
    if pipeline is None or pipeline.tenant != tenant:
        return "the workflow's pipeline is not one of its namespace's tenant"
    if pipeline.kind != L.PIPELINE_KIND_ML:
        return "the workflow's pipeline is not an ML pipeline"
    if version is None:
        return "the workflow's pipeline version is not recorded"
    if waiting.stage not in version.stages:
        return f"the pipeline version has no {waiting.stage} stage"
    if run.template_ref != version.template_name:
        return "the workflow does not run its pipeline version's template"
    if run.entrypoint not in (None, S.RELEASE_ENTRYPOINT):
        return "the workflow overrides its template's entrypoint"
    if waiting.node_name != stage_node_name(run.name, waiting.stage):
        return f"the {waiting.stage} node is not where the platform puts it"
    return None
