"""The chart's compiler ClusterRole covers what the compiler does and what it grants.

Kubernetes refuses a Role that grants more than its creator holds, so every rule of the tenant
Roles (compiler.provisioning.ROLES) must be covered by the compiler's own ClusterRole, and so
must every kind the compiler applies to a tenant namespace."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler.k8s_objects import KINDS
from compiler.provisioning import ROLES, tenant_objects
from tests.unit.compiler._specs import BARE, TENANT

RBAC = Path(__file__).resolve().parents[3] / "charts/workflow-manager/templates/rbac.yaml"
_TEMPLATE = re.compile(r"{{-?[^}]*}}")
_DIRECTIVE = re.compile(r"{{-?[^}]*}}")


def compiler_rules() -> list[dict[str, Any]]:
    for part in RBAC.read_text().split("\n---\n"):
        # Helm directives on lines of their own (range, end) go; inline values become text.
        lines = [line for line in part.splitlines() if not _DIRECTIVE.fullmatch(line.strip())]
        doc = yaml.safe_load(_TEMPLATE.sub("x", "\n".join(lines)))
        if (
            isinstance(doc, dict)
            and doc.get("kind") == "ClusterRole"
            and "compiler" in part.split("rules:")[0]
        ):
            return list(doc["rules"])
    raise AssertionError("no compiler ClusterRole in the chart")


def allowed(group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in compiler_rules()
    )


@pytest.mark.parametrize("account", sorted(ROLES))
def test_the_compiler_holds_what_each_tenant_role_grants(account: str) -> None:
    for rule in ROLES[account]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert allowed(group, resource, verb), (account, group, resource, verb)


def test_the_compiler_may_apply_every_object_it_provisions() -> None:
    for obj in tenant_objects(TENANT, BARE):
        group = obj["apiVersion"].rpartition("/")[0]
        plural = KINDS[(obj["apiVersion"], obj["kind"])].plural
        for verb in ("get", "create", "update"):
            assert allowed(group, plural, verb), (obj["kind"], verb)
    for group, resource, verb in (
        ("argoproj.io", "workflowtemplates", "delete"),
        ("argoproj.io", "workflowtemplates", "list"),
        ("argoproj.io", "workflows", "create"),
        ("", "services/proxy", "create"),
        ("discovery.k8s.io", "endpointslices", "list"),
    ):
        assert allowed(group, resource, verb), (resource, verb)
