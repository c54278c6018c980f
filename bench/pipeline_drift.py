"""Drift reconciler benchmark: passes of the compiler's pipeline drift reconciler
(``AttachmentReconciler.reconcile_all``) over pipelines that each have a schedule and a webhook
trigger (a CronWorkflow, an event source, a sensor, a token Secret), saved through the real save
path on a sim host (the Kubernetes API emulator over TLS, the real kubernetes-asyncio client).

Figures (STYLE.md convention, goal figure last):
- pipelines: the pass's size;
- baseline_reads_per_s: GETs of each pipeline's four objects, one after another, in the same
  run: what the API alone costs a pass;
- clean_pass_s: a pass with nothing drifted (reads only);
- ratio: the baseline's time for the same reads / clean_pass_s (how much of a pass is the API);
- repaired: CronWorkflows deleted before the next pass (10 %), all made again by it;
- repair_pass_s: that pass;
- ms_per_pipeline: clean_pass_s per pipeline (goal: a pass of 1,000 pipelines well inside
  PIPELINE_RECONCILE_INTERVAL=1m).

    python bench/pipeline_drift.py            # 1,000 pipelines
    python bench/pipeline_drift.py --quick    # 100
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import structlog  # noqa: E402

from bench._common import scratch_database  # noqa: E402
from compiler.pipelines.ports import Caller  # noqa: E402
from compiler.runner import assemble  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.db.pool import create_pool  # noqa: E402
from shared.k8s import client_from_kubeconfig  # noqa: E402
from shared.k8s_objects import KubeObjects  # noqa: E402
from sim.world import start_world  # noqa: E402

TENANT = "bench"
NAMESPACE = f"kubeopera-data-{TENANT}"
EVENTS = "kubeopera-pipeline-events"
ARGO = "argoproj.io/v1alpha1"
TEMPLATE = """apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: etl}
spec:
  entrypoint: main
  arguments: {parameters: [{name: day, value: "1"}]}
  templates:
    - name: main
      container: {image: "alpine:3.20", command: [sh, -c, "echo {{workflow.parameters.day}}"]}
"""


def body(index: int) -> dict[str, Any]:
    return {
        "name": f"etl-{index:05d}",
        "definition": {"type": "yaml", "template": TEMPLATE},
        "schedule": {"cron": [f"{index % 60} 2 * * *"], "timezone": "Europe/Helsinki"},
        "triggers": [{"name": "hook", "type": "webhook", "parameters": {"day": "body.day"}}],
    }


async def main(quick: bool) -> dict[str, Any]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    count = 100 if quick else 1000
    figures: dict[str, Any] = {"pipelines": count}
    world = await start_world(1, tick=0.05, autostart=False, pod_gc_delay=0)
    kube = await client_from_kubeconfig(world.host.kubeconfig)
    try:
        async with scratch_database("wm_bench_drift") as url:
            settings = Settings(DATABASE_URL=url, INTERNAL_API_KEY="bench", ARTIFACT_BUCKET="a")
            pool = await create_pool(settings, application_name="bench-drift")
            try:
                parts = assemble(settings, pool=pool, host_api=kube, storage=None)
                drift = parts.drift
                assert drift is not None
                caller = Caller(TENANT, "bench@acme")
                ids = [
                    (await parts.service.create(caller, "data", body(i)))["id"]
                    for i in range(count)
                ]
                objects = KubeObjects(kube)
                started = time.perf_counter()
                for pipeline_id in ids:
                    name = f"p-{pipeline_id}"
                    await objects.get(ARGO, "CronWorkflow", NAMESPACE, name)
                    await objects.get(ARGO, "EventSource", EVENTS, name)
                    await objects.get(ARGO, "Sensor", EVENTS, name)
                    await objects.get("v1", "Secret", EVENTS, f"{name}-webhooks")
                baseline = time.perf_counter() - started
                figures["baseline_reads_per_s"] = round(4 * count / baseline)

                await drift.reconcile_all()  # warm
                started = time.perf_counter()
                done = await drift.reconcile_all()
                clean = time.perf_counter() - started
                assert (done.pipelines, done.failed) == (count, 0)
                figures["clean_pass_s"] = round(clean, 2)
                figures["ratio"] = round(baseline / clean, 2)

                deleted = ids[::10]
                for pipeline_id in deleted:
                    await objects.delete(ARGO, "CronWorkflow", NAMESPACE, f"p-{pipeline_id}")
                started = time.perf_counter()
                await drift.reconcile_all()
                figures["repair_pass_s"] = round(time.perf_counter() - started, 2)
                back = [
                    await objects.get(ARGO, "CronWorkflow", NAMESPACE, f"p-{pipeline_id}")
                    for pipeline_id in deleted
                ]
                figures["repaired"] = sum(item is not None for item in back)
                assert figures["repaired"] == len(deleted)
                figures["ms_per_pipeline"] = round(1000 * clean / count, 2)
            finally:
                await pool.close()
    finally:
        await kube.close()
        await world.stop()
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 pipelines")
    figures = asyncio.run(main(parser.parse_args().quick))
    for name, value in figures.items():
        print(f"{name}: {value}")
