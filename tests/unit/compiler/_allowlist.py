"""What the allowlist tests share: the corpora, the checking context, document builders."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from compiler.pipelines.allowlist import Violation, check
from compiler.pipelines.compile import StepLimits

HERE = Path(__file__).parent
ESCAPES = sorted((HERE / "escape_corpus").glob("*.yaml"))
BENIGN = sorted((HERE / "benign_corpus").glob("*.yaml"))
LIMITS = StepLimits(max_cpu="4", max_memory="8Gi", max_gpu=2)
# The benign corpus reads one data secret of the tenant's, warehouse-credentials.
DATA_SECRETS = frozenset({"warehouse-credentials"})
CONTEXT: dict[str, Any] = {
    "namespace": "kubeopera-data-acme",
    "tenant": "acme",
    "artifact_bucket": "kubeopera-artifacts",
    "kind": "data",
    "limits": LIMITS,
    "data_secrets": DATA_SECRETS,
}
EXPECT = re.compile(r"^# expect: (?P<rule>[a-z_]+) @ (?P<path>.+)$", re.MULTILINE)
# A corpus document is judged as a data pipeline unless its header says "# kind: ml".
_KIND = re.compile(r"^# kind: (?P<kind>data|ml)$", re.MULTILINE)


def run(document: object, **context: Any) -> list[Violation]:
    return check(document, **{**CONTEXT, **context})


def found(document: object, **context: Any) -> set[tuple[str, str]]:
    return {(violation.rule, violation.path) for violation in run(document, **context)}


def kind_of(text: str) -> str:
    match = _KIND.search(text)
    return match["kind"] if match else "data"


# --- table-driven checks of single constructs ------------------------------------------------


def doc(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "entrypoint": "main",
        "templates": [{"name": "main", "container": {"image": "alpine", "command": ["true"]}}],
    }
    body.update(spec)
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate", "spec": body}


def container(**fields: Any) -> dict[str, Any]:
    return doc(templates=[{"name": "main", "container": {"image": "alpine", **fields}}])


C = "spec.templates[0].container"
