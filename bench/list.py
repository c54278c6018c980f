"""GET /workflows at scale: 1,000,000 run rows across 50 clusters and 200 tenants.

Measures p50/p95 over typical filter mixes (tenant and administrator lists, phase, cluster,
template, free text, time range, a second page), each answer with its total. Baseline: the
same HTTP stack answering ``GET /workflow-clusters`` (a one-row-per-cluster read), so the ratio
shows what the run query itself costs. Goal: p95 < 50 ms.

    python bench/list.py            # 1,000,000 rows
    python bench/list.py --quick    # 100,000 rows, under a minute
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from typing import Any

import aiohttp
import structlog

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from apiserver.app import create_app
from apiserver.clusters.connections import ConnectionCache
from apiserver.runner import serving
from apiserver.runs.pg_runs import RunReader
from apiserver.services import Services
from apiserver.stream.hub import StreamHub
from apiserver.stream.pg_changes import PgChangeSource
from bench._common import scratch_database
from shared.db.pool import create_pool

KEY = "bench-key"
CLUSTERS, TENANTS, TEMPLATES = 50, 200, 40

FILL_SQL = f"""
INSERT INTO runs (cluster_id, namespace, name, uid, resource_version, region, provider, tenant,
                  source, phase, created_at, started_at, finished_at, template, pipeline_id,
                  parameters)
SELECT 'cluster-' || (i % {CLUSTERS}),
       CASE WHEN i % 10 = 0 THEN 'argo' ELSE 'kubeopera-data-t' || (i % {TENANTS}) END,
       'run-' || i, 'uid-' || i, 1,
       (ARRAY['eu-west-1','us-east-1','ap-southeast-1','eu-central-1'])[1 + i % 4],
       (ARRAY['aws','gcp','azure'])[1 + i % 3],
       CASE WHEN i % 10 = 0 THEN NULL ELSE 't' || (i % {TENANTS}) END,
       (ARRAY['pipeline','ml_pipeline','schedule','event_trigger','template_submit','cicd',
              'manual'])[1 + i % 7],
       (ARRAY['Succeeded','Succeeded','Succeeded','Succeeded','Failed','Running','Pending',
              'Error'])[1 + (i / 7) % 8],
       ts - interval '5 seconds', ts, ts + interval '10 minutes',
       'template-' || (i % {TEMPLATES}),
       CASE WHEN i % 3 = 0 THEN 'pipeline-' || (i % 500) END,
       jsonb_build_object('date', '2025-01-01')
FROM (SELECT i, now() - (i * interval '7 seconds') AS ts FROM generate_series($1::int, $2::int) i) s
"""


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0 < q < 1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


MIXES: dict[str, tuple[dict[str, str], dict[str, str]]] = {}


def _mixes() -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    tenant = {
        "X-API-Key": KEY,
        "X-Kubeopera-Tenant": "t7",
        "X-Kubeopera-Permissions": "workflows.read",
    }
    admin = {"X-API-Key": KEY, "X-Kubeopera-Admin": "true"}
    return {
        "tenant_all": (tenant, {}),
        "tenant_failed": (tenant, {"phase": "Failed,Error"}),
        "tenant_text": (tenant, {"q": "run-12"}),
        "tenant_template_week": (
            tenant,
            {"template": "template-7", "started_after": "2000-01-01T00:00:00Z"},
        ),
        "admin_all": (admin, {}),
        "admin_cluster_running": (admin, {"cluster": "cluster-3", "phase": "Running"}),
        "admin_failed": (admin, {"phase": "Failed"}),
        "admin_template": (admin, {"template": "template-11"}),
        "admin_text": (admin, {"q": "run-4242"}),
        "admin_region_provider": (admin, {"region": "eu-west-1", "provider": "aws"}),
        "admin_acting": (admin, {"acting_tenant": "t42", "source": "ml_pipeline"}),
    }


async def timed(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], params: dict[str, str]
) -> tuple[float, Any]:
    started = time.perf_counter()
    async with session.get(url, headers=headers, params=params) as response:
        body = await response.json()
        assert response.status == 200, body
    return (time.perf_counter() - started) * 1000, body


async def main(quick: bool) -> None:
    rows = 100_000 if quick else 1_000_000
    repeats = 15 if quick else 40
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    async with scratch_database("wm_bench_list") as url:
        pool = await create_pool(url, min_size=4, max_size=12)
        try:
            started = time.perf_counter()
            await pool.execute(
                "INSERT INTO clusters (id, name, region, provider, registered) "
                "SELECT 'cluster-' || i, 'cluster-' || i, 'eu-west-1', 'aws', true "
                f"FROM generate_series(0, {CLUSTERS - 1}) i"
            )
            step = 100_000
            await asyncio.gather(
                *[
                    pool.execute(FILL_SQL, lo, min(lo + step - 1, rows))
                    for lo in range(1, rows + 1, step)
                ]
            )
            await pool.execute(
                "INSERT INTO access_grants (tenant, cluster_id, namespace, granted_by) VALUES "
                "('t7', 'cluster-3', 'argo', 'bench'), ('t7', 'cluster-9', 'argo', 'bench')"
            )
            await pool.execute("VACUUM ANALYZE runs")
            print(f"rows: {rows}")
            print(f"fill_s: {time.perf_counter() - started:.1f}")
            services = Services(
                pool=pool,
                runs=RunReader(pool),
                connections=ConnectionCache(registry=None, host_factory=None),
                objects=None,
                artifact_bucket=None,
                argo_data_server_url="https://a.b.svc:1",
            )
            app = create_app(services, StreamHub(PgChangeSource(pool, dsn=url)), api_key=KEY)
            async with (
                serving(app, host="127.0.0.1", port=0) as port,
                aiohttp.ClientSession() as session,
            ):
                base = f"http://127.0.0.1:{port}/api/v1"
                admin = {"X-API-Key": KEY, "X-Kubeopera-Admin": "true"}
                for _ in range(5):  # warm-up
                    await timed(session, f"{base}/workflows", admin, {})
                baseline = [
                    (await timed(session, f"{base}/workflow-clusters", admin, {}))[0]
                    for _ in range(repeats * 3)
                ]
                everything: list[float] = []
                for name, (headers, params) in _mixes().items():
                    latencies = []
                    body: Any = None
                    for _ in range(repeats):
                        ms, body = await timed(session, f"{base}/workflows", headers, params)
                        latencies.append(ms)
                    everything += latencies
                    capped = "+" if body["total_capped"] else ""
                    print(
                        f"{name}_p95_ms: {percentile(latencies, 0.95):.1f}  "
                        f"(total {body['total']}{capped})"
                    )
                    if body["next_cursor"] and name in ("tenant_all", "admin_all"):
                        second = []
                        for _ in range(repeats):
                            ms, _ = await timed(
                                session,
                                f"{base}/workflows",
                                headers,
                                {**params, "cursor": body["next_cursor"]},
                            )
                            second.append(ms)
                        everything += second
                        print(f"{name}_page2_p95_ms: {percentile(second, 0.95):.1f}")
                p95 = percentile(everything, 0.95)
                base95 = percentile(baseline, 0.95)
                print(f"baseline_p95_ms: {base95:.1f}")
                print(f"ratio_p95_to_baseline: {p95 / base95:.1f}")
                print(f"p50_ms: {percentile(everything, 0.5):.1f}")
                print(f"p95_ms: {p95:.1f}")
        finally:
            await pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main(parser.parse_args().quick))
