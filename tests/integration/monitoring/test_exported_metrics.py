"""The chart's alerts and dashboard read only series the deployables export: each deployable is
started as its real process (``python -m <package>``, as its container runs its console
script) against real PostgreSQL, Redis, moto and a simulated cluster, and its ``/metrics`` on
HEALTH_PORT is read once it does its work (leases taken, the cluster informed on). Every series
name an alert expression or a dashboard query reads must be in those exposition texts."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from sim.ports import free_port
from sim.world import World, start_world
from tests.integration.watcher.harness import eventually
from tests.unit.chart._monitoring import series_read

ROOT = Path(__file__).resolve().parents[3]
BUCKET = "wm-metrics"
# Per family type, the series names a family exports even before its first sample (the
# exposition's TYPE line names a counter with its _total).
_SUFFIXES = {
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "counter": ("",),
    "gauge": ("",),
    "untyped": ("",),
}
_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", re.MULTILINE)


def exported_names(exposition: str) -> set[str]:
    """Every series name of a Prometheus text exposition: its samples' and, for a family with
    none yet (labels not seen), those its type implies."""
    names = set(_SAMPLE.findall(exposition))
    for family, kind in _TYPE.findall(exposition):
        names.update(family + suffix for suffix in _SUFFIXES[kind])
    return names


@dataclass
class Deployable:
    package: str
    health: str
    process: asyncio.subprocess.Process

    async def metrics(self, http: aiohttp.ClientSession) -> str:
        try:
            async with http.get(f"{self.health}/metrics") as response:
                return await response.text() if response.status == 200 else ""
        except aiohttp.ClientError:
            return ""


@pytest.fixture
async def world() -> AsyncIterator[World]:
    # The host alone: the watcher informs on it as on any registered cluster.
    world = await start_world(1, tick=0.2)
    try:
        yield world
    finally:
        await world.stop()


@pytest.fixture
async def deployables(
    world: World,
    database_url: str,
    redis_url: str,
    moto_endpoint: str,
    tmp_path: Path,
) -> AsyncIterator[dict[str, Deployable]]:
    kubeconfig = tmp_path / "host.kubeconfig"
    kubeconfig.write_text(world.host.kubeconfig)
    common = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "HOST_KUBECONFIG": str(kubeconfig),
        "KUBEOPERA_API_BASE_URL": world.registry_url,
        "KUBEOPERA_API_INTERNAL_KEY": world.registry_key,
        "API_KEY": "metrics-api-key",
        "INTERNAL_API_KEY": "metrics-internal-key",
        "ARTIFACT_BUCKET": BUCKET,
        "ARTIFACT_IAM_USER_PATH": "/workflow-manager/tenants/",
        "ARTIFACT_IAM_USER_PREFIX": "wm-",
        "S3_ENDPOINT_URL": moto_endpoint,
        "IAM_ENDPOINT_URL": moto_endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POD_NAMESPACE": "workflow-manager",
        "LEASE_DURATION": "2",
        "LEASE_RENEW_PERIOD": "0.5",
        "LOG_JSON": "true",
        "LOG_LEVEL": "info",
        "SHUTDOWN_GRACE": "5",
    }
    started: dict[str, Deployable] = {}
    compiler_port = free_port()
    try:
        for package in ("watcher", "apiserver", "compiler", "stagectl", "inference_auth"):
            health = free_port()
            http = compiler_port if package == "compiler" else free_port()
            env = {
                **common,
                "HEALTH_PORT": str(health),
                "HTTP_PORT": str(http),
                "POD_NAME": f"{package}-0",
            }
            if package == "apiserver":
                env["COMPILER_URL"] = f"http://127.0.0.1:{compiler_port}"
            with (tmp_path / f"{package}.log").open("ab") as log:
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", package, env=env, cwd=ROOT, stdout=log, stderr=log
                )
            started[package] = Deployable(package, f"http://127.0.0.1:{health}", process)
        yield started
    finally:
        for deployable in started.values():
            if deployable.process.returncode is None:
                deployable.process.send_signal(signal.SIGTERM)
        for deployable in started.values():
            try:
                await asyncio.wait_for(deployable.process.wait(), 15)
            except TimeoutError:
                deployable.process.kill()
                await deployable.process.wait()


# What "doing its work" shows in each exposition: the cluster informed on, the change log read,
# the leases taken, PostgreSQL heard.
AT_WORK: dict[str, tuple[str, ...]] = {
    "watcher": (r"^wm_watcher_clusters_watched 1\.0$",),
    "apiserver": (r"^wm_api_stream_caught_up_timestamp_seconds [1-9]",),
    "compiler": (
        r'^wm_leader\{lease="wm-compiler"\} 1\.0$',
        r'^wm_leader\{lease="wm-compiler-notify"\} 1\.0$',
        r'^wm_leader\{lease="wm-compiler-git"\} 1\.0$',
    ),
    "stagectl": (r'^wm_leader\{lease="wm-stagectl"\} 1\.0$',),
    "inference_auth": (r"^wm_inference_auth_postgresql_up 1\.0$",),
}


async def test_every_series_the_alerts_and_the_dashboard_read_is_exported(
    deployables: dict[str, Deployable], tmp_path: Path
) -> None:
    expositions: dict[str, str] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        for package, deployable in deployables.items():

            async def at_work(deployable: Deployable = deployable) -> bool:
                if deployable.process.returncode is not None:
                    log = (tmp_path / f"{deployable.package}.log").read_text()[-3000:]
                    raise AssertionError(f"{deployable.package} exited: {log}")
                text = await deployable.metrics(http)
                expositions[deployable.package] = text
                return all(
                    re.search(line, text, re.MULTILINE) for line in AT_WORK[deployable.package]
                )

            try:
                await eventually(at_work, within=60, what=f"{package} at work")
            except AssertionError:
                log = (tmp_path / f"{package}.log").read_text()[-3000:]
                seen = expositions.get(package, "")
                raise AssertionError(f"{package} did not get to work: {log}\n{seen}") from None
    exported = set().union(*(exported_names(text) for text in expositions.values()))
    missing = {
        reader: sorted(names - exported)
        for reader, names in series_read().items()
        if names - exported
    }
    assert not missing, f"read but exported by no deployable: {missing}"
    # The proof has teeth: the names do come from the expositions, not from a blanket match.
    assert "wm_inference_auth_decisions_total" in exported
    assert "wm_inference_auth_decisions" not in exported


def test_exported_names_of_families_without_samples_follow_their_type() -> None:
    exposition = (
        "# HELP a_total things\n# TYPE a_total counter\n"
        "# HELP b_seconds time\n# TYPE b_seconds histogram\n"
        '# HELP c up\n# TYPE c gauge\nc{pod="x"} 1.0\n'
    )
    assert exported_names(exposition) == {
        "a_total",
        "b_seconds_bucket",
        "b_seconds_sum",
        "b_seconds_count",
        "c",
    }
