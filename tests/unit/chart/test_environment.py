"""Each Deployment receives exactly the variables its deployable reads, and its credentials only
from a Secret of its own.

What a deployable reads is derived from the code (``tests/unit/_code_reads.py``: the Settings
fields its own modules and the shared modules they import read, and the AWS SDK's keys where it
uses the SDK). The chart is rendered by Helm's engine with every variable set, then with its
defaults, and each container's environment is compared with that."""

from __future__ import annotations

import re
from functools import cache
from typing import Any, get_args

import helm_python as helm
import pytest
import yaml
from pydantic import SecretStr

from shared.config import Settings
from tests.unit._code_reads import AWS_CREDENTIALS, DEPLOYABLES, ROOT, environment_read_by
from tests.unit.chart._render import CHART, RELEASE, render, rendered

# The chart's names for the deployables (a Kubernetes name has no '_').
CHART_NAMES = {deployable: deployable.replace("_", "-") for deployable in DEPLOYABLES}
# URLs that carry a password (user info): credentials although not SecretStr.
CREDENTIAL_URLS = ("DATABASE_URL", "REDIS_URL")
TABLE = CHART / "files" / "environment.yaml"


def _table() -> dict[str, Any]:
    table: dict[str, Any] = yaml.safe_load(TABLE.read_text())
    return table


@cache
def reads() -> dict[str, frozenset[str]]:
    """Chart deployable name → every variable it reads (from the code)."""
    by_deployable: dict[str, set[str]] = {name: set() for name in CHART_NAMES.values()}
    for variable, deployables in environment_read_by().items():
        for deployable in deployables:
            by_deployable[CHART_NAMES[deployable]].add(variable)
    return {name: frozenset(variables) for name, variables in by_deployable.items()}


def credentials() -> set[str]:
    """The variables read anywhere that hold a secret: SecretStr fields, URLs with a password,
    the AWS SDK's keys."""
    secret = {
        name
        for name, field in Settings.model_fields.items()
        if field.annotation is SecretStr or SecretStr in get_args(field.annotation)
    }
    return (secret | set(CREDENTIAL_URLS) | set(AWS_CREDENTIALS)) & set(environment_read_by())


def containers(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Chart deployable name → its one container."""
    found = {}
    for document in documents:
        if document["kind"] != "Deployment":
            continue
        name = document["metadata"]["labels"]["app.kubernetes.io/component"]
        (found[name],) = document["spec"]["template"]["spec"]["containers"]
    assert set(found) == set(CHART_NAMES.values())
    return found


def secret_name(deployable: str) -> str:
    return f"{RELEASE}-{deployable}"


def everything() -> dict[str, Any]:
    """Values setting every plain variable some deployable reads (all but the credentials and
    what the chart sets itself) and the events' public host."""
    table = _table()
    plain = set(environment_read_by()) - credentials() - set(table["chart"])
    env = {name: "x" for name in sorted(plain)}
    # The chart reads this one too (the service proxy's Role, rbac.yaml): a Service URL.
    env["ARGO_DATA_SERVER_URL"] = "https://x.y.svc:2746"
    return {"env": env, "events": {"publicHost": "hooks.x"}}


def test_the_charts_table_is_what_the_code_reads() -> None:
    """files/environment.yaml, which routes every variable, names each reader the code has."""
    table = _table()
    expected = {
        variable: sorted(CHART_NAMES[d] for d in deployables)
        for variable, deployables in sorted(environment_read_by().items())
    }
    actual = {variable: sorted(readers) for variable, readers in table["readers"].items()}
    assert actual == expected, "files/environment.yaml's readers should be:\n" + yaml.safe_dump(
        {"readers": expected}, default_flow_style=None, width=100
    )
    assert set(table["credentials"]) == credentials()
    assert set(table["credentials"].values()) <= {"required", "optional"}
    # What Settings cannot start without is required wherever it is read.
    assert table["credentials"]["DATABASE_URL"] == "required"


def test_each_deployment_receives_exactly_what_its_deployable_reads() -> None:
    """With every variable set, each container gets all it reads and nothing else: no envFrom,
    each credential from a secretKeyRef of the same name."""
    for name, container in containers(render(everything())).items():
        assert "envFrom" not in container, name
        received = [item["name"] for item in container["env"]]
        assert len(received) == len(set(received)), f"{name}: a variable given twice"
        missing = sorted(reads()[name] - set(received))
        extra = sorted(set(received) - reads()[name])
        assert (missing, extra) == ([], []), f"{name}: lacks {missing}, receives unread {extra}"


def test_with_its_defaults_no_deployment_receives_what_it_does_not_read() -> None:
    for name, container in containers(rendered()).items():
        assert "envFrom" not in container, name
        received = {item["name"] for item in container["env"]}
        assert received <= reads()[name], f"{name} receives {sorted(received - reads()[name])}"
        assert received >= reads()[name] & credentials(), f"{name} lacks a credential"


def test_each_deployable_reads_its_credentials_from_its_own_secret_and_nothing_else() -> None:
    table = _table()
    for name, container in containers(rendered()).items():
        refs = {
            item["name"]: item["valueFrom"]["secretKeyRef"]
            for item in container["env"]
            if "secretKeyRef" in item.get("valueFrom", {})
        }
        assert set(refs) == reads()[name] & credentials(), name
        for variable, ref in refs.items():
            assert ref["name"] == secret_name(name), f"{name}.{variable}"
            assert ref["key"] == variable
            assert ref.get("optional", False) is (table["credentials"][variable] == "optional")
        plain = [item["name"] for item in container["env"] if "value" in item]
        assert not set(plain) & credentials(), f"{name}: a credential as a plain value"


def test_inference_auth_holds_its_own_database_url_and_no_other_credential() -> None:
    """On every inference request's path: its login role's URL, from its own Secret; none of the
    owner's URL, the API keys, MLflow's administrator or the storage keys."""
    container = containers(rendered())["inference-auth"]
    refs = {
        item["name"]: item["valueFrom"]["secretKeyRef"]
        for item in container["env"]
        if "valueFrom" in item
    }
    assert refs == {
        "DATABASE_URL": {"name": f"{RELEASE}-inference-auth", "key": "DATABASE_URL"},
        "REDIS_URL": {"name": f"{RELEASE}-inference-auth", "key": "REDIS_URL"},
    }
    assert "envFrom" not in container


def test_an_operator_names_each_deployables_secret() -> None:
    values = {"deployables": {"inference-auth": {"secret": "wm-inference-auth-login"}}}
    for name, container in containers(render(values)).items():
        refs = {
            item["valueFrom"]["secretKeyRef"]["name"]
            for item in container["env"]
            if "secretKeyRef" in item.get("valueFrom", {})
        }
        expected = "wm-inference-auth-login" if name == "inference-auth" else secret_name(name)
        assert refs == {expected}, name


def test_a_variable_set_once_reaches_only_its_readers_and_a_deployables_own_wins() -> None:
    values = {
        "env": {"LOG_LEVEL": "info", "RUN_RETENTION_DAYS": "30"},
        "deployables": {"compiler": {"env": {"LOG_LEVEL": "debug"}}},
    }
    found = containers(render(values))
    for name, container in found.items():
        plain = {item["name"]: item.get("value") for item in container["env"]}
        assert plain["LOG_LEVEL"] == ("debug" if name == "compiler" else "info")
        assert ("RUN_RETENTION_DAYS" in plain) is (name in {"watcher", "compiler"}), name


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"env": {"API_KEY": "k"}}, r"env\.API_KEY is a credential"),
        ({"env": {"AWS_SECRET_ACCESS_KEY": "k"}}, r"env\.AWS_SECRET_ACCESS_KEY is a credential"),
        ({"env": {"DATABASE_URL": "postgresql://x"}}, r"env\.DATABASE_URL is a credential"),
        ({"env": {"POD_NAME": "p"}}, r"env\.POD_NAME is set by the chart"),
        ({"env": {"NOT_A_SETTING": "1"}}, r"env\.NOT_A_SETTING: no deployable reads it"),
        (
            {"deployables": {"watcher": {"env": {"GIT_TIMEOUT": "10s"}}}},
            r"deployables\.watcher\.env\.GIT_TIMEOUT: watcher does not read it",
        ),
        (
            {"deployables": {"inference-auth": {"env": {"MLFLOW_ADMIN_PASSWORD": "p"}}}},
            r"deployables\.inference-auth\.env\.MLFLOW_ADMIN_PASSWORD is a credential",
        ),
        ({"existingSecret": "workflow-manager"}, r"existingSecret is replaced"),
        (
            {"deployables": {"inference-auth": {"secret": "wm-apiserver"}}},
            r"deployables\.apiserver\.secret and deployables\.inference-auth\.secret are both",
        ),
    ],
)
def test_the_chart_refuses_a_credential_as_a_value_and_what_nobody_reads(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmRenderError, match=message):
        render(values)


def test_a_whole_number_reaches_the_process_as_written() -> None:
    """Helm reads values' numbers as floats; 33554432 must not arrive as 3.3554432e+07."""
    values = {"env": {"GIT_FETCH_MAX_BYTES": 33554432, "GIT_TIMEOUT": 1.5, "LOG_JSON": True}}
    compiler = containers(render(values))["compiler"]
    plain = {item["name"]: item["value"] for item in compiler["env"] if "value" in item}
    assert (plain["GIT_FETCH_MAX_BYTES"], plain["GIT_TIMEOUT"], plain["LOG_JSON"]) == (
        "33554432",
        "1.5",
        "true",
    )
    settings = Settings(DATABASE_URL="postgresql://u@h/db", **plain)
    assert settings.GIT_FETCH_MAX_BYTES == 33554432


def test_the_operations_page_lists_each_deployables_keys_as_the_chart_passes_them() -> None:
    """docs/operations.md, "Each deployable's Secret": what an operator puts in each Secret."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Each deployable's Secret", 1)[1].split("\n## ", 1)[0]
    documented = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in reads():
            required, optional = (set(re.findall(r"`([A-Z0-9_]+)`", c)) for c in cells[1:])
            documented[cells[0]] = (required, optional)
    table = _table()["credentials"]
    expected = {
        name: (
            {v for v in variables & credentials() if table[v] == "required"},
            {v for v in variables & credentials() if table[v] == "optional"},
        )
        for name, variables in reads().items()
    }
    assert documented == expected
