"""The live stream at scale: SSE clients over 2 apiserver replicas (separate processes) while
changes commit at a steady rate, as the watcher commits them (``watcher.pg_store.RunStore``).

Measures commit-to-client latency p50/p99 and, after forcing a third of the clients to
reconnect with Last-Event-ID mid-run, how many events any client missed (goal: 0). Clients
are spread over 100 tenants (each sees its tenant's changes) plus 10 administrators (see all).
Baseline: the latency of a raw PostgreSQL LISTEN connection receiving the same NOTIFYs.
Goal: p99 < 250 ms.

    python bench/stream.py           # 1,000 clients, 200 changes/s, 30 s
    python bench/stream.py --quick   # 200 clients, 100 changes/s, 10 s
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import socket
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
import asyncpg
import structlog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench._common import scratch_database  # noqa: E402
from shared.db.pool import create_pool  # noqa: E402
from shared.runs import RunPhase, RunRecord, RunSource  # noqa: E402
from watcher.pg_store import RunStore  # noqa: E402

KEY = "bench-key"
TENANTS = 100
ADMINS = 10


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0 < q < 1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def record(i: int, tenant: str) -> RunRecord:
    now = datetime.now(UTC)
    return RunRecord(
        cluster_id="c1",
        cluster_name="c1",
        region="eu",
        provider="aws",
        namespace=f"kubeopera-data-{tenant}",
        name=f"run-{i}",
        uid=f"uid-{i}",
        resource_version=1,
        tenant=tenant,
        source=RunSource.PIPELINE,
        phase=RunPhase.RUNNING,
        message=None,
        progress_done=0,
        progress_total=1,
        created_at=now,
        started_at=now,
        finished_at=None,
        duration_seconds=None,
        estimated_duration_seconds=None,
        parameters={},
        resources_duration={},
        template="etl",
        pipeline_id=None,
        pipeline_version=None,
        cron_workflow=None,
        labels={},
        graph={},
        graph_truncated=False,
        node_count=0,
    )


@dataclass
class Client:
    tenant: str | None
    port: int
    seen: set[int] = field(default_factory=set)
    first: int | None = None
    last: int = 0
    response: aiohttp.ClientResponse | None = None
    reconnects: int = 0

    def headers(self) -> dict[str, str]:
        if self.tenant is None:
            values = {"X-API-Key": KEY, "X-Kubeopera-Admin": "true"}
        else:
            values = {
                "X-API-Key": KEY,
                "X-Kubeopera-Tenant": self.tenant,
                "X-Kubeopera-Permissions": "workflows.read",
            }
        if self.first is not None:
            values["Last-Event-ID"] = str(self.last)
        return values

    async def run(
        self,
        session: aiohttp.ClientSession,
        committed: dict[str, float],
        latencies: list[float],
        replayed: list[float],
        ready: asyncio.Event,
    ) -> None:
        while True:
            try:
                async with session.get(
                    f"http://127.0.0.1:{self.port}/api/v1/workflows/stream", headers=self.headers()
                ) as response:
                    self.response = response
                    event, data, event_id = "", "", None
                    async for raw in response.content:
                        line = raw.decode().rstrip("\n")
                        if line.startswith("id: "):
                            event_id = int(line[4:])
                        elif line.startswith("event: "):
                            event = line[7:]
                        elif line.startswith("data: "):
                            data = line[6:]
                        elif not line and event:
                            if event == "ready" and self.first is None:
                                self.first = self.last = event_id or 0
                                ready.set()
                            elif event == "run" and event_id is not None:
                                self.seen.add(event_id)
                                self.last = max(self.last, event_id)
                                name = json.loads(data)["name"]
                                at = committed.get(name)
                                if at is not None:
                                    ms = (time.perf_counter() - at) * 1000
                                    # Events replayed after a forced reconnect waited for it:
                                    # they count in the "including reconnects" figure only.
                                    (latencies if self.reconnects == 0 else replayed).append(ms)
                            event, data, event_id = "", "", None
            except (aiohttp.ClientError, ConnectionError):
                pass
            self.reconnects += 1
            await asyncio.sleep(0.05)


async def listen_baseline(
    url: str, committed: dict[str, float], out: list[float]
) -> asyncpg.Connection:
    conn = await asyncpg.connect(url, server_settings={"search_path": "workflow_manager"})

    def heard(*args: object) -> None:
        name = str(args[3])
        at = committed.get(name)
        if at is not None:
            out.append((time.perf_counter() - at) * 1000)

    await conn.add_listener("bench_baseline", heard)
    return conn


async def main(quick: bool) -> None:
    n_clients, rate, seconds = (200, 100, 10) if quick else (1000, 200, 30)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    async with scratch_database("wm_bench_stream") as url:
        pool = await create_pool(url, min_size=2, max_size=4)
        await pool.execute("INSERT INTO clusters (id, name, registered) VALUES ('c1', 'c1', true)")
        ports = [free_port(), free_port()]
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "API_KEY": KEY,
            "LOG_LEVEL": "warning",
            "HEALTH_PORT": "0",
            "LOG_JSON": "true",
            "PYTHONPATH": ROOT,
        }
        replicas = [
            subprocess.Popen(
                [sys.executable, "-m", "apiserver"],
                env={**env, "HTTP_PORT": str(port)},
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for port in ports
        ]
        committed: dict[str, float] = {}
        latencies: list[float] = []
        replayed: list[float] = []
        baseline: list[float] = []
        tasks: list[asyncio.Task[None]] = []
        listener = None
        try:
            async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
            ) as session:
                for _ in range(100):  # replicas up
                    try:
                        for port in ports:
                            async with session.get(
                                f"http://127.0.0.1:{port}/api/v1/openapi.json",
                                headers={"X-API-Key": KEY},
                            ) as r:
                                assert r.status == 200
                        break
                    except (aiohttp.ClientError, AssertionError):
                        await asyncio.sleep(0.2)
                clients = [
                    Client(None if i < ADMINS else f"t{i % TENANTS}", ports[i % 2])
                    for i in range(n_clients)
                ]
                readies = [asyncio.Event() for _ in clients]
                tasks = [
                    asyncio.create_task(c.run(session, committed, latencies, replayed, r))
                    for c, r in zip(clients, readies, strict=True)
                ]
                await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
                listener = await listen_baseline(url, committed, baseline)
                store = RunStore(pool)
                rng = random.Random(7)
                batch = 10
                interval = batch / rate
                started = time.perf_counter()
                i = 0
                reconnected = False
                while time.perf_counter() - started < seconds:
                    tick = time.perf_counter()
                    records = [record(i + k, f"t{rng.randrange(TENANTS)}") for k in range(batch)]
                    await store.write_batch(records)
                    now = time.perf_counter()
                    for r in records:
                        committed[r.name] = now
                    await pool.execute("SELECT pg_notify('bench_baseline', $1)", records[-1].name)
                    i += batch
                    if not reconnected and now - started > seconds / 2:
                        reconnected = True
                        for client in clients[::3]:  # forced reconnects
                            if client.response is not None:
                                client.response.close()
                    await asyncio.sleep(max(0.0, interval - (time.perf_counter() - tick)))
                elapsed = time.perf_counter() - started
                final = int(await pool.fetchval("SELECT max(seq) FROM run_changes"))
                deadline = time.perf_counter() + 15
                while time.perf_counter() < deadline and any(
                    c.last < final for c in clients if c.tenant is None
                ):
                    await asyncio.sleep(0.2)
                await asyncio.sleep(1.0)
                rows = await pool.fetch("SELECT seq, tenant FROM run_changes")
                by_tenant: dict[str, set[int]] = defaultdict(set)
                for row in rows:
                    by_tenant[row["tenant"]].add(row["seq"])
                every = {row["seq"] for row in rows}
                missed = 0
                for client in clients:
                    expected = every if client.tenant is None else by_tenant[client.tenant]
                    expected = {s for s in expected if s > (client.first or 0)}
                    missed += len(expected - client.seen)
                print(f"clients: {n_clients}")
                print("replicas: 2")
                print(f"changes: {i}")
                print(f"changes_per_s: {i / elapsed:.0f}")
                print(f"deliveries: {len(latencies)}")
                print(f"reconnects: {sum(c.reconnects for c in clients)}")
                print(f"baseline_listen_p99_ms: {percentile(baseline, 0.99):.1f}")
                print(f"missed_events: {missed}")
                print(f"p99_incl_reconnects_ms: {percentile(latencies + replayed, 0.99):.1f}")
                print(f"p50_ms: {percentile(latencies, 0.5):.1f}")
                print(
                    f"ratio_p99_to_listen: "
                    f"{percentile(latencies, 0.99) / max(percentile(baseline, 0.99), 0.1):.1f}"
                )
                print(f"p99_ms: {percentile(latencies, 0.99):.1f}")
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if listener is not None:
                await listener.close()
            for process in replicas:
                process.terminate()
            for process in replicas:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
            await pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main(parser.parse_args().quick))
