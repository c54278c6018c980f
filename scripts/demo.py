"""`make demo`: the whole system on one machine, on embedded defaults.

Starts two simulated clusters with Argo and a stream of sample runs (`python -m sim`), moto as
S3 and IAM, the real MLflow server, a demo database and every deployable as its own process,
then prints each run change as the watcher commits it and a summary every 15 seconds, while
the showcases (scripts/showcase_*.py, one per capability; README.md says what each shows) drive
the API as a tenant would. Ctrl-C stops everything. Logs: .run/demo/*.log.
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
import showcase_git
from chart_environment import only_what_it_reads, reader_url
from showcase_inference import SERVING_DOMAIN, inference_showcase
from showcase_schedules import schedules_showcase
from showcase_secrets import secrets_showcase
from showcase_serving import serving_showcase
from showcase_stages import showcase_stages  # scripts/ is on the path: this file's folder
from showcase_triggers import triggers_showcase

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".run" / "demo"
ADMIN_DSN = os.environ.get("WM_DEMO_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
DATABASE = os.environ.get("WM_DEMO_DATABASE", "workflow_manager_demo")
API_KEY = "demo-api-key"
MOTO_PORT = 8125
S3_ENDPOINT = f"http://127.0.0.1:{MOTO_PORT}"
BUCKET = "demo-artifacts"
DEPLOYABLES = {  # deployable → (HTTP port, health port)
    "watcher": (None, 8131),
    "apiserver": (8120, 8121),
    "compiler": (8122, 8132),
    "stagectl": (None, 8133),
    "inference_auth": (8124, 8134),
}


def log(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


async def fresh_database() -> str:
    """The demo starts from an empty database every time (its clusters are new too)."""
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await admin.close()
    return ADMIN_DSN.rpartition("/")[0] + "/" + DATABASE


def start(name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    logfile = (STATE / f"{name}.log").open("ab")
    # A session of its own: Ctrl-C reaches the demo alone, which stops everything in order.
    return subprocess.Popen(
        command,
        env=env,
        stdout=logfile,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )


async def create_bucket() -> None:
    """The artifact bucket, once moto answers (it is an operator's job in production)."""
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=S3_ENDPOINT,
        region_name="us-east-1",
        aws_access_key_id="demo",
        aws_secret_access_key="demo-secret",
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            s3.create_bucket(Bucket=BUCKET)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise SystemExit("moto did not start: see .run/demo/moto.log") from None
            await asyncio.sleep(0.3)


async def wait_for_world(sim: subprocess.Popen[bytes]) -> dict[str, object]:
    world_file = STATE / "world.json"
    deadline = time.monotonic() + 60
    while not world_file.exists():
        if sim.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the simulated clusters did not start: see .run/demo/sim.log")
        await asyncio.sleep(0.2)
    world: dict[str, object] = json.loads(world_file.read_text())
    return world


API = "http://127.0.0.1:8120"
ADMIN_HEADERS = {
    "X-API-Key": API_KEY,
    "X-Kubeopera-Admin": "true",
    "X-Kubeopera-Actor": "demo",
}


async def feed() -> None:
    """Follow the apiserver's live stream (SSE) as an administrator, print each run state once,
    and the API's summary every 15 s. Reconnects resume with Last-Event-ID."""
    import aiohttp

    shown: dict[tuple[str, str, str], tuple[str, str]] = {}  # what was last printed per run
    names: dict[str, str] = {}  # cluster id → name, from GET /workflow-clusters
    last_id: str | None = None
    next_summary = time.monotonic() + 15
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=30)) as http:
        while True:
            headers = dict(ADMIN_HEADERS)
            if last_id:
                headers["Last-Event-ID"] = last_id
            try:
                async with http.get(f"{API}/api/v1/workflows/stream", headers=headers) as stream:
                    if stream.status != 200:
                        await asyncio.sleep(1)
                        continue
                    data, kind = "", "message"
                    async for raw in stream.content:
                        line = raw.decode().rstrip("\n")
                        if line.startswith("event:"):
                            kind = line[6:].strip()
                        elif line.startswith("id:"):
                            last_id = line[3:].strip()
                        elif line.startswith("data:"):
                            data += line[5:].strip()
                        elif not line and data and kind != "run":
                            data, kind = "", "message"  # hello, heartbeat, reset: not a run
                        elif not line and data:
                            event = json.loads(data)
                            if event.get("cluster_id") not in names:
                                names.update(await cluster_names(http))
                            show(event, shown, names)
                            data, kind = "", "message"
                        if time.monotonic() > next_summary:
                            next_summary = time.monotonic() + 15
                            await summary(http)
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(1)  # the apiserver is starting or restarting


def show(
    event: dict[str, object],
    shown: dict[tuple[str, str, str], tuple[str, str]],
    names: dict[str, str],
) -> None:
    run = event.get("run") if isinstance(event.get("run"), dict) else {}
    assert isinstance(run, dict)
    progress_doc = run.get("progress")
    progress = (
        f"{progress_doc['done']}/{progress_doc['total']}" if isinstance(progress_doc, dict) else "-"
    )
    key = (str(event.get("cluster_id")), str(event.get("namespace")), str(event.get("name")))
    phase = str(event.get("phase"))
    if event.get("kind") != "deleted" and shown.get(key) == (phase, progress):
        return  # several commits between two looks: print the state once
    shown[key] = (phase, progress)
    gone = "  (deleted from its cluster, history kept)" if event.get("kind") == "deleted" else ""
    cluster = names.get(key[0], key[0][:10])
    print(
        f"  #{event.get('seq')!s:<6} {cluster:<10} {key[1]:<24} {key[2]:<34} {phase:<10} "
        f"{progress}{gone}",
        flush=True,
    )


async def showcase() -> None:
    """Once a run has failed: read one of its steps' log and retry it through the API, so the
    audit trail and a retried run show up in the feed."""
    import aiohttp

    await asyncio.sleep(20)
    async with aiohttp.ClientSession() as http:
        for _ in range(60):
            async with http.get(
                f"{API}/api/v1/workflows",
                params={"phase": "Failed", "limit": "1"},
                headers=ADMIN_HEADERS,
            ) as answer:
                items = (await answer.json()).get("items", []) if answer.status == 200 else []
            if items:
                break
            await asyncio.sleep(5)
        else:
            return
        run = items[0]
        path = f"{API}/api/v1/workflows/{run['cluster']['id']}/{run['namespace']}/{run['name']}"
        async with http.get(path, headers=ADMIN_HEADERS) as answer:
            detail = await answer.json()
        nodes = [n for n in detail.get("graph", {}).get("nodes", []) if n.get("type") == "Pod"]
        if nodes:
            async with http.get(f"{path}/logs/{nodes[0]['id']}", headers=ADMIN_HEADERS) as log_:
                text = await log_.text()
                source = log_.headers.get("X-Log-Source", "?")
            log(f"GET .../logs/{nodes[0]['id']} (from {source}): {text.strip()[:200]!r}")
        async with http.post(f"{path}/retry", headers=ADMIN_HEADERS, json={}) as answer:
            log(f"POST {path.removeprefix(API)}/retry → {answer.status} {await answer.text()}")


# The demo's DEPLOYMENT_TOKEN_KEY (32 bytes, base64; python -m shared.token_sealing makes one).
DEMO_TOKEN_KEY = "ZGVtby1kZXBsb3ltZW50LXRva2VuLWtleS0zMmJ5dGU"
TENANT_HEADERS = {
    "X-API-Key": API_KEY,
    "X-Kubeopera-Tenant": "demo",
    "X-Kubeopera-Actor": "dana@demo",
    "X-Kubeopera-Permissions": "workflows.read,pipelines.read,pipelines.write,pipelines.run",
}
DEMO_PIPELINE = {
    "name": "daily-sales",
    "description": "extract, transform and load one day of sales",
    "definition": {
        "type": "wizard",
        "spec": {
            "apiVersion": "pipelines.kubeopera.io/v1",
            "parameters": [{"name": "day", "default": "2026-12-01"}],
            "steps": [
                {
                    "name": "extract",
                    "image": "ghcr.io/demo/extract:1.4",
                    "command": ["extract", "--day", "{{workflow.parameters.day}}"],
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                },
                {
                    "name": "transform",
                    "image": "ghcr.io/demo/transform:1.4",
                    "command": ["transform"],
                    "depends_on": ["extract"],
                    "retries": {"limit": 2},
                },
                {
                    "name": "load",
                    "image": "ghcr.io/demo/load:1.4",
                    "command": ["load"],
                    "depends_on": ["transform"],
                },
            ],
        },
    },
}
HOSTILE_TEMPLATE = """apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: escape, namespace: kube-system}
spec:
  entrypoint: main
  serviceAccountName: argo-server
  hostNetwork: true
  artifactRepositoryRef: {configMap: artifact-repositories, key: platform}
  podMetadata:
    labels: {kubeopera.io/tenant: someone-else}
    annotations: {container.apparmor.security.beta.kubernetes.io/main: unconfined}
  templates:
    - name: main
      container:
        image: alpine:3.20
        securityContext: {privileged: true}
        resources: {limits: {cpu: "64", nvidia.com/gpu: "8"}}
        env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: argo-server-token, key: token}}}]
      volumes: [{name: root, hostPath: {path: /}}]
"""


async def pipelines_showcase() -> None:
    """A tenant saves a wizard pipeline, has a hostile YAML template refused, runs the pipeline
    (the run then streams in above like any other) and saves a second version."""
    import aiohttp

    await asyncio.sleep(8)
    base = f"{API}/api/v1/data-pipelines"
    async with aiohttp.ClientSession(headers=TENANT_HEADERS) as http:
        async with http.post(base, json=DEMO_PIPELINE) as answer:
            saved = await answer.json()
        if answer.status != 201:
            log(f"POST /api/v1/data-pipelines → {answer.status} {saved}")
            return
        pipeline = saved["id"]
        log(
            f"tenant demo saved pipeline {DEMO_PIPELINE['name']!r} → 201: version "
            f"{saved['version']}, WorkflowTemplate {saved['template_name']} applied in "
            "kubeopera-data-demo (namespace, quota, network policy, storage user provisioned)"
        )
        hostile = {"name": "escape", "definition": {"type": "yaml", "template": HOSTILE_TEMPLATE}}
        async with http.post(f"{base}/validate", json=hostile) as answer:
            refused = await answer.json()
        violations = refused.get("details", {}).get("violations", [])
        log(f"POST /api/v1/data-pipelines/validate (hostile YAML) → {answer.status}:")
        for violation in violations[:12]:
            log(f"    {violation['path']}: {violation['message']}")
        if len(violations) > 12:
            log(f"    … and {len(violations) - 12} more")
        async with http.post(
            f"{base}/{pipeline}/run", json={"parameters": {"day": "2026-12-02"}}
        ) as answer:
            run = await answer.json()
        if answer.status == 201:
            log(
                f"POST /api/v1/data-pipelines/{pipeline}/run → 201: "
                f"{run['workflow']['namespace']}/{run['workflow']['name']} (watch it below)"
            )
        else:
            log(f"POST .../run → {answer.status} {run}")
        await asyncio.sleep(10)
        changed = json.loads(json.dumps(DEMO_PIPELINE))
        changed["definition"]["spec"]["steps"][2]["retries"] = {"limit": 3}
        async with http.put(f"{base}/{pipeline}", json=changed) as answer:
            status = answer.status
        async with http.get(f"{base}/{pipeline}/versions") as answer:
            versions = await answer.json()
        listed = ", ".join(
            f"v{v['version']}{' (current)' if v['current'] else ''}" for v in versions["items"]
        )
        log(f"PUT /api/v1/data-pipelines/{pipeline} → {status}: versions {listed}")


async def cluster_names(http: object) -> dict[str, str]:
    import aiohttp

    assert isinstance(http, aiohttp.ClientSession)
    async with http.get(f"{API}/api/v1/workflow-clusters", headers=ADMIN_HEADERS) as answer:
        body = await answer.json() if answer.status == 200 else {"items": []}
    return {item["id"]: item["name"] for item in body["items"]}


async def summary(http: object) -> None:
    import aiohttp

    assert isinstance(http, aiohttp.ClientSession)
    async with http.get(f"{API}/api/v1/workflows/summary", headers=ADMIN_HEADERS) as answer:
        if answer.status == 200:
            log(f"GET /api/v1/workflows/summary → {json.dumps(await answer.json())}")


async def main() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    for stale in STATE.glob("*.json"):
        stale.unlink()
    url = await fresh_database()
    sys.path.insert(0, str(ROOT))
    import showcase_notifications

    from shared.db.migrations import apply_migrations

    await apply_migrations(url)  # the deployables would too; the feed below needs the tables
    import showcase_release

    python = sys.executable
    processes: dict[str, subprocess.Popen[bytes]] = {}
    tracking = None  # the MLflow server, once started
    aws = {"AWS_ACCESS_KEY_ID": "demo", "AWS_SECRET_ACCESS_KEY": "demo-secret"}
    processes["moto"] = start(
        "moto",
        [python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(MOTO_PORT)],
        {**os.environ, **aws},
    )
    await create_bucket()
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
            "--s3-endpoint",
            S3_ENDPOINT,
            "--bucket",
            BUCKET,
            "--serving",
        ],
        dict(os.environ),
    )
    try:
        world = await wait_for_world(processes["sim"])
        clusters = world["clusters"]
        registry = world["registry"]
        data_argo = world["argo_data_server"]
        serving_world = world["serving"]
        assert isinstance(serving_world, dict)
        assert isinstance(clusters, list)
        assert isinstance(registry, dict)
        assert isinstance(data_argo, dict)
        host = next(c for c in clusters if c["host"])
        tracking = await showcase_release.start_tracking(STATE / "mlflow")
        base_env = {
            **showcase_release.tracking_env(tracking),
            **os.environ,
            "DATABASE_URL": url,
            "API_KEY": API_KEY,
            "INTERNAL_API_KEY": "demo-internal-key",
            "HOST_KUBECONFIG": host["kubeconfig"],
            "KUBEOPERA_API_BASE_URL": registry["url"],
            "KUBEOPERA_API_INTERNAL_KEY": registry["key"],
            "COMPILER_URL": "http://127.0.0.1:8122",
            **aws,
            "AWS_REGION": "us-east-1",
            "S3_ENDPOINT_URL": S3_ENDPOINT,
            "IAM_ENDPOINT_URL": S3_ENDPOINT,
            "ARTIFACT_BUCKET": BUCKET,
            "ARTIFACT_IAM_USER_PATH": "/kubeopera/tenants/",
            "ARTIFACT_IAM_USER_PREFIX": "kubeopera-",
            "ARTIFACT_IAM_BOUNDARY_ARN": "arn:aws:iam::123456789012:policy/kubeopera-tenants",
            # The host's second Argo, which runs tenants' pipelines.
            "ARGO_DATA_SERVER_URL": data_argo["url"],
            "ARGO_DATA_INSTANCE_ID": data_argo["instance_id"],
            "LOG_JSON": "false",
            "POD_NAME": "demo",
            # The sim runs on the wall clock: a schedule every minute shows a run soon.
            "SCHEDULE_MIN_INTERVAL": "1m",
            # The drift reconciler's pass, short so the schedules showcase's deleted
            # CronWorkflow comes back within seconds (default 1m).
            "PIPELINE_RECONCILE_INTERVAL": "10s",
            **showcase_notifications.COMPILER_ENV,
            **showcase_git.ENVIRONMENT,
            # Model serving: stagectl deploys to the sim host's KServe stand-in and seals each
            # deployment's first token with this key, which the apiserver opens.
            "ML_SERVING_DOMAIN": SERVING_DOMAIN,
            "DEPLOYMENT_TOKEN_KEY": DEMO_TOKEN_KEY,
            "STAGE_DEPLOY_POLL": "0.5",
        }
        for name, (http_port, health_port) in DEPLOYABLES.items():
            env = {**base_env, "HEALTH_PORT": str(health_port)}
            if http_port:
                env["HTTP_PORT"] = str(http_port)
            if name == "inference_auth":
                env["DATABASE_URL"] = await reader_url(url)  # its own login role, as in the chart
            processes[name] = start(name, [python, "-m", name], only_what_it_reads(name, env))
        log("started: 2 simulated clusters with Argo (host, with its data controller for")
        log("         tenants' pipelines, + cluster-1), the cluster registry,")
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
        log("live run changes from GET /api/v1/workflows/stream (Ctrl-C to stop):")
        feed_task = asyncio.create_task(feed())
        showcase_task = asyncio.create_task(showcase())
        showcases = [
            showcase_task,
            asyncio.create_task(pipelines_showcase()),
            asyncio.create_task(
                inference_showcase(
                    url,
                    processes,
                    start=start,
                    log=log,
                    state=STATE,
                    auth_port=DEPLOYABLES["inference_auth"][0],
                )
            ),
            asyncio.create_task(
                schedules_showcase(API, TENANT_HEADERS, log, kubeconfig=host["kubeconfig"])
            ),
            asyncio.create_task(triggers_showcase(API, TENANT_HEADERS, world)),
            asyncio.create_task(secrets_showcase(API, API_KEY, log, delay=20)),
            asyncio.create_task(
                showcase_notifications.notifications_showcase(
                    api=API, headers=TENANT_HEADERS, kubeconfig=host["kubeconfig"], log=log
                )
            ),
            asyncio.create_task(
                showcase_release.release_showcase(
                    api=API, api_key=API_KEY, kubeconfig=host["kubeconfig"], log=log
                )
            ),
            asyncio.create_task(
                showcase_git.git_showcase(
                    api=API,
                    headers=TENANT_HEADERS,
                    kubeconfig=host["kubeconfig"],
                    processes=processes,
                    start=start,
                    log=log,
                )
            ),
            asyncio.create_task(
                showcase_stages(api=API, headers=TENANT_HEADERS, database_url=url, log=log)
            ),
            asyncio.create_task(
                serving_showcase(
                    api=API,
                    headers=TENANT_HEADERS,
                    kubeconfig=host["kubeconfig"],
                    gateway=str(serving_world["gateway"]),
                    auth_port=DEPLOYABLES["inference_auth"][0],
                    state=STATE,
                    log=log,
                )
            ),
        ]
        while True:
            await asyncio.sleep(1)
            for name, process in processes.items():
                if process.poll() is not None:
                    log(f"{name} exited with {process.returncode}: see .run/demo/{name}.log")
                    raise SystemExit(1)
            if feed_task.done():
                feed_task.result()
            for task in [t for t in showcases if t.done()]:
                showcases.remove(task)
                if not task.cancelled() and task.exception():
                    log(f"showcase failed: {task.exception()!r}")
    finally:
        # The deployables first, while the clusters they release their leases on still answer.
        world = ("sim", "moto")
        deployables = [p for name, p in processes.items() if name not in world]
        for group in (deployables, [processes[name] for name in world if name in processes]):
            for process in group:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in group:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=30)
        if tracking is not None:
            tracking.stop()
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
