"""pipelines.definitions: a Git definition renders exactly as YAML, from the document read at a
commit; without one it is refused (a save reads before it renders)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.pipelines.compile import StepLimits
from compiler.pipelines.definitions import Fetched, Target, render
from shared.errors import Invalid, Refused
from shared.pipelines import parse_body

TARGET = Target(
    tenant="acme",
    pipeline_id="abc123",
    version=2,
    kind="data",
    limits=StepLimits(max_cpu="4", max_memory="8Gi"),
    artifact_bucket="artifacts",
)
CORPUS = Path(__file__).parent
GIT = {"type": "git", "repository": "https://git.example/acme/etl.git", "path": "etl.yaml"}


def outcome(data: dict[str, object], fetched: Fetched | None = None) -> object:
    try:
        return render(parse_body(data), TARGET, fetched=fetched)
    except (Invalid, Refused) as refused:
        return (type(refused), refused.message, refused.details)


@pytest.mark.parametrize(
    "path",
    sorted((CORPUS / "benign_corpus").glob("*.yaml"))[:6]
    + sorted((CORPUS / "escape_corpus").glob("*.yaml"))[:6],
    ids=lambda path: path.name,
)
def test_a_git_document_renders_or_is_refused_as_the_same_yaml_would(path: Path) -> None:
    text = path.read_text()
    as_yaml = outcome({"name": "p", "definition": {"type": "yaml", "template": text}})
    as_git = outcome({"name": "p", "definition": GIT}, Fetched("c" * 40, text))
    assert as_git == as_yaml


def test_a_git_definition_with_nothing_read_is_refused() -> None:
    with pytest.raises(Invalid) as refused:
        render(parse_body({"name": "p", "definition": GIT}), TARGET)
    assert refused.value.details["errors"][0]["field"] == "definition"
