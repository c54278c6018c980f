"""Settings: the spec's defaults, validation, and one-line errors naming the variable."""

from __future__ import annotations

import pytest

from shared.config import Settings, load_settings, parse_duration, settings_or_exit
from shared.errors import ConfigError

DB = "postgresql://postgres@127.0.0.1:5432/wm"
PRIVATE_RANGES_LIST = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in Settings.model_fields:
        monkeypatch.delenv(name, raising=False)


def test_spec_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", DB)
    settings = load_settings()
    assert settings.HTTP_PORT == 8120
    assert settings.RUN_RETENTION_DAYS == 90
    assert settings.AWS_REGION == "eu-north-1"
    assert (settings.DATA_NS_QUOTA_CPU, settings.DATA_NS_QUOTA_MEMORY) == ("8", "16Gi")
    assert settings.DATA_NS_QUOTA_PODS == 50
    assert (settings.DATA_MAX_CPU, settings.DATA_MAX_MEMORY) == ("4", "8Gi")
    assert settings.DATA_EGRESS_PORTS == [443]
    assert settings.DATA_EGRESS_EXCEPT_CIDRS == ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
    assert settings.EVENTS_NAMESPACE == "kubeopera-pipeline-events"
    assert settings.GIT_SYNC_INTERVAL == 120.0
    assert (settings.ML_MAX_GPU, settings.ML_NS_QUOTA_GPU, settings.ML_SERVE_QUOTA_GPU) == (0, 0, 0)
    assert (settings.ML_SERVE_QUOTA_CPU, settings.ML_SERVE_QUOTA_MEMORY) == ("8", "16Gi")
    assert settings.API_KEY is None  # then every request is refused
    assert settings.ARGO_DATA_INSTANCE_ID == "kubeopera-data"


def test_values_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", DB)
    monkeypatch.setenv("DATA_EGRESS_PORTS", "443, 8443")
    monkeypatch.setenv("GIT_SYNC_INTERVAL", "90s")
    monkeypatch.setenv("API_KEY", "s3cret")
    settings = load_settings()
    assert settings.DATA_EGRESS_PORTS == [443, 8443]
    assert settings.GIT_SYNC_INTERVAL == 90.0
    assert settings.GIT_DENY_CIDRS == PRIVATE_RANGES_LIST
    assert settings.GIT_ALLOW_REMOTES == []
    assert settings.API_KEY is not None
    assert settings.API_KEY.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATA_NS_QUOTA_PODS", "many"),
        ("HTTP_PORT", "70000"),
        ("GIT_SYNC_INTERVAL", "soon"),
        ("RUN_RETENTION_DAYS", "0"),
        ("LOG_LEVEL", "chatty"),
        ("DATA_EGRESS_PORTS", "443,https"),
        ("DATABASE_URL", "mysql://x"),
        ("ARGO_DATA_INSTANCE_ID", "data controller"),
        ("ARGO_DATA_INSTANCE_ID", "x" * 64),
        ("GIT_DENY_CIDRS", "10.0.0.0/8,10.0.0.0/33"),
        ("GIT_ALLOW_REMOTES", "git.internal"),
        ("GIT_ALLOW_REMOTES", "git.internal:0"),
        ("GIT_ALLOW_REMOTES", "git.internal:443,[not-v6]:443"),
        ("GIT_ALLOW_REMOTES", "[fd00::zz]:443"),
        ("GIT_FETCH_CONCURRENCY", "0"),
        ("DATA_SECRETS_MAX_PER_TENANT", "0"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv("DATABASE_URL", DB)
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert error.value.message.startswith(name)
    assert "\n" not in error.value.message


def test_git_remotes_are_read_as_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", DB)
    monkeypatch.setenv("GIT_DENY_CIDRS", "100.64.0.0/10, fd00::/8")
    monkeypatch.setenv("GIT_ALLOW_REMOTES", "git.internal:443, [fd00::7]:8443")
    settings = load_settings()
    assert settings.GIT_DENY_CIDRS == ["100.64.0.0/10", "fd00::/8"]
    assert settings.GIT_ALLOW_REMOTES == ["git.internal:443", "[fd00::7]:8443"]


def test_missing_database_url_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^DATABASE_URL"):
        load_settings()


def test_settings_or_exit_prints_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        settings_or_exit()
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("configuration error: DATABASE_URL")


def test_require_names_what_a_deployable_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", DB)
    with pytest.raises(ConfigError, match="ARTIFACT_BUCKET, MLFLOW_URL: required"):
        load_settings().require("ARTIFACT_BUCKET", "MLFLOW_URL")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2m", 120.0), ("90s", 90.0), ("1.5h", 5400.0), ("1d", 86400.0), ("250ms", 0.25), (30, 30.0)],
)
def test_parse_duration(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "-1m", "2 weeks", "m"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)
