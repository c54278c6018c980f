"""`make demo`: the whole system on one machine, on embedded defaults.

Starts two simulated clusters with Argo and a stream of sample runs (`python -m sim`), creates
a demo database, starts every deployable as its own process, then prints what happens: each run
change as the watcher commits it (the same `NOTIFY runs` feed the apiserver's live stream
serves), and a summary every 15 seconds. Ctrl-C stops everything. Logs: .run/demo/*.log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".run" / "demo"
ADMIN_DSN = os.environ.get("WM_DEMO_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
DATABASE = os.environ.get("WM_DEMO_DATABASE", "workflow_manager_demo")
API_KEY = "demo-api-key"
# deployable → (HTTP port, health port)
DEPLOYABLES = {
    "watcher": (None, 8131),
    "apiserver": (8120, 8121),
    "compiler": (8122, 8132),
    "stagectl": (None, 8133),
    "inference_auth": (8124, 8134),
}


def log(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


async def ensure_database() -> str:
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE):
            await admin.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await admin.close()
    return ADMIN_DSN.rpartition("/")[0] + "/" + DATABASE


def start(name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    logfile = (STATE / f"{name}.log").open("ab")
    return subprocess.Popen(command, env=env, stdout=logfile, stderr=subprocess.STDOUT, cwd=ROOT)


async def wait_for_world(sim: subprocess.Popen[bytes]) -> dict[str, object]:
    world_file = STATE / "world.json"
    deadline = time.monotonic() + 60
    while not world_file.exists():
        if sim.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the simulated clusters did not start: see .run/demo/sim.log")
        await asyncio.sleep(0.2)
    world: dict[str, object] = json.loads(world_file.read_text())
    return world


async def feed(url: str) -> None:
    """Print each committed run change, and a summary every 15 s."""
    conn = await asyncpg.connect(url, server_settings={"search_path": "workflow_manager"})
    woke = asyncio.Event()
    await conn.add_listener("runs", lambda *_: woke.set())
    last = await conn.fetchval("SELECT coalesce(max(seq), 0) FROM run_changes")
    shown: dict[tuple[str, str, str], tuple[str, str]] = {}  # what was last printed per run
    next_summary = time.monotonic() + 15
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woke.wait(), timeout=1.0)
        woke.clear()
        rows = await conn.fetch(
            """
            SELECT c.seq, c.kind, c.phase, c.namespace, c.name, cl.name AS cluster,
                   r.progress_done, r.progress_total
            FROM run_changes c JOIN runs r ON r.id = c.run_id
            LEFT JOIN clusters cl ON cl.id = c.cluster_id
            WHERE c.seq > $1 ORDER BY c.seq LIMIT 200
            """,
            last,
        )
        for row in rows:
            last = row["seq"]
            progress = (
                f"{row['progress_done']}/{row['progress_total']}" if row["progress_total"] else "-"
            )
            run = (str(row["cluster"]), row["namespace"], row["name"])
            if row["kind"] != "deleted" and shown.get(run) == (row["phase"], progress):
                continue  # several commits between two looks: print the state once
            shown[run] = (row["phase"], progress)
            gone = "  (deleted from its cluster, history kept)" if row["kind"] == "deleted" else ""
            print(
                f"  #{row['seq']:<6} {row['cluster']:<10} {row['namespace']:<24} "
                f"{row['name']:<34} {row['phase']:<10} {progress}{gone}",
                flush=True,
            )
        if time.monotonic() > next_summary:
            next_summary = time.monotonic() + 15
            counts = await conn.fetch(
                "SELECT cl.name AS cluster, r.phase, count(*) AS n FROM runs r "
                "JOIN clusters cl ON cl.id = r.cluster_id GROUP BY 1, 2 ORDER BY 1, 2"
            )
            summary = ", ".join(f"{r['cluster']}/{r['phase']}={r['n']}" for r in counts)
            log(f"runs in PostgreSQL: {summary}")


async def main() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    for stale in STATE.glob("*.json"):
        stale.unlink()
    url = await ensure_database()
    sys.path.insert(0, str(ROOT))
    from shared.db.migrations import apply_migrations

    await apply_migrations(url)  # the deployables would too; the feed below needs the tables
    python = sys.executable
    processes: dict[str, subprocess.Popen[bytes]] = {}
    processes["sim"] = start(
        "sim",
        [
            python,
            "-m",
            "sim",
            "--clusters",
            "2",
            "--state-dir",
            str(STATE),
            "--load",
            "0.3",
            "--tick",
            "0.5",
            "--pod-gc-delay",
            "20",
        ],
        dict(os.environ),
    )
    try:
        world = await wait_for_world(processes["sim"])
        clusters = world["clusters"]
        registry = world["registry"]
        assert isinstance(clusters, list)
        assert isinstance(registry, dict)
        host = next(c for c in clusters if c["host"])
        base_env = {
            **os.environ,
            "DATABASE_URL": url,
            "API_KEY": API_KEY,
            "INTERNAL_API_KEY": "demo-internal-key",
            "HOST_KUBECONFIG": host["kubeconfig"],
            "KUBEOPERA_API_BASE_URL": registry["url"],
            "KUBEOPERA_API_INTERNAL_KEY": registry["key"],
            "COMPILER_URL": "http://127.0.0.1:8122",
            "LOG_JSON": "false",
            "POD_NAME": "demo",
        }
        for name, (http_port, health_port) in DEPLOYABLES.items():
            env = {**base_env, "HEALTH_PORT": str(health_port)}
            if http_port:
                env["HTTP_PORT"] = str(http_port)
            processes[name] = start(name, [python, "-m", name], env)
        log("started: 2 simulated clusters with Argo (host + cluster-1), the cluster registry,")
        log("         and " + ", ".join(DEPLOYABLES) + " (logs in .run/demo/)")
        for c in clusters:
            log(f"cluster {c['name']:<10} {c['url']}  kubeconfig {c['kubeconfig']}")
        log(
            "health and metrics: "
            + ", ".join(f"{n} http://127.0.0.1:{p}/metrics" for n, (_, p) in DEPLOYABLES.items())
        )
        log(
            f"API: curl -H 'X-API-Key: {API_KEY}' -H 'X-Kubeopera-Admin: true' "
            "http://127.0.0.1:8120/api/v1/workflows"
        )
        log("live run changes as the watcher commits them (Ctrl-C to stop):")
        feed_task = asyncio.create_task(feed(url))
        while True:
            await asyncio.sleep(1)
            for name, process in processes.items():
                if process.poll() is not None:
                    log(f"{name} exited with {process.returncode}: see .run/demo/{name}.log")
                    raise SystemExit(1)
            if feed_task.done():
                feed_task.result()
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
        log("stopped")


async def run_until_signal() -> None:
    task = asyncio.ensure_future(main())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


if __name__ == "__main__":
    asyncio.run(run_until_signal())
