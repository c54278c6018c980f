"""Every alert of the chart's PrometheusRule, as Helm renders it, under ``promtool test rules``:
one file per alert in ``alerts/`` feeds it the bad series it must fire on (labels and
annotations as the on-call reads them) and the good ones it must stay quiet on. The series
names those tests feed are names the alert reads, and tests/integration/monitoring proves the
deployables export every one of them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.chart._monitoring import alerts, rule_groups
from tests.unit.chart._promql import series_names
from tests.unit.chart._render import render

ALERT_TESTS = Path(__file__).parent / "alerts"
TEST_FILES = sorted(ALERT_TESTS.glob("*.yaml"))


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    # Never skipped: a machine without it would pass without testing an alert.
    assert found, "promtool is missing: scripts/ensure-services.sh installs it (Debian prometheus)"
    return found


def run_promtool(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def promtool_test(
    promtool: str, test_file: Path, workdir: Path
) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` of ``test_file`` against the rendered rules (``rules.yaml``)."""
    (workdir / "rules.yaml").write_text(yaml.safe_dump(rule_groups()))
    shutil.copy(test_file, workdir / test_file.name)
    return run_promtool(promtool, "test", "rules", test_file.name, cwd=workdir)


def cases(test_file: Path) -> list[dict[str, Any]]:
    loaded: dict[str, Any] = yaml.safe_load(test_file.read_text())
    assert loaded["rule_files"] == ["rules.yaml"]
    tests: list[dict[str, Any]] = loaded["tests"]
    return tests


def test_the_rendered_rules_pass_promtool_check(promtool: str, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups()))
    result = run_promtool(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_every_alert_has_its_promtool_test_and_no_test_is_orphaned() -> None:
    assert sorted(alerts()) == [path.stem for path in TEST_FILES]


def test_the_rule_is_rendered_only_when_enabled_with_its_labels() -> None:
    assert not [d for d in render() if d["kind"] == "PrometheusRule"]
    documents = render(
        {"monitoring": {"prometheusRule": {"enabled": True, "labels": {"release": "kps"}}}}
    )
    (rule,) = [d for d in documents if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "kps"


def test_every_alert_says_how_bad_and_where_the_runbook_is() -> None:
    for name, rule in alerts().items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert set(rule["annotations"]) == {"summary", "description", "runbook"}, name


@pytest.mark.parametrize("test_file", TEST_FILES, ids=[path.stem for path in TEST_FILES])
def test_each_alert_fires_on_the_bad_series_and_stays_quiet_on_the_good(
    promtool: str, test_file: Path, tmp_path: Path
) -> None:
    checks = [check for case in cases(test_file) for check in case["alert_rule_test"]]
    assert {check["alertname"] for check in checks} == {test_file.stem}
    assert any(check["exp_alerts"] for check in checks), "no case where it fires"
    assert any(not check["exp_alerts"] for check in checks), "no case where it stays quiet"
    result = promtool_test(promtool, test_file, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("test_file", TEST_FILES, ids=[path.stem for path in TEST_FILES])
def test_each_alert_test_feeds_only_series_its_alert_reads(test_file: Path) -> None:
    read = series_names(alerts()[test_file.stem]["expr"])
    fed = {
        series["series"].partition("{")[0]
        for case in cases(test_file)
        for series in case["input_series"]
    }
    assert fed <= read


def test_a_failed_expectation_fails_the_test(promtool: str, tmp_path: Path) -> None:
    """What the tests above rely on: promtool exits non-zero when an alert does not do what a
    test file expects (here, one expected to fire for a lease it does not name)."""
    original = ALERT_TESTS / "WorkflowManagerLeaderMissing.yaml"
    wrong = tmp_path / "wrong" / original.name
    wrong.parent.mkdir()
    text = original.read_text()
    assert text.count("lease: wm-stagectl, severity") == 1
    wrong.write_text(text.replace("lease: wm-stagectl, severity", "lease: wm-compiler, severity"))
    result = promtool_test(promtool, wrong, tmp_path)
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def test_every_alert_has_its_runbook_line_in_the_operations_guide() -> None:
    guide = (Path(__file__).resolve().parents[3] / "docs/operations.md").read_text()
    section = guide.partition("\n## Alerts\n")[2].partition("\n## ")[0]
    lines = {
        line.split("|")[1].strip().strip("`")
        for line in section.splitlines()
        if line.startswith("| `")
    }
    assert lines == set(alerts())
