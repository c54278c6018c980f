"""The stage controller under a burst: 100 ML runs reaching their stages at once.

One ML pipeline with a release (register, gate, cleanup) is saved through the compiler and run
100 times at once on the sim host's data controller; the real `wm-stagectl` process (its
console script, artifacts in a moto server) does every stage. Figures (STYLE.md convention,
goal figure last):

- stage_p50_ms, stage_p95_ms: the controller's own time per stage, as it logs it
  (`stage_completed`): from the node seen waiting on its watch to the Argo server's answer to
  `resume`, less the time the stage waited for object storage (register's copies);
  register_p95_ms, gate_p95_ms, cleanup_p95_ms per stage;
- storage_p95_ms: what register waited for object storage (not counted above);
- queued_p95_ms, admission_p95_ms, work_p95_ms, argo_p95_ms: parts of a stage's time: waiting
  for one of the controller's workers (STAGE_CONCURRENCY), admission, the stage's own work in
  PostgreSQL (less object storage), and its set + resume calls; around_argo_p95_ms: the whole
  less the Argo calls;
- baseline_p50_ms, baseline_p95_ms: the same Argo `set` + `resume` round trip made directly
  (through the same service proxy, as many at once as the controller's workers) on 100 plain
  workflows waiting at a suspend node, while the controller's stages are under way;
- versions_per_run: model versions registered divided by runs (must be exactly 1);
- load_average: the machine's 1-minute load at the end (2 cores here, shared: read every
  figure above against it);
- overhead_p95_ms: stage_p95_ms - baseline_p95_ms. Goal < 250.

Everything runs on this machine: the emulator and the data controller in this process, moto and
`wm-stagectl` in their own.

    python bench/stages.py           # 100 runs
    python bench/stages.py --quick   # 20 runs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import scratch_database  # noqa: E402
from compiler.pipelines.ports import Caller  # noqa: E402
from compiler.runner import assemble  # noqa: E402
from shared.argo import ArgoServer  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.db.pool import create_pool  # noqa: E402
from shared.k8s import client_from_kubeconfig  # noqa: E402
from sim.argo.server import DATA_ARGO_NAMESPACE, DATA_ARGO_SERVICE  # noqa: E402
from sim.ports import free_port  # noqa: E402
from sim.world import start_world  # noqa: E402

BUCKET = "wm-bench-artifacts"
REGION = "us-east-1"
TENANT = "acme"
NAMESPACE = f"kubeopera-data-{TENANT}"
# STAGE_CONCURRENCY's default: the baseline runs as many calls at once.
WORKERS = int(Settings.model_fields["STAGE_CONCURRENCY"].default)
AWS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"}
WORKFLOWS = ("argoproj.io", "v1alpha1", "workflows")
TEMPLATES = ("argoproj.io", "v1alpha1", "workflowtemplates")


def ml_body() -> dict[str, Any]:
    def step(name: str, artifact: str, env: list[dict[str, str]], **extra: Any) -> Any:
        return {
            "name": name,
            "image": f"ghcr.io/acme/{name}:1.0",
            "command": [name],
            "env": env,
            "outputs": {"artifacts": [{"name": artifact, "path": f"/out/{artifact}"}]},
            **extra,
        }

    return {
        "name": "churn",
        "definition": {
            "type": "wizard",
            "spec": {
                "apiVersion": "pipelines.kubeopera.io/v1",
                "steps": [
                    step("train", "model", [{"name": "SIM_ARTIFACT_MODEL", "value": "w" * 4096}]),
                    step(
                        "evaluate",
                        "scorecard",
                        [{"name": "SIM_ARTIFACT_SCORECARD", "value": '{"auc": 0.93}'}],
                        depends_on=["train"],
                    ),
                ],
            },
        },
        "release": {
            "model": "churn",
            "model_artifact": {"step": "train", "artifact": "model"},
            "scorecard": {"step": "evaluate", "artifact": "scorecard"},
            "gate": {"thresholds": [{"metric": "auc", "op": ">=", "value": 0.8}]},
        },
    }


BASELINE_TEMPLATE = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "WorkflowTemplate",
    "metadata": {"name": "bench-suspend"},
    "spec": {
        "entrypoint": "wait",
        "templates": [
            {
                "name": "wait",
                "suspend": {},
                "outputs": {"parameters": [{"name": "version", "valueFrom": {"supplied": {}}}]},
            }
        ],
    },
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@contextlib.contextmanager
def process(command: list[str], env: dict[str, str], log: Path) -> Any:
    with log.open("ab") as out:
        child = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield child
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()


async def wait_until(check: Any, *, limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {what}")
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def moto(tmp: Path) -> AsyncIterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with process(command, {**os.environ, **AWS}, tmp / "moto.log"):
        s3 = boto3.client("s3", endpoint_url=url, region_name=REGION, **_keys())
        deadline = time.monotonic() + 30
        while True:
            try:
                s3.create_bucket(Bucket=BUCKET)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        yield url


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": AWS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": AWS["AWS_SECRET_ACCESS_KEY"],
    }


async def waiting_baseline(world: Any, runs: int) -> list[str]:
    """``runs`` plain workflows waiting at a suspend node with a supplied output."""
    store = world.host.store
    store.create(store.resolve(*TEMPLATES), NAMESPACE, BASELINE_TEMPLATE)
    labels = {"workflows.argoproj.io/controller-instanceid": "kubeopera-data"}
    names = []
    for index in range(runs):
        workflow = {
            "metadata": {"name": f"baseline-{index}", "labels": labels},
            "spec": {"workflowTemplateRef": {"name": "bench-suspend"}},
        }
        created = store.create(store.resolve(*WORKFLOWS), NAMESPACE, workflow)
        names.append(created["metadata"]["name"])

    async def all_waiting() -> bool:
        for name in names:
            nodes = store.get(store.resolve(*WORKFLOWS), NAMESPACE, name).get("status", {})
            if not any(n.get("type") == "Suspend" for n in nodes.get("nodes", {}).values()):
                return False
        return True

    await wait_until(all_waiting, limit=120, what="baseline workflows waiting")
    return names


async def baseline(kube: Any, names: list[str]) -> list[float]:
    """set + resume straight to the Argo server, ``WORKERS`` at a time."""
    argo = ArgoServer(kube, namespace=DATA_ARGO_NAMESPACE, service=DATA_ARGO_SERVICE)
    slots = asyncio.Semaphore(WORKERS)
    timings: list[float] = []

    async def one(name: str) -> None:
        async with slots:
            started = time.perf_counter()
            selector = "templateName=wait"
            await argo.set_node(
                NAMESPACE,
                name,
                node_field_selector=selector,
                phase="",
                output_parameters={"version": "1"},
            )
            await argo.resume(NAMESPACE, name, node_field_selector=selector)
            timings.append(time.perf_counter() - started)

    await asyncio.gather(*(one(name) for name in names))
    return timings


async def bench(runs: int, keep: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="wm-bench-stages-") as scratch:
        tmp = Path(keep) if keep else Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        async with scratch_database("wm_bench_stages") as url, moto(tmp) as s3_url:
            os.environ.update(AWS)
            world = await start_world(
                1, tick=0.25, s3_endpoint=s3_url, bucket=BUCKET, pod_gc_delay=3600
            )
            pool = await create_pool(url, min_size=1, max_size=8)
            kube = await client_from_kubeconfig(world.host.kubeconfig)
            kubeconfig = tmp / "host.kubeconfig"
            kubeconfig.write_text(world.host.kubeconfig)
            try:
                await measure(world, pool, kube, url, s3_url, kubeconfig, tmp, runs)
            finally:
                await kube.close()
                await pool.close()
                await world.stop()


async def measure(
    world: Any,
    pool: Any,
    kube: Any,
    url: str,
    s3_url: str,
    kubeconfig: Path,
    tmp: Path,
    runs: int,
) -> None:
    settings = Settings(
        DATABASE_URL=url,
        ARTIFACT_BUCKET=BUCKET,
        S3_ENDPOINT_URL=s3_url,
        AWS_REGION=REGION,
        INTERNAL_API_KEY="bench",
    )
    compiler = assemble(settings, pool=pool, host_api=kube, storage=None)
    caller = Caller(tenant=TENANT, actor="bench")
    saved = await compiler.service.create(caller, "ml", ml_body())
    pipeline = str(saved["id"])
    waiting = await waiting_baseline(world, runs)

    env = {
        **os.environ,
        **AWS,
        "DATABASE_URL": url,
        "HOST_KUBECONFIG": str(kubeconfig),
        "ARTIFACT_BUCKET": BUCKET,
        "S3_ENDPOINT_URL": s3_url,
        "AWS_REGION": REGION,
        "HEALTH_PORT": "0",
        "LOG_JSON": "true",
        "POD_NAME": "bench-stagectl",
        "LEASE_DURATION": "15s",
        "LEASE_RENEW_PERIOD": "5s",
        **({"DB_POOL_MAX": os.environ["BENCH_POOL"]} if "BENCH_POOL" in os.environ else {}),
    }
    log = tmp / "stagectl.log"
    command = [str(Path(sys.executable).parent / "wm-stagectl")]
    if os.environ.get("BENCH_PROFILE"):  # a cProfile of the controller, for whoever tunes it
        command = [
            sys.executable,
            "-m",
            "cProfile",
            "-o",
            os.environ["BENCH_PROFILE"],
            "-m",
            "stagectl",
        ]
    with process(command, env, log):
        # Every run starts at once; they reach each stage together.
        names = await asyncio.gather(
            *(compiler.service.run(caller, "ml", pipeline, {}) for _ in range(runs))
        )
        store = world.host.store
        workflows = [str(started["workflow"]["name"]) for started in names]

        async def first_stage_waiting() -> bool:
            count = await pool.fetchval("SELECT count(*) FROM stage_outcomes")
            return bool(count > 0)

        # The baseline's calls go while the controller's stages are under way: the same load.
        await wait_until(first_stage_waiting, limit=300, what="the first stage")
        baseline_times = await baseline(kube, waiting)

        async def all_done() -> bool:
            count = await pool.fetchval(
                "SELECT count(*) FROM stage_outcomes WHERE completed_at IS NOT NULL "
                "AND stage = 'cleanup'"
            )
            return bool(count >= runs)

        await wait_until(all_done, limit=600, what="every run's cleanup completed")

        def phase(name: str) -> str | None:
            found = store.get(store.resolve(*WORKFLOWS), NAMESPACE, name)
            return found.get("status", {}).get("phase")  # type: ignore[no-any-return]

        async def all_finished() -> bool:
            return all(phase(name) in ("Succeeded", "Failed", "Error") for name in workflows)

        await wait_until(all_finished, limit=120, what="every run finished")
        phases = [
            store.get(store.resolve(*WORKFLOWS), NAMESPACE, name).get("status", {}).get("phase")
            for name in workflows
        ]
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    done = [e for e in events if e.get("event") == "stage_completed"]
    own = [e["own_seconds"] * 1000 for e in done]
    by_stage: dict[str, list[float]] = {}
    for event in done:
        by_stage.setdefault(event["stage"], []).append(event["own_seconds"] * 1000)
    storage = [e["storage_seconds"] * 1000 for e in done if e["stage"] == "register"]
    versions = await pool.fetchval("SELECT count(*) FROM model_versions WHERE state <> 'abandoned'")
    distinct = await pool.fetchval("SELECT count(DISTINCT run_uid) FROM model_versions")
    base = [t * 1000 for t in baseline_times]
    print(f"runs: {runs}")
    print(f"workers: {WORKERS}")
    print(f"runs_succeeded: {phases.count('Succeeded')}")
    print(f"stages_completed: {len(done)}")
    for stage in ("register", "gate", "cleanup"):
        values = by_stage.get(stage) or [0.0]
        print(f"{stage}_p95_ms: {percentile(values, 0.95):.1f}")
    print(f"storage_p95_ms: {percentile(storage or [0.0], 0.95):.1f}")
    for step in ("queued", "admission", "work", "argo"):
        values = [e.get(f"{step}_seconds", 0.0) * 1000 for e in done]
        print(f"{step}_p95_ms: {percentile(values, 0.95):.1f}")
    around = [(e["own_seconds"] - e.get("argo_seconds", 0.0)) * 1000 for e in done]
    print(f"around_argo_p95_ms: {percentile(around, 0.95):.1f}")
    print(f"stage_p50_ms: {statistics.median(own):.1f}")
    print(f"stage_p95_ms: {percentile(own, 0.95):.1f}")
    print(f"baseline_p50_ms: {statistics.median(base):.1f}")
    print(f"baseline_p95_ms: {percentile(base, 0.95):.1f}")
    print(f"versions_per_run: {versions / runs:.2f}")
    print(f"load_average: {os.getloadavg()[0]:.1f}")
    if versions != runs or distinct != runs:
        raise SystemExit(f"expected exactly one version per run: {versions} for {runs} runs")
    print(f"overhead_p95_ms: {percentile(own, 0.95) - percentile(base, 0.95):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="20 runs instead of 100")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--keep", help="a directory to keep the processes' logs in")
    args = parser.parse_args()
    runs = args.runs or (20 if args.quick else 100)
    asyncio.run(bench(runs, args.keep))


if __name__ == "__main__":
    main()
