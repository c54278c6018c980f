"""Notification benchmark: does the compiler's sender keep up with the watcher?

Figures (STYLE.md convention, goal figure last):
- baseline_finishes_per_s: finished runs of a pipeline with two channels (Slack, PagerDuty)
  committed by the watcher's own writer (``RunStore.write_batch``, batches of 500): the rate
  at which finishes can arrive;
- enqueue_finishes_per_s: the same finishes read from the change log by the sender's
  ``enqueue_pending`` (cursor, render, one delivery per channel, cursor moved, batches of 50);
- deliveries_per_s: deliveries sent to the local receivers (``deliver_due``: secret read from
  the emulator, attempt recorded, POST, outcome and audit recorded; 8 at a time);
- ratio: enqueue_finishes_per_s / baseline_finishes_per_s (goal ≥ 0.25). Per finish the sender
  renders two messages and inserts two rows where the writer upserts one, so it cannot match the
  writer's peak; a quarter of it is thousands of finishes a second, far above what any
  installation's runs finish at, so the sender's lag stays near zero.

`--quick` uses 1,000 runs (500 delivered) instead of 5,000 (1,000 delivered).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import scratch_database

CHANNELS = [
    {"name": "ops-slack", "type": "slack", "secret": "slack-hook", "on": "always"},
    {"name": "pager", "type": "pagerduty", "secret": "pagerduty"},
]


async def run(runs: int, delivered: int) -> dict[str, float]:
    from compiler.notifications.http_senders import open_session
    from compiler.notifications.service import NotificationSender, SenderConfig
    from shared.db.pipelines import PipelineStore
    from shared.db.pool import create_pool
    from shared.k8s import client_from_kubeconfig
    from shared.k8s_objects import KubeObjects
    from shared.pipelines import parse_body
    from sim.kube.server import start_cluster
    from sim.receivers import Receivers
    from tests.integration.compiler.notify_helpers import data_secret, run_record
    from watcher.pg_store import RunStore

    figures: dict[str, float] = {}
    async with scratch_database("wm_bench_notify") as url, Receivers() as receivers:
        pool = await create_pool(url, min_size=2, max_size=12)
        cluster = await start_cluster("host")
        api = await client_from_kubeconfig(cluster.kubeconfig)
        try:
            namespaces = cluster.store.resolve("", "v1", "namespaces")
            cluster.store.create(namespaces, None, {"metadata": {"name": "kubeopera-data-acme"}})
            data_secret(cluster.store, "acme", "slack-hook", {"url": receivers.slack_url("T/B/x")})
            data_secret(cluster.store, "acme", "pagerduty", {"routing_key": "R" * 32})
            await pool.execute("INSERT INTO tenants (id) VALUES ('acme')")
            await pool.execute(
                "INSERT INTO clusters (id, name, is_host, registered) VALUES ('h', 'h', true, true)"
            )
            body = parse_body(
                {
                    "name": "b",
                    "definition": {"type": "yaml", "template": "t"},
                    "notifications": CHANNELS,
                }
            )
            async with PipelineStore.transaction(pool) as store:
                await store.insert_pipeline(
                    pipeline_id="p1",
                    tenant="acme",
                    kind="data",
                    name="nightly",
                    description="",
                    definition_type="yaml",
                    actor="bench",
                )
                await store.insert_version(
                    pipeline_id="p1",
                    version=1,
                    definition={},
                    parameters=[],
                    settings=body.settings(),
                    stages=[],
                    template_name="p-p1-v1",
                    template={},
                    actor="bench",
                )
            records = [run_record(cluster_id="h", pipeline_id="p1", version=1) for _ in range(runs)]

            writer = RunStore(pool)
            started = time.perf_counter()
            for start in range(0, runs, 500):
                await writer.write_batch(records[start : start + 500])
            figures["baseline_finishes_per_s"] = runs / (time.perf_counter() - started)

            sender = NotificationSender(
                pool=pool,
                objects=KubeObjects(api),
                config=SenderConfig(
                    ui_url="https://ui.example",
                    pagerduty_url=receivers.pagerduty_url,
                    slack_prefixes=(f"{receivers.url}/slack/",),
                    retention_days=90,
                ),
                listen_dsn=url,
            )
            started = time.perf_counter()
            enqueued = await sender.enqueue_pending()
            figures["enqueue_finishes_per_s"] = runs / (time.perf_counter() - started)
            assert enqueued == 2 * runs, enqueued

            # Deliver only the first ``delivered`` runs' deliveries: push the rest out of reach.
            await pool.execute(
                "UPDATE notification_deliveries SET next_attempt_at = now() + interval '1 day' "
                "WHERE id > $1",
                2 * delivered,
            )
            async with open_session() as http:
                started = time.perf_counter()
                sent = await sender.deliver_due(http)
                figures["deliveries_per_s"] = sent / (time.perf_counter() - started)
            assert sent == 2 * delivered, sent
            assert len(receivers.requests) == sent
        finally:
            await api.close()
            await cluster.stop()
            await pool.close()
    figures["ratio"] = figures["enqueue_finishes_per_s"] / figures["baseline_finishes_per_s"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (< 1 minute)")
    args = parser.parse_args()
    runs, delivered = (1000, 500) if args.quick else (5000, 1000)
    figures = asyncio.run(run(runs, delivered))
    for name in ("baseline_finishes_per_s", "enqueue_finishes_per_s", "deliveries_per_s", "ratio"):
        print(f"{name}: {figures[name]:.2f}")


if __name__ == "__main__":
    main()
