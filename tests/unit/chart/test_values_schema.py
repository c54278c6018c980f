"""values.schema.json, as Helm's engine applies it before rendering: a wrong type or an unknown
key among the chart's own is refused with the key's path; the default values pass; every key of
values.yaml is covered, and only the maps the chart passes through verbatim (labels, env,
resources, ...) take keys the chart does not name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import helm_python as helm
import jsonschema
import pytest

from shared.errors import ConfigError
from shared.storage_policy import (
    check_account_id,
    check_boundary_arn,
    check_bucket,
    check_user_path,
)
from tests.unit.chart._render import CHART, render, rendered

# The maps the chart hands to Kubernetes or to the processes as they are: their keys are the
# operator's (label names, variable names, resource names, pod security fields).
FREE_FORM = frozenset(
    {
        "env",
        "resources",
        "podSecurityContext",
        "securityContext",
        "nodeSelector",
        "affinity",
        "podAnnotations",
        "podLabels",
        "annotations",
        "labels",
    }
)


def _chart() -> helm.Chart:
    return helm.Chart.load(CHART)


def _schema() -> dict[str, Any]:
    schema = _chart().schema
    assert schema is not None, "the chart ships no values.schema.json"
    return schema


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its ``$ref`` (and a one-member ``allOf`` wrapping one) followed."""
    while True:
        if "$ref" in node:
            target: Any = schema
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            node = target
        elif len(node.get("allOf", [])) == 1:
            node = node["allOf"][0]
        else:
            return node


def _mappings(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every mapping of values.yaml and its path, not descending into the free-form ones."""
    if isinstance(value, dict):
        yield path, value
        for key, item in value.items():
            if key not in FREE_FORM:
                yield from _mappings(item, (*path, key))


def _node(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node = _resolve(schema, schema)
    for key in path:
        node = _resolve(schema, node["properties"][key])
    return node


def test_the_schema_is_draft_07_as_helm_reads_it() -> None:
    schema = _schema()
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)


def test_the_default_values_pass() -> None:
    chart = _chart()
    chart.validate_schema(chart.values)
    assert rendered()


def test_every_key_of_values_yaml_is_the_schemas_and_no_other_key_passes() -> None:
    """Each mapping of values.yaml that is the chart's own is a closed object of the schema
    naming all its keys; the free-form maps are left open."""
    schema = _schema()
    for path, mapping in _mappings(_chart().values):
        node = _node(schema, path)
        where = ".".join(path) or "(top)"
        assert node.get("type") == "object", where
        assert node.get("additionalProperties") is False, f"{where} takes unknown keys"
        assert set(mapping) <= set(node["properties"]), f"{where}: {set(mapping)}"


def _open_objects(schema: dict[str, Any], node: Any, path: str) -> Iterator[str]:
    if isinstance(node, dict):
        if "properties" in node and node.get("additionalProperties") is not False:
            yield path
        for key, child in node.items():
            yield from _open_objects(schema, child, f"{path}/{key}")
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _open_objects(schema, child, f"{path}/{index}")


def test_no_object_that_names_its_keys_takes_others() -> None:
    """Also those values.yaml leaves out (a deployable's own podSecurityContext, ...)."""
    assert list(_open_objects(_schema(), _schema(), "")) == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # Wrong types.
        (
            {"deployables": {"apiserver": {"replicas": "3"}}},
            r"at '/deployables/apiserver/replicas': got string, want integer",
        ),
        ({"networkPolicy": {"enabled": "yes"}}, r"at '/networkPolicy/enabled': got string"),
        (
            {"networkPolicy": {"egress": {"postgresql": {"ports": ["5432"]}}}},
            r"at '/networkPolicy/egress/postgresql/ports/0': got string, want integer",
        ),
        # Unquoted digits reach the template as a float: 1.23456789012e+11 in the policy.
        ({"iam": {"accountId": 123456789012}}, r"at '/iam/accountId': got number, want string"),
        ({"image": {"pullPolicy": "Sometimes"}}, r"at '/image/pullPolicy': value must be one of"),
        ({"image": {"tag": 2}}, r"at '/image/tag': got number, want string"),
        (
            {"monitoring": {"serviceMonitor": {"enabled": "true"}}},
            r"at '/monitoring/serviceMonitor/enabled': got string, want boolean",
        ),
        ({"monitoring": {"serviceMonitor": {"interval": "30"}}}, r"/monitoring/serviceMonitor/"),
        ({"gitSync": {"workdirSize": "lots"}}, r"at '/gitSync/workdirSize'"),
        ({"deployables": {"compiler": {"service": {"port": 0}}}}, r"/compiler/service/port"),
        (
            {"deployables": {"stagectl": {"topologySpreadConstraints": {"maxSkew": 1}}}},
            r"at '/deployables/stagectl/topologySpreadConstraints': got object",
        ),
        (
            {"deployables": {"watcher": {"podLabels": {"tier": 1}}}},
            r"at '/deployables/watcher/podLabels/tier': got number, want string",
        ),
        (
            {"deployables": {"compiler": {"pdb": {"minAvailable": "half"}}}},
            r"at '/deployables/compiler/pdb/minAvailable'",
        ),
        # Unknown keys.
        ({"replicaCount": 3}, r"at '': additional properties 'replicaCount' not allowed"),
        (
            {"deployables": {"watcher": {"replicass": 2}}},
            r"at '/deployables/watcher': additional properties 'replicass' not allowed",
        ),
        (
            {"deployables": {"watchr": {"replicas": 2}}},
            r"at '/deployables': additional properties 'watchr' not allowed",
        ),
        # A leader-elected deployable has no autoscaler (only its leader works), no Service.
        (
            {"deployables": {"stagectl": {"autoscaling": {"enabled": True}}}},
            r"at '/deployables/stagectl': additional properties 'autoscaling' not allowed",
        ),
        (
            {"deployables": {"watcher": {"service": {"port": 80}}}},
            r"at '/deployables/watcher': additional properties 'service' not allowed",
        ),
        (
            {"deployables": {"compiler": {"pdb": {"minAvailble": 1}}}},
            r"at '/deployables/compiler/pdb': additional properties 'minAvailble' not allowed",
        ),
        # The compiler's internal API is the apiserver's alone: no value opens it.
        (
            {"networkPolicy": {"ingress": {"compiler": {"namespaces": ["x"]}}}},
            r"at '/networkPolicy/ingress': additional properties 'compiler' not allowed",
        ),
        (
            {"networkPolicy": {"egress": {"s3": {"cidr": ["10.0.0.0/8"]}}}},
            r"at '/networkPolicy/egress/s3': additional properties 'cidr' not allowed",
        ),
        (
            {"admission": {"confine": {"compilr": "kubeopera-data-"}}},
            r"at '/admission/confine': additional properties 'compilr' not allowed",
        ),
        (
            {"monitoring": {"serviceMonitor": {"intervall": "1m"}}},
            r"at '/monitoring/serviceMonitor': additional properties 'intervall' not allowed",
        ),
        ({"image": {"tagg": "1"}}, r"at '/image': additional properties 'tagg' not allowed"),
    ],
)
def test_helm_refuses_a_wrong_type_or_an_unknown_key_naming_it(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmValuesError, match=message):
        render(values)


def test_a_removed_key_still_gets_the_charts_explanation() -> None:
    """existingSecret is the schema's so that the template can say what replaced it."""
    with pytest.raises(helm.HelmRenderError, match=r"existingSecret is replaced by one Secret"):
        render({"existingSecret": "workflow-manager"})


# The IAM policy's values, as the compiler's own checks judge the same variables.
CODE_CHECKS = {
    "bucket": check_bucket,
    "userPath": check_user_path,
    "boundaryArn": check_boundary_arn,
    "accountId": check_account_id,
}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("bucket", "wm-artifacts"),
        ("bucket", "wm.artifacts.eu"),
        ("bucket", "WM-Artifacts"),
        ("bucket", "wm..artifacts"),
        ("bucket", "wm-*"),
        ("bucket", "ab"),
        ("userPath", "/workflow-manager/tenants/"),
        ("userPath", "/wm/"),
        ("userPath", "/"),
        ("userPath", "/wm"),
        ("userPath", "wm/"),
        ("userPath", "/wm//tenants/"),
        ("userPath", "/wm/*/"),
        ("userPath", "/wm?/"),
        ("userPath", "/" + "a/" * 256),
        ("boundaryArn", "arn:aws:iam::123456789012:policy/wm-tenant-boundary"),
        ("boundaryArn", "arn:aws:iam::123456789012:policy/path/wm"),
        ("boundaryArn", "arn:aws:iam::aws:policy/AdministratorAccess"),
        ("boundaryArn", "arn:aws:iam::123456789012:role/wm"),
        ("accountId", "*"),
        ("accountId", "123456789012"),
        ("accountId", "12345678901"),
        ("accountId", "12345678901a"),
    ],
)
def test_the_iam_values_are_refused_exactly_when_the_compiler_would_refuse_them(
    key: str, value: str
) -> None:
    try:
        CODE_CHECKS[key](value)
        code_accepts = True
    except ConfigError:
        code_accepts = False
    try:
        _chart().validate_schema({"iam": {key: value}})
        schema_accepts = True
    except helm.HelmValuesError:
        schema_accepts = False
    assert schema_accepts is code_accepts, (key, value)
