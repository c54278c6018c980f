"""The live stream at scale: SSE clients over 2 apiserver replicas (separate processes) while
changes commit at a steady rate, as the watcher commits them (``watcher.pg_store.RunStore``).

Measures commit-to-client latency p50/p99 and, after forcing a third of the clients to
reconnect with Last-Event-ID mid-run, how many events any client missed (goal: 0). Clients
are spread over 100 tenants (each sees its tenant's changes) plus 10 administrators (see all).
Baseline: the latency of a raw PostgreSQL LISTEN connection receiving the same NOTIFYs.
Goal: p99 < 250 ms.

The clients run in several processes with a lean reader (raw asyncio protocol, HTTP/1.1
chunked decoding, only the ``id:`` and ``event:`` lines parsed, a timestamp per event), so the
figures measure the servers rather than the measuring client. Times are ``time.time()``, which
is system-wide: a commit stamped in this process compares with an arrival stamped in another.

    python bench/stream.py           # 1,000 clients, 200 changes/s, 30 s
    python bench/stream.py --quick   # 200 clients, 100 changes/s, 10 s
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import multiprocessing
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.sharedctypes import SynchronizedArray
from multiprocessing.synchronize import Event as MpEvent
from typing import Any

import aiohttp
import asyncpg
import structlog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench._common import scratch_database  # noqa: E402
from shared.db.pool import create_pool  # noqa: E402
from shared.runs import RunPhase, RunRecord, RunSource  # noqa: E402
from sim.ports import free_port  # noqa: E402
from watcher.pg_store import RunStore  # noqa: E402

KEY = "bench-key"
TENANTS = 100
ADMINS = 10
CLIENT_PROCESSES = 4
STREAM_PATH = "/api/v1/workflows/stream"


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0 < q < 1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


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


# --- the lean client (runs in the client processes) -------------------------------------------
@dataclass
class LeanClient(asyncio.Protocol):
    """One SSE connection: de-chunks the body, stamps each ``run`` event's id on arrival."""

    index: int
    tenant: str | None
    port: int
    firsts: SynchronizedArray[Any]
    lasts: SynchronizedArray[Any]
    first: int | None = None
    last: int = 0
    reconnects: int = 0
    # (seq, arrival time, arrived after a forced reconnect)
    arrivals: list[tuple[int, float, bool]] = field(default_factory=list)
    transport: asyncio.Transport | None = None
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    _head: bytes = b""
    _raw: bytes = b""
    _body: bytes = b""
    _in_body: bool = False

    def request(self) -> bytes:
        lines = [f"GET {STREAM_PATH} HTTP/1.1", f"Host: 127.0.0.1:{self.port}", f"X-API-Key: {KEY}"]
        if self.tenant is None:
            lines.append("X-Kubeopera-Admin: true")
        else:
            lines += [
                f"X-Kubeopera-Tenant: {self.tenant}",
                "X-Kubeopera-Permissions: workflows.read",
            ]
        if self.first is not None:
            lines.append(f"Last-Event-ID: {self.last}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._head = self._raw = self._body = b""
        self._in_body = False
        self.lost.clear()
        transport.write(self.request())

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.lost.set()

    def data_received(self, data: bytes) -> None:
        now = time.time()
        if not self._in_body:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return
            if not self._head.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"stream refused: {self._head[:200]!r}")
            self._in_body = True
            data, self._head = self._head[end + 4 :], b""
        raw = self._raw + data
        chunks: list[bytes] = []
        position = 0
        while True:  # HTTP/1.1 chunked transfer coding
            line_end = raw.find(b"\r\n", position)
            if line_end < 0:
                break
            size = int(raw[position:line_end].split(b";", 1)[0], 16)
            start = line_end + 2
            if len(raw) < start + size + 2:
                break
            chunks.append(raw[start : start + size])
            position = start + size + 2
        self._raw = raw[position:]
        if not chunks:
            return
        events = (self._body + b"".join(chunks)).split(b"\n\n")
        self._body = events.pop()  # an incomplete event, or b""
        after_reconnect = self.reconnects > 0
        for event in events:
            if not event.startswith(b"id: "):
                continue  # a heartbeat comment
            newline = event.find(b"\n")
            seq = int(event[4:newline])
            if event.startswith(b"event: run\n", newline + 1):
                self.arrivals.append((seq, now, after_reconnect))
                self.last = max(self.last, seq)
                self.lasts[self.index] = self.last
            elif self.first is None:  # ready
                self.first = self.last = seq
                self.firsts[self.index] = seq

    async def follow(self, loop: asyncio.AbstractEventLoop, stop: MpEvent) -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                await loop.create_connection(lambda: self, "127.0.0.1", self.port)
                await self.lost.wait()
            if stop.is_set():
                return
            self.reconnects += 1
            await asyncio.sleep(0.05)


async def _client_process(
    assigned: list[tuple[int, str | None, int]],
    firsts: SynchronizedArray[Any],
    lasts: SynchronizedArray[Any],
    reconnect: MpEvent,
    stop: MpEvent,
) -> list[tuple[int, int | None, int, list[tuple[int, float, bool]]]]:
    loop = asyncio.get_running_loop()
    clients = [LeanClient(i, tenant, port, firsts, lasts) for i, tenant, port in assigned]
    tasks = []
    for client in clients:
        tasks.append(asyncio.create_task(client.follow(loop, stop)))
        await asyncio.sleep(0.002)  # no SYN storm beyond the listen backlog
    reconnected = False
    while not stop.is_set():
        if reconnect.is_set() and not reconnected:
            reconnected = True
            for client in clients:
                if client.index % 3 == 0 and client.transport is not None:
                    client.transport.close()  # a forced reconnect
        await asyncio.sleep(0.02)
    for client in clients:
        if client.transport is not None:
            client.transport.close()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return [(c.index, c.first, c.reconnects, c.arrivals) for c in clients]


def client_process(
    assigned: list[tuple[int, str | None, int]],
    firsts: SynchronizedArray[Any],
    lasts: SynchronizedArray[Any],
    reconnect: MpEvent,
    stop: MpEvent,
    results: multiprocessing.Queue[Any],
) -> None:
    results.put(asyncio.run(_client_process(assigned, firsts, lasts, reconnect, stop)))


# --- the run -----------------------------------------------------------------------------------
async def listen_baseline(
    url: str, committed: dict[str, float], out: list[float]
) -> asyncpg.Connection:
    conn = await asyncpg.connect(url, server_settings={"search_path": "workflow_manager"})

    def heard(*args: object) -> None:
        at = committed.get(str(args[3]))
        if at is not None:
            out.append((time.time() - at) * 1000)

    await conn.add_listener("bench_baseline", heard)
    return conn


def print_timeline(samples: list[tuple[float, float]], start: float) -> None:
    """p50/p99 per second of commit time, to stderr: where in the run the slow events are."""
    by_second: dict[int, list[float]] = defaultdict(list)
    for at, ms in samples:
        by_second[int(at - start)].append(ms)
    for second in sorted(by_second):
        values = by_second[second]
        print(
            f"t={second:3d}s n={len(values):5d} p50={percentile(values, 0.5):7.1f} "
            f"p99={percentile(values, 0.99):7.1f} max={max(values):7.1f}",
            file=sys.stderr,
        )


async def main(quick: bool, processes: int, *, timeline: bool = False) -> None:
    n_clients, rate, seconds = (200, 100, 10) if quick else (1000, 200, 30)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    mp = multiprocessing.get_context("spawn")
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
        tenants = [None if i < ADMINS else f"t{i % TENANTS}" for i in range(n_clients)]
        firsts = mp.Array("q", [-1] * n_clients, lock=False)
        lasts = mp.Array("q", [0] * n_clients, lock=False)
        reconnect, stop = mp.Event(), mp.Event()
        results: multiprocessing.Queue[Any] = mp.Queue()
        workers: list[Any] = []
        committed: dict[str, float] = {}
        baseline: list[float] = []
        listener = None
        try:
            async with aiohttp.ClientSession() as session:
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
            for p in range(processes):
                assigned = [(i, tenants[i], ports[i % 2]) for i in range(p, n_clients, processes)]
                worker = mp.Process(
                    target=client_process,
                    args=(assigned, firsts, lasts, reconnect, stop, results),
                    daemon=True,
                )
                worker.start()
                workers.append(worker)
            deadline = time.time() + 60
            while min(firsts) < 0:
                if time.time() > deadline:
                    raise SystemExit(f"clients not ready: {sum(f < 0 for f in firsts)}")
                await asyncio.sleep(0.1)
            listener = await listen_baseline(url, committed, baseline)
            store = RunStore(pool)
            rng = random.Random(7)
            batch = 10
            interval = batch / rate
            started = time.perf_counter()
            started_at = time.time()
            i = 0
            while time.perf_counter() - started < seconds:
                tick = time.perf_counter()
                records = [record(i + k, f"t{rng.randrange(TENANTS)}") for k in range(batch)]
                await store.write_batch(records)
                now = time.time()
                for r in records:
                    committed[r.name] = now
                await pool.execute("SELECT pg_notify('bench_baseline', $1)", records[-1].name)
                i += batch
                if not reconnect.is_set() and time.perf_counter() - started > seconds / 2:
                    reconnect.set()
                await asyncio.sleep(max(0.0, interval - (time.perf_counter() - tick)))
            elapsed = time.perf_counter() - started
            final = int(await pool.fetchval("SELECT max(seq) FROM run_changes"))
            deadline = time.time() + 15
            while time.time() < deadline and any(lasts[a] < final for a in range(ADMINS)):
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)
            stop.set()
            reports = [
                row
                for _ in workers
                for row in await asyncio.get_running_loop().run_in_executor(None, results.get)
            ]
            rows = await pool.fetch("SELECT seq, tenant, name FROM run_changes")
        finally:
            stop.set()
            for worker in workers:
                worker.join(timeout=10)
                if worker.is_alive():
                    worker.kill()
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
    commit_of = {row["seq"]: committed[row["name"]] for row in rows}
    by_tenant: dict[str, set[int]] = defaultdict(set)
    for row in rows:
        by_tenant[row["tenant"]].add(row["seq"])
    every = set(commit_of)
    latencies: list[float] = []
    replayed: list[float] = []
    samples: list[tuple[float, float]] = []
    missed = reconnects = 0
    for index, first, client_reconnects, arrivals in reports:
        reconnects += client_reconnects
        for seq, at, after_reconnect in arrivals:
            # Events after a forced reconnect waited for it (replayed ones did): they count in
            # the "including reconnects" figure only.
            ms = (at - commit_of[seq]) * 1000
            (replayed if after_reconnect else latencies).append(ms)
            if not after_reconnect:
                samples.append((commit_of[seq], ms))
        tenant = tenants[index]
        expected = every if tenant is None else by_tenant[tenant]
        missed += len({s for s in expected if s > (first or 0)} - {a[0] for a in arrivals})
    if timeline:
        print_timeline(samples, started_at)
    listen_p99 = percentile(baseline, 0.99)
    print(f"clients: {n_clients}")
    print("replicas: 2")
    print(f"client_processes: {processes}")
    print(f"changes: {i}")
    print(f"changes_per_s: {i / elapsed:.0f}")
    print(f"deliveries: {len(latencies) + len(replayed)}")
    print(f"reconnects: {reconnects}")
    print(f"baseline_listen_p50_ms: {percentile(baseline, 0.5):.1f}")
    print(f"baseline_listen_p99_ms: {listen_p99:.1f}")
    print(f"missed_events: {missed}")
    print(f"p99_incl_reconnects_ms: {percentile(latencies + replayed, 0.99):.1f}")
    print(f"p50_ms: {percentile(latencies, 0.5):.1f}")
    print(f"ratio_p99_to_listen: {percentile(latencies, 0.99) / max(listen_p99, 0.1):.1f}")
    print(f"p99_ms: {percentile(latencies, 0.99):.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--client-processes", type=int, default=CLIENT_PROCESSES, help="processes reading streams"
    )
    parser.add_argument(
        "--timeline", action="store_true", help="p50/p99 per second of the run, to stderr"
    )
    arguments = parser.parse_args()
    asyncio.run(main(arguments.quick, arguments.client_processes, timeline=arguments.timeline))
