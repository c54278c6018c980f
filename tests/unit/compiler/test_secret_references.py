"""compiler.secrets.references: every Secret a version's template, definition and settings refer
to, found wherever it is, and nothing that merely resembles one."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.pipelines.compile import compile_wizard
from compiler.pipelines.stamping import stamp
from compiler.secrets import references
from tests.unit.compiler._allowlist import BENIGN, ESCAPES, LIMITS, container, doc, kind_of, run
from tests.unit.compiler.test_allowlist_rules import SECRET_REFERENCES

# --- templates ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("document", "path"), SECRET_REFERENCES)
def test_each_place_the_allowlist_judges_is_a_reference(
    document: dict[str, Any], path: str
) -> None:
    assert references.in_template(document) == {"s"}, path


def _template(**fields: Any) -> dict[str, Any]:
    return doc(templates=[{"name": "main", **fields}])


ELSEWHERE = [
    # containers of every kind, at every level
    _template(initContainers=[{"name": "i", "envFrom": [{"secretRef": {"name": "s"}}]}]),
    _template(sidecars=[{"name": "p", "envFrom": [{"secretRef": {"name": "s"}}]}]),
    _template(
        containerSet={
            "containers": [
                {
                    "name": "main",
                    "env": [
                        {"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
                    ],
                }
            ]
        }
    ),
    _template(script={"image": "a", "source": "x", "envFrom": [{"secretRef": {"name": "s"}}]}),
    _template(volumes=[{"name": "v", "secret": {"secretName": "s"}}]),
    doc(templateDefaults={"container": {"envFrom": [{"secretRef": {"name": "s"}}]}}),
    _template(
        steps=[
            [
                {
                    "name": "a",
                    "inline": {
                        "dag": {
                            "tasks": [
                                {
                                    "name": "b",
                                    "inline": {
                                        "container": {"envFrom": [{"secretRef": {"name": "s"}}]}
                                    },
                                }
                            ]
                        }
                    },
                }
            ]
        ]
    ),
    # what the allowlist refuses whole, read anyway
    _template(
        volumes=[{"name": "v", "projected": {"sources": [{"secret": {"name": "s"}}]}}],
    ),
    _template(
        volumes=[{"name": "v", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "s"}}}]
    ),
    _template(volumes=[{"name": "v", "cephfs": {"monitors": [], "secretRef": {"name": "s"}}}]),
    _template(volumes=[{"name": "v", "azureFile": {"secretName": "s", "shareName": "x"}}]),
    _template(
        outputs={
            "artifacts": [
                {"name": "a", "s3": {"accessKeySecret": {"name": "s", "key": "k"}, "key": "x"}}
            ]
        }
    ),
    _template(
        inputs={"artifacts": [{"name": "a", "git": {"repo": "r", "passwordSecret": {"name": "s"}}}]}
    ),
]


@pytest.mark.parametrize("document", ELSEWHERE)
def test_references_are_found_wherever_they_sit(document: dict[str, Any]) -> None:
    assert references.in_template(document) == {"s"}


@pytest.mark.parametrize(
    "document",
    [
        container(env=[{"name": "s", "value": "s"}]),
        container(args=["--secret", "s"], command=["secretName"]),
        doc(arguments={"parameters": [{"name": "secret", "value": "s"}]}),
        doc(podMetadata={"labels": {"secret": "s", "secretName-x": "s"}}),
        container(env=[{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "s", "key": "k"}}}]),
        container(envFrom=[{"configMapRef": {"name": "s"}}]),
        doc(volumes=[{"name": "s", "configMap": {"name": "s"}}]),
        container(env=[{"name": "K", "valueFrom": {"secretKeyRef": {"key": "k"}}}]),
        container(env=[{"name": "K", "valueFrom": {"secretKeyRef": {"name": 3, "key": "k"}}}]),
        doc(imagePullSecrets="s"),
        doc(volumes=[{"name": "v", "secret": {"secretName": ""}}]),
    ],
)
def test_what_only_resembles_a_reference_is_not_one(document: dict[str, Any]) -> None:
    assert references.in_template(document) == frozenset()


def test_several_references_are_all_found() -> None:
    document = doc(
        imagePullSecrets=[{"name": "pull"}, {"name": "pull2"}, {"nope": 1}, "x"],
        volumes=[{"name": "v", "secret": {"secretName": "mounted"}}],
        templates=[
            {
                "name": "main",
                "container": {
                    "image": "a",
                    "env": [
                        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "one", "key": "k"}}},
                        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "one", "key": "j"}}},
                    ],
                    "envFrom": [{"secretRef": {"name": "two"}}, {"configMapRef": {"name": "c"}}],
                },
            }
        ],
    )
    assert references.in_template(document) == {"pull", "pull2", "mounted", "one", "two"}


def test_the_benign_corpus_refers_to_its_one_data_secret_exactly_where_the_allowlist_sees_it() -> (
    None
):
    """The scanner and the allowlist agree: a document the allowlist refuses for a secret
    reference without the data secret refers to it, and one it accepts refers to none."""
    for path in BENIGN:
        text = path.read_text()
        document = yaml.safe_load(text)
        refused = {v.rule for v in run(document, kind=kind_of(text), data_secrets=frozenset())} == {
            "secret_reference"
        }
        expected = {"warehouse-credentials"} if refused else set()
        assert references.in_template(document) == expected, path
        stamped = stamp(
            copy.deepcopy(document),
            tenant="acme",
            namespace="kubeopera-data-acme",
            pipeline_id="p1",
            version=1,
            kind=kind_of(text),  # type: ignore[arg-type]
        )
        assert references.in_template(stamped) == expected, path


def test_every_escape_refused_for_a_secret_refers_to_it() -> None:
    for path in ESCAPES:
        text = path.read_text()
        document = yaml.safe_load(text)
        for violation in run(document, kind=kind_of(text), data_secrets=frozenset()):
            if violation.rule in ("secret_reference", "platform_secret"):
                assert references.in_template(document), (path, violation.path)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["name", "secret", "secretRef", "secretName", "imagePullSecrets", "x"])
            | st.text(max_size=6),
            children,
            max_size=4,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=300)
@given(_JSON)
def test_any_document_is_read_without_failing(document: object) -> None:
    for found in (
        references.in_template(document),
        references.in_definition(document),
        references.in_settings(document),
    ):
        assert all(isinstance(name, str) and name for name in found)


@settings(max_examples=100)
@given(st.integers(0, len(SECRET_REFERENCES) - 1), st.integers(0, len(BENIGN) - 1))
def test_a_reference_planted_in_any_benign_template_is_found(where: int, which: int) -> None:
    planted = yaml.safe_load(BENIGN[which].read_text())
    source, _ = SECRET_REFERENCES[where]
    spec = planted["spec"]
    for key in ("volumes", "imagePullSecrets"):
        spec.setdefault(key, []).extend(source["spec"].get(key) or [])
    if "templateDefaults" in source["spec"]:
        spec["templateDefaults"] = source["spec"]["templateDefaults"]
    spec["templates"].append({**source["spec"]["templates"][0], "name": "planted"})
    assert "s" in references.in_template(planted)


def test_depth_is_bounded() -> None:
    deep: dict[str, Any] = {"secretRef": {"name": "s"}}
    for _ in range(references.MAX_DEPTH + 10):
        deep = {"x": deep}
    assert references.in_template(deep) == frozenset()
    shallow: dict[str, Any] = {"secretRef": {"name": "s"}}
    for _ in range(references.MAX_DEPTH - 2):
        shallow = {"x": shallow}
    assert references.in_template(shallow) == {"s"}


def test_a_compiled_wizard_step_refers_to_its_from_secret() -> None:
    spec = {
        "apiVersion": "pipelines.kubeopera.io/v1",
        "steps": [
            {
                "name": "load",
                "image": "a",
                "env": [
                    {"name": "TOKEN", "from_secret": {"name": "warehouse", "key": "token"}},
                    {"name": "PLAIN", "value": "other"},
                ],
            }
        ],
    }
    template = compile_wizard(
        spec, tenant="acme", pipeline_id="p1", version=1, kind="data", limits=LIMITS
    )
    assert references.in_template(template) == {"warehouse"}
    assert references.in_definition({"type": "wizard", "spec": spec}) == {"warehouse"}


# --- definitions and settings ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        (
            {"type": "git", "repository": "r", "path": "p", "credentials_secret": "git-creds"},
            {"git-creds"},
        ),
        ({"type": "git", "repository": "r", "path": "p", "credentials_secret": None}, set()),
        ({"type": "git", "repository": "r", "path": "p"}, set()),
        ({"type": "yaml", "template": "secretKeyRef: {name: s}"}, set()),
        ({"type": "wizard", "spec": {"steps": []}}, set()),
    ],
)
def test_a_definition_refers_to_its_git_credentials(
    definition: dict[str, Any], expected: set[str]
) -> None:
    assert references.in_definition(definition) == expected


@pytest.mark.parametrize(
    ("settings_", "expected"),
    [
        ({"schedule": None, "triggers": None, "notifications": None}, set()),
        ({}, set()),
        (
            {"notifications": [{"channel": "slack", "secret": "slack-hook", "on": ["failed"]}]},
            {"slack-hook"},
        ),
        (
            {"notifications": [{"type": "email", "to": "a@b"}, {"type": "webhook", "secret": "h"}]},
            {"h"},
        ),
        ({"notifications": {"channels": [{"secret": {"name": "nested"}}]}}, {"nested"}),
        (
            {"notifications": [{"token_secret": "tok", "url_secret": {"name": "url"}}]},
            {"tok", "url"},
        ),
        ({"triggers": [{"type": "webhook", "secret": "hook-token"}]}, {"hook-token"}),
        ({"notifications": [{"secret": ""}, {"secret": 3}, {"secrets": "x"}]}, set()),
        ({"notifications": [{"name": "secret", "value": "secret"}]}, set()),
    ],
)
def test_settings_refer_to_any_secret_field(settings_: dict[str, Any], expected: set[str]) -> None:
    assert references.in_settings(settings_) == expected


def test_a_version_refers_to_the_union_and_users_are_listed_in_order() -> None:
    template = container(envFrom=[{"secretRef": {"name": "a"}}])
    definition = {"type": "git", "credentials_secret": "b"}
    settings_ = {"notifications": [{"secret": "c"}]}
    assert references.of_version(template, definition, settings_) == {"a", "b", "c"}
    versions = {
        "p1": (template, {}, {}),
        "p2": ({}, definition, {}),
        "p3": ({}, {}, settings_),
        "p4": (template, definition, settings_),
    }
    assert references.users("a", versions) == ["p1", "p4"]
    assert references.users("b", versions) == ["p2", "p4"]
    assert references.users("c", versions) == ["p3", "p4"]
    assert references.users("d", versions) == []
