"""rules.allowlist: secret references, resource limits, and labels and annotations under the
reserved domains."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.pipelines.compile import StepLimits
from compiler.pipelines.stamping import stamp
from shared import quantity
from tests.unit.compiler._allowlist import (
    BENIGN,
    C,
    container,
    doc,
    found,
    kind_of,
    run,
)

# --- secret references: an allowlist of the tenant's data secrets -----------------------------

SECRET_REFERENCES = [
    (
        container(env=[{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
        f"{C}.env[0].valueFrom.secretKeyRef.name",
    ),
    (container(envFrom=[{"secretRef": {"name": "s"}}]), f"{C}.envFrom[0].secretRef.name"),
    (
        doc(volumes=[{"name": "v", "secret": {"secretName": "s"}}]),
        "spec.volumes[0].secret.secretName",
    ),
    (doc(imagePullSecrets=[{"name": "s"}]), "spec.imagePullSecrets[0].name"),
    (
        doc(templateDefaults={"volumes": [{"name": "v", "secret": {"secretName": "s"}}]}),
        "spec.templateDefaults.volumes[0].secret.secretName",
    ),
]


@pytest.mark.parametrize(("document", "path"), SECRET_REFERENCES)
def test_a_secret_is_referenced_only_when_it_is_one_of_the_tenants_data_secrets(
    document: dict[str, Any], path: str
) -> None:
    assert run(document, data_secrets=frozenset({"s"})) == []
    assert found(document, data_secrets=frozenset({"other"})) == {("secret_reference", path)}
    # A tenant without data secrets: every reference is refused, and the message says why.
    violations = run(document, data_secrets=frozenset())
    assert [(v.rule, v.path) for v in violations] == [("secret_reference", path)]
    assert "has none yet" in violations[0].message


def _renamed(value: Any, name: str) -> Any:
    """``value`` with the Secret named ``s`` (in SECRET_REFERENCES) renamed ``name``."""
    if isinstance(value, dict):
        return {
            key: name if key in ("name", "secretName") and item == "s" else _renamed(item, name)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_renamed(item, name) for item in value]
    return value


_secret_names = st.from_regex(r"(kubeopera-)?[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True)


@settings(max_examples=200)
@given(_secret_names, st.frozensets(_secret_names, max_size=4), st.integers(0, 4))
def test_a_reference_is_accepted_exactly_when_it_names_a_data_secret_of_the_tenants(
    name: str, data_secrets: frozenset[str], where: int
) -> None:
    document, path = SECRET_REFERENCES[where]
    violations = found(_renamed(document, name), data_secrets=data_secrets)
    if name.startswith("kubeopera-"):
        assert violations == {("platform_secret", path)}
    elif name in data_secrets:
        assert violations == set()
    else:
        assert violations == {("secret_reference", path)}


def test_a_platform_secret_stays_refused_even_if_named_as_a_data_secret() -> None:
    document = container(envFrom=[{"secretRef": {"name": "kubeopera-artifact-credentials"}}])
    context = {"data_secrets": frozenset({"kubeopera-artifact-credentials"})}
    assert found(document, **context) == {("platform_secret", f"{C}.envFrom[0].secretRef.name")}


def test_the_benign_corpus_reads_secrets_only_as_data_secrets() -> None:
    """Without the data secret, exactly the benign documents that read it are refused."""
    for path in BENIGN:
        text = path.read_text()
        rules = {
            v.rule for v in run(yaml.safe_load(text), kind=kind_of(text), data_secrets=frozenset())
        }
        assert rules == ({"secret_reference"} if "warehouse-credentials" in text else set()), path


# --- resources: within the largest step, named by its setting ----------------------------------


@pytest.mark.parametrize(
    ("resources", "kind", "path", "message"),
    [
        ({"limits": {"cpu": "4001m"}}, "data", "limits.cpu", "4001m is above DATA_MAX_CPU (4)"),
        ({"requests": {"cpu": 5}}, "ml", "requests.cpu", "5 is above DATA_MAX_CPU (4)"),
        (
            {"limits": {"memory": "8589934593"}},
            "data",
            "limits.memory",
            "8589934593 is above DATA_MAX_MEMORY (8Gi)",
        ),
        (
            {"limits": {"nvidia.com/gpu": 3}},
            "ml",
            'limits["nvidia.com/gpu"]',
            "3 is above ML_MAX_GPU (2)",
        ),
        (
            {"limits": {"nvidia.com/gpu": 1}},
            "data",
            'limits["nvidia.com/gpu"]',
            "1 is above the 0 GPUs of a data pipeline",
        ),
        (
            {"limits": {"nvidia.com/gpu": "{{inputs.parameters.n}}"}},
            "data",
            'limits["nvidia.com/gpu"]',
            "none may be asked for: the 0 GPUs of a data pipeline",
        ),
    ],
)
def test_resources_above_the_largest_step_are_refused_naming_the_limit(
    resources: dict[str, Any], kind: str, path: str, message: str
) -> None:
    violations = run(container(resources=resources), kind=kind)
    assert [(v.rule, v.path) for v in violations] == [("resource_limit", f"{C}.resources.{path}")]
    assert violations[0].message.startswith(message)


def test_ml_max_gpu_of_zero_allows_no_gpu_on_ml_pipelines_either() -> None:
    document = container(resources={"limits": {"nvidia.com/gpu": 1}})
    limits = StepLimits(max_cpu="4", max_memory="8Gi", max_gpu=0)
    violations = run(document, kind="ml", limits=limits)
    assert [v.message for v in violations] == ["1 is above ML_MAX_GPU (0)"]


_cpu_amounts = st.one_of(
    st.integers(min_value=0, max_value=10_000).map(lambda millis: f"{millis}m"),
    st.integers(min_value=0, max_value=10).map(str),
    st.decimals(min_value=0, max_value=10, places=4, allow_nan=False).map(str),
    st.integers(min_value=0, max_value=10).map(lambda whole: f"{whole}e0"),
)


@settings(max_examples=200)
@given(_cpu_amounts, st.sampled_from(["requests", "limits"]))
def test_a_cpu_amount_is_accepted_exactly_when_it_is_within_data_max_cpu(
    amount: str, side: str
) -> None:
    violations = found(container(resources={side: {"cpu": amount}}))
    within = quantity.parse(amount) <= 4
    assert violations == (set() if within else {("resource_limit", f"{C}.resources.{side}.cpu")})


# --- labels and annotations under the reserved domains ----------------------------------------

_names = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)


@settings(max_examples=200)
@given(
    st.lists(_names, max_size=3),
    st.sampled_from(["kubeopera.io", "argoproj.io"]),
    _names,
    st.sampled_from(["podMetadata", "template", "workflowMetadata"]),
)
def test_any_key_under_a_reserved_domain_or_subdomain_is_refused(
    subdomains: list[str], domain: str, name: str, where: str
) -> None:
    key = ".".join([*subdomains, domain]) + f"/{name}"
    metadata = {"labels": {key: "x"}, "annotations": {key: "x"}}
    if where == "podMetadata":
        document, path = doc(podMetadata=metadata), "spec.podMetadata"
    elif where == "template":
        document = doc(templates=[{"name": "m", "metadata": metadata, "container": {"image": "a"}}])
        path = "spec.templates[0].metadata"
    else:
        document, path = doc(workflowMetadata=metadata), "spec.workflowMetadata"
    assert found(document) == {
        ("reserved_label", f'{path}.labels["{key}"]'),
        ("reserved_annotation", f'{path}.annotations["{key}"]'),
    }


@settings(max_examples=200)
@given(_names, _names, st.sampled_from(["kubeopera.io", "argoproj.io"]))
def test_keys_that_only_resemble_a_reserved_domain_are_accepted(
    prefix: str, name: str, domain: str
) -> None:
    # "<x>kubeopera.io" without the dot is another domain; so is "kubeopera.io.<x>".
    keys = [f"{prefix}{domain}/{name}", f"{domain}.{prefix}/{name}", f"{domain}-{name}"]
    metadata = {"labels": dict.fromkeys(keys, "x"), "annotations": dict.fromkeys(keys, "x")}
    assert run(doc(podMetadata=metadata, workflowMetadata=metadata)) == []


def test_the_stamped_workflow_labels_are_the_only_reserved_ones_accepted() -> None:
    document = stamp(
        doc(workflowMetadata={"labels": {"kubeopera.io/pipeline-id": "forged", "team": "a"}}),
        tenant="acme",
        namespace="kubeopera-data-acme",
        pipeline_id="p1",
        version=1,
        kind="data",
    )
    assert document["spec"]["workflowMetadata"]["labels"]["kubeopera.io/pipeline-id"] == "p1"
    assert run(document) == []
    # A reserved label equal on both sides, but not one stamping sets, is still the tenant's.
    document["metadata"]["labels"]["kubeopera.io/tenant"] = "other"
    document["spec"]["workflowMetadata"]["labels"]["kubeopera.io/tenant"] = "other"
    assert found(document) == {
        ("reserved_label", 'spec.workflowMetadata.labels["kubeopera.io/tenant"]')
    }
