"""The ML control stages a pipeline version's template may contain: their names, the templates
the compiler gives them, the outputs the stage controller sets, and the names a tenant may not use.

Constants and pure helpers only. The compiler appends these stages to an ML pipeline with a
``release`` (``compiler.pipelines.release``) and records which ones a version contains
(``pipeline_versions.stages``); the stage controller (``stagectl``) completes their suspend nodes.
Both read the names here, so they agree on them. docs/pipeline-spec.md ("Releases") tells what
runs when.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

# Every stage of a release, in the order the spec gives and a run reaches them (cleanup is
# the exit handler). ``deploy`` deploys the registered version to staging; canary, analysis and
# promotion take it to production.
REGISTER: Final = "register"
GATE: Final = "gate"
DEPLOY: Final = "deploy"
APPROVAL: Final = "approval"
CANARY: Final = "canary"
ANALYSIS: Final = "analysis"
PROMOTION: Final = "promotion"
CLEANUP: Final = "cleanup"
STAGES: Final = (REGISTER, GATE, DEPLOY, APPROVAL, CANARY, ANALYSIS, PROMOTION, CLEANUP)

# The environments a model version is deployed to: staging by the deploy stage of every
# release that passed its gate, production by promotion (the stage, or the promote route).
STAGING: Final = "staging"
PRODUCTION: Final = "production"
ENVIRONMENTS: Final = (STAGING, PRODUCTION)

# Every platform template, task and step name starts with this; tenants may use none of them.
PLATFORM_PREFIX: Final = "wm-"
# The DAG that becomes the entrypoint of a template with a release: the tenant's entrypoint as
# its task ``main``, then the stages.
RELEASE_ENTRYPOINT: Final = "wm-release-main"
MAIN_TASK: Final = "main"
# On each platform template's metadata.annotations: which stage it is. Under kubeopera.io, a
# domain only the platform writes (the allowlist refuses it in tenant templates).
STAGE_ANNOTATION: Final = "kubeopera.io/platform-stage"


def template_name(stage: str) -> str:
    """The template (and DAG task) name of a stage: ``wm-register``."""
    return f"{PLATFORM_PREFIX}{stage}"


# The output parameters of each stage's suspend node, set by the stage controller through the
# Argo server's ``set`` (``valueFrom.supplied``).
VERSION: Final = "version"
VERDICT: Final = "verdict"
REASONS: Final = "reasons"  # a JSON array of strings, as a string
DECISION: Final = "decision"
OUTCOME: Final = "outcome"
URL: Final = "url"  # the deployment's public endpoint (no token)
OUTPUTS: Final[Mapping[str, tuple[str, ...]]] = {
    REGISTER: (VERSION,),
    GATE: (VERDICT, REASONS),
    DEPLOY: (URL,),
    APPROVAL: (DECISION,),
    CLEANUP: (OUTCOME,),
}
VERDICT_PASSED: Final = "passed"
VERDICT_FAILED: Final = "failed"
DECISION_APPROVED: Final = "approved"
DECISION_REJECTED: Final = "rejected"

# The condition on every stage after the gate: it runs only when the gate passed the version.
PASSED_CONDITION: Final = (
    f"{{{{tasks.{template_name(GATE)}.outputs.parameters.{VERDICT}}}}} == {VERDICT_PASSED}"
)


def reserved_name(name: object) -> bool:
    """Whether a template, task or step name belongs to the platform: ``wm-`` anything, in any
    case, whatever stages exist today or later. A stage's bare name (``cleanup``, ``gate``) is
    not reserved: the stage controller knows a stage by its ``wm-`` template, never by a name a
    tenant's step may also have."""
    return str(name).lower().startswith(PLATFORM_PREFIX)
