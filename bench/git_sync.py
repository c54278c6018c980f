"""Git sync benchmark: one poller pass over 2,000 Git-defined pipelines, each in its own
repository on a real Git smart-HTTP server with basic auth (``sim.git_server``: ``git
http-backend`` over HTTPS, in a process of its own), first with nothing changed, then with 1 %
of the repositories changed.

The pipelines are 10 tenants of 200: one per tenant created through the real save path (reading
its repository, rendering, linting and applying on a sim host), the others copied from it in
SQL with their own repository, as they stand after their creation. Each pass is the poller's
(``GitSync.run_pass``, 32 repositories at a time): the change check lists each branch's head
over smart HTTP; a changed one is fetched (``git``, depth 1) and saved as a new version.

Figures (STYLE.md convention, goal figure last):
- repositories, changed: the pass's size;
- unchanged_pass_s: a pass with nothing changed (no fetch);
- checks_per_s: repositories checked per second in that pass;
- poller_cpu_ms_per_check, server_cpu_ms_per_check: CPU time per repository in that pass, of
  the poller's process and of the Git server's (with its ``git http-backend`` children): what
  the poller costs, and what this machine's server costs on top (a hosted one is not ours);
- baseline_cli_checks_per_s: ``git ls-remote`` run once per repository (a process each) over an
  eighth of them, at the same concurrency, in the same run: the change check done with the CLI;
- ratio: checks_per_s / baseline_cli_checks_per_s;
- updated, failed: the changed pass's outcome (expected: changed, 0);
- changed_pass_s: the pass with 1 % changed (goal < 60 s, well inside GIT_SYNC_INTERVAL=2m).

    python bench/git_sync.py            # 2,000 repositories
    python bench/git_sync.py --quick    # 200
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402
import structlog  # noqa: E402

from bench._common import scratch_database  # noqa: E402
from compiler.pipelines.ports import Caller  # noqa: E402
from compiler.runner import assemble  # noqa: E402
from shared import labels as L  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.db.pool import create_pool  # noqa: E402
from shared.k8s import client_from_kubeconfig  # noqa: E402
from shared.k8s_objects import KubeObjects  # noqa: E402
from sim.git_server import GitServer  # noqa: E402
from sim.ports import free_port  # noqa: E402
from sim.world import start_world  # noqa: E402

TENANTS = 10
USER, PASSWORD = "bench-bot", "bench-password-0f9e8d"
PATH = "pipelines/etl.yaml"
DOCUMENT = """apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: etl}
spec:
  entrypoint: main
  arguments: {parameters: [{name: size, value: "%s"}]}
  templates:
    - name: main
      container: {image: "alpine:3.20", command: [sh, -c, "echo {{workflow.parameters.size}}"]}
"""


def start_server(root: Path, port: int, ca_file: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "sim.git_server", "--root", str(root), "--port", str(port),
         "--user", f"{USER}:{PASSWORD}", "--ca-file", str(ca_file)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert process.stdout is not None
    process.stdout.readline()  # "serving ...": listening
    return process


async def seed(pool: asyncpg.Pool, template_id: str, copies: list[tuple[str, str, str]]) -> None:
    """Copy pipeline ``template_id`` (its row, version 1 and Git source) as each
    ``(id, name, repository)`` of the same tenant, as a create would have left it."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.executemany(
            "INSERT INTO pipelines (id, tenant, kind, name, description, definition_type, "
            "current_version, latest_version, created_by) SELECT $1, tenant, kind, $2, "
            "description, definition_type, 1, 1, created_by FROM pipelines WHERE id = $3",
            [(new, name, template_id) for new, name, _ in copies],
        )
        await conn.executemany(
            "INSERT INTO pipeline_versions (pipeline_id, version, definition, parameters, "
            "settings, template_name, template, created_by, commit) SELECT $1, 1, "
            "jsonb_set(definition, '{repository}', to_jsonb($2::text)), parameters, settings, "
            "'p-' || $1 || '-v1', template, created_by, commit FROM pipeline_versions "
            "WHERE pipeline_id = $3 AND version = 1",
            [(new, repository, template_id) for new, _, repository in copies],
        )
        await conn.executemany(
            "INSERT INTO git_sources (pipeline_id, body, last_seen_commit, last_good_commit, "
            "checked_at) SELECT $1, jsonb_set(jsonb_set(body, '{definition,repository}', "
            "to_jsonb($2::text)), '{name}', to_jsonb($4::text)), last_seen_commit, "
            "last_good_commit, now() FROM git_sources WHERE pipeline_id = $3",
            [(new, repository, template_id, name) for new, name, repository in copies],
        )


async def cli_checks_per_s(urls: list[str], ca_file: Path, concurrency: int) -> float:
    """``git ls-remote`` once per URL, ``concurrency`` at a time: checks per second."""
    pair = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    env = {
        "PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir(), "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "http.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {pair}",
        "GIT_CONFIG_KEY_1": "http.sslCAInfo", "GIT_CONFIG_VALUE_1": str(ca_file),
    }  # fmt: skip
    gate = asyncio.Semaphore(concurrency)

    async def one(url: str) -> None:
        async with gate:
            process = await asyncio.create_subprocess_exec(
                "git", "ls-remote", url, "refs/heads/main", env=env,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            assert await process.wait() == 0

    started = time.perf_counter()
    await asyncio.gather(*(one(url) for url in urls))
    return len(urls) / (time.perf_counter() - started)


async def main(quick: bool) -> dict[str, Any]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    repositories = 200 if quick else 2000
    changed = max(repositories // 100, 1)
    figures: dict[str, Any] = {"repositories": repositories, "changed": changed}
    with tempfile.TemporaryDirectory(prefix="wm-bench-git-") as scratch:
        root = Path(scratch) / "repositories"
        root.mkdir()
        repos = GitServer(root, {})
        repos.create("r00000", {PATH: DOCUMENT % "0"})
        names = [f"r{index:05d}" for index in range(repositories)]
        for name in names[1:]:
            repos.copy("r00000", name)
        port, ca_file = free_port(), Path(scratch) / "ca.pem"
        server = start_server(root, port, ca_file)
        base = f"https://127.0.0.1:{port}"
        world = await start_world(1, tick=0.05, autostart=False, pod_gc_delay=0)
        kube = await client_from_kubeconfig(world.host.kubeconfig)
        try:
            async with scratch_database("wm_bench_git") as url:
                settings = Settings(
                    DATABASE_URL=url,
                    INTERNAL_API_KEY="bench",
                    ARTIFACT_BUCKET="artifacts",
                    GIT_CA_BUNDLE=str(ca_file),
                    GIT_ALLOW_REMOTES=[f"127.0.0.1:{port}"],  # its one server, no range
                    GIT_WORKDIR=scratch,
                )
                pool = await create_pool(settings, application_name="bench-git")
                try:
                    parts = assemble(settings, pool=pool, host_api=kube, storage=None)
                    objects = KubeObjects(kube)
                    per_tenant = repositories // TENANTS
                    for t in range(TENANTS):
                        tenant = f"tenant-{t:02d}"
                        await parts.tenants.ensure(tenant)
                        await objects.apply(credentials(tenant))
                        mine = names[t * per_tenant : (t + 1) * per_tenant]
                        saved = await parts.service.create(
                            Caller(tenant, "bench@acme"),
                            "data",
                            body(mine[0], f"{base}/{mine[0]}.git"),
                        )
                        copies = [
                            (f"{saved['id'][:10]}{i:06d}", name, f"{base}/{name}.git")
                            for i, name in enumerate(mine[1:], start=1)
                        ]
                        await seed(pool, saved["id"], copies)

                    await parts.git.run_pass()  # warm: connections, secrets, the first check
                    poller, served = cpu_seconds(), cpu_seconds(server.pid)
                    result = await parts.git.run_pass()
                    poller, served = cpu_seconds() - poller, cpu_seconds(server.pid) - served
                    assert (result.checked, result.unchanged) == (repositories, repositories)
                    figures["unchanged_pass_s"] = round(result.seconds, 2)
                    figures["checks_per_s"] = round(repositories / result.seconds)
                    figures["poller_cpu_ms_per_check"] = round(1000 * poller / repositories, 2)
                    figures["server_cpu_ms_per_check"] = round(1000 * served / repositories, 2)
                    sample = [f"{base}/{name}.git" for name in names[: repositories // 8]]
                    cli = await cli_checks_per_s(sample, ca_file, settings.GIT_SYNC_CONCURRENCY)
                    figures["baseline_cli_checks_per_s"] = round(cli)
                    figures["ratio"] = round(figures["checks_per_s"] / cli, 2)

                    step = repositories // changed
                    for name in names[::step][:changed]:
                        repos.commit(name, {PATH: DOCUMENT % "1"})
                    result = await parts.git.run_pass()
                    figures["updated"] = result.updated
                    figures["failed"] = result.failed
                    figures["changed_pass_s"] = round(result.seconds, 2)
                finally:
                    await pool.close()
        finally:
            await kube.close()
            await world.stop()
            server.terminate()
            server.wait()
    return figures


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time of this process, or of process ``pid`` and the children it waited for."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def credentials(tenant: str) -> dict[str, Any]:
    encode = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "git-creds",
            "namespace": f"{L.DATA_NAMESPACE_PREFIX}{tenant}",
            "labels": {L.DATA_SECRET: L.DATA_SECRET_VALUE},
        },
        "data": {"username": encode(USER), "password": encode(PASSWORD)},
    }


def body(name: str, repository: str) -> dict[str, Any]:
    return {
        "name": name,
        "definition": {
            "type": "git",
            "repository": repository,
            "path": PATH,
            "credentials_secret": "git-creds",
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 repositories")
    figures = asyncio.run(main(parser.parse_args().quick))
    for name, value in figures.items():
        print(f"{name}: {value}")
