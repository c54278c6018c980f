"""The chart as Helm renders it: the Kubernetes it needs, admission's confinement, and the
compiler told the names the chart gives to what it binds (lint and validity: test_validity.py)."""

from __future__ import annotations

import helm_python as helm
import pytest

from compiler.tenants.provisioning import ProvisioningSpec
from shared.config import Settings
from tests.unit.chart._render import CHART, RELEASE, compiler_env, render, rendered


def test_the_chart_needs_kubernetes_with_admission_policies() -> None:
    assert helm.Chart.load(CHART).metadata["kubeVersion"] == ">=1.30.0-0"


def test_the_compiler_may_not_go_unconfined() -> None:
    with pytest.raises(helm.HelmRenderError, match=r"admission\.confine\.compiler is required"):
        render({"admission": {"confine": {"compiler": ""}}})


def test_a_deployable_left_blank_gets_no_policy() -> None:
    documents = render({"admission": {"confine": {"stagectl": ""}}})
    policies = {
        d["metadata"]["name"] for d in documents if d["kind"] == "ValidatingAdmissionPolicy"
    }
    assert policies == {f"{RELEASE}-compiler-writes"}


def test_the_compiler_learns_the_names_the_chart_gives() -> None:
    """What the compiler binds in tenant namespaces is the chart's: its roles, its account."""
    documents = rendered()
    env = compiler_env(documents)
    spec = ProvisioningSpec.from_settings(
        Settings(DATABASE_URL="postgresql://u@h/db", ARTIFACT_BUCKET="bucket", **env)
    )
    cluster_roles = {d["metadata"]["name"] for d in documents if d["kind"] == "ClusterRole"}
    for role in ("compiler", "executor", "spark", "training"):
        assert f"{spec.cluster_role_prefix}{role}" in cluster_roles
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in documents
        if d["kind"] == "ServiceAccount"
    }
    assert (spec.compiler_namespace, spec.compiler_account) in accounts
    assert spec.compiler_account == f"{RELEASE}-compiler"


def test_only_the_compiler_gets_a_tmpfs_for_git_sync_and_is_told_where_it_is() -> None:
    """The root filesystem is read-only: Git sync's fetches need a writable, bounded place."""
    deployments = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for d in rendered()
        if d["kind"] == "Deployment"
    }
    compiler = deployments.pop(f"{RELEASE}-compiler")
    workdir = Settings(DATABASE_URL="postgresql://u@h/db", **compiler_env(rendered())).GIT_WORKDIR
    [container] = compiler["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    [mount] = container["volumeMounts"]
    assert mount["mountPath"] == workdir
    [volume] = compiler["volumes"]
    assert volume["name"] == mount["name"]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "160Mi"}
    for spec in deployments.values():
        assert "volumes" not in spec


@pytest.mark.parametrize("budget", [0, "0%", "00%"])
def test_a_budget_no_drain_could_satisfy_is_refused(budget: int | str) -> None:
    """maxUnavailable 0, however written, keeps every node drain from completing."""
    values = {"deployables": {"apiserver": {"pdb": {"maxUnavailable": budget}}}}
    with pytest.raises(helm.HelmRenderError, match=r"apiserver\.pdb\.maxUnavailable 0 would keep"):
        render(values)
