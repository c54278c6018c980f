"""The bearer-token check on the hot path: nginx → model with and without `auth_request` to a
real `wm-inference-auth`, measured with wrk in the same run.

- `ratio`: requests/s through nginx to a model server with the check (configured as
  ingress-nginx renders `auth-url`, sim/ingress.py) divided by the same nginx and model without
  it (a second listener of the same nginx). Goal ≥ 0.8. Also the p99 latency the check adds.
- `revocation_ms`: under that load, a token is revoked through the token store and polled
  through nginx until it is refused (401); the slowest of several. Goal < 1000.
- `handler_ratio`: inference_auth's own requests/s (wrk straight at it, a valid token and host)
  divided by an empty aiohttp handler's on the same machine. Goal ≥ 0.8.

One nginx worker, one inference_auth process, one model process, wrk with one thread and
32 connections for every figure (2 cores: more threads only fight the servers). Rounds are
interleaved and the best of each side kept, since the machine is shared.

    python bench/inference_auth.py           # 3 rounds of 10 s
    python bench/inference_auth.py --quick   # 1 round of 3 s
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import scratch_database
from shared.db.inference_tokens import TokenStore
from shared.db.pool import create_pool
from shared.inference_routes import deployment_path
from shared.inference_tokens import DeploymentRef, endpoint_host
from sim.ingress import ExternalAuth, Nginx, deployment_sites, free_port

REDIS_URL = os.environ.get("WM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
DOMAIN = "models.bench.test"
TENANT, MODEL, ENVIRONMENT = "acme", "fraud", "production"
REF = DeploymentRef(tenant=TENANT, model=MODEL, environment=ENVIRONMENT)
# The check's path as the deployment's Ingress names it in its auth-url.
ROUTE = deployment_path(REF)
CONNECTIONS = 32
PREDICT_PATH = f"/v1/models/{MODEL}:predict"
POST_SCRIPT = """wrk.method = "POST"
wrk.body = '{"instances": [[1.0, 2.0, 3.0, 4.0]]}'
wrk.headers["Content-Type"] = "application/json"
"""


@dataclass(frozen=True)
class WrkResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int


_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def _latency_ms(text: str, percent: str) -> float:
    match = re.search(rf"^\s*{percent}%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no {percent}% latency in wrk's output:\n{text}")
    return float(match.group(1)) * _UNIT_MS[match.group(2)]


def parse_wrk(text: str) -> WrkResult:
    """Requests/s, p50, p99 and refusals from `wrk --latency` output."""
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.MULTILINE)
    total = re.search(r"^\s*(\d+) requests in", text, re.MULTILINE)
    if rps is None or total is None:
        raise RuntimeError(f"unexpected wrk output:\n{text}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    return WrkResult(
        rps=float(rps.group(1)),
        p50_ms=_latency_ms(text, "50"),
        p99_ms=_latency_ms(text, "99"),
        requests=int(total.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
    )


async def wrk(
    url: str, *, seconds: float, headers: dict[str, str], script: Path | None = None
) -> WrkResult:
    command = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds:g}s", "--latency", "--timeout", "5s"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    if script is not None:
        command += ["-s", str(script)]
    process = await asyncio.create_subprocess_exec(
        *command, url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    result = parse_wrk(out.decode())
    if result.non_2xx:
        raise RuntimeError(f"{result.non_2xx} of {result.requests} refused by {url}")
    return result


def start(command: list[str], *, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True
    )


async def wait_ok(url: str, *, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"{what} exited with {process.returncode}")
            try:
                async with http.get(url) as answer:
                    if answer.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"{what} did not answer {url}")


async def revocation_ms(store: TokenStore, *, nginx: Nginx, host: str, polls: list[float]) -> float:
    """Issue a token, see it served through nginx, revoke it, poll until nginx refuses it."""
    issued = await store.issue(actor="bench", tenant=TENANT, model=MODEL, environment=ENVIRONMENT)
    url = f"{nginx.url}{PREDICT_PATH}"
    headers = {"Host": host, "Authorization": f"Bearer {issued.token}"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json={"instances": []}, headers=headers) as answer:
            if answer.status != 200:
                raise RuntimeError(f"a fresh token was refused: {answer.status}")
        began = time.monotonic()
        await store.revoke(issued.token_id, actor="bench")
        while True:
            async with http.post(url, json={"instances": []}, headers=headers) as answer:
                polls.append(time.monotonic())
                if answer.status == 401:
                    return (time.monotonic() - began) * 1000
                if time.monotonic() - began > 10:
                    raise RuntimeError("the revoked token still served after 10 s")
            await asyncio.sleep(0.005)


async def bench(*, quick: bool) -> None:
    if shutil.which("wrk") is None or shutil.which("nginx") is None:
        raise SystemExit("nginx and wrk are needed: run scripts/ensure-services.sh")
    seconds = 3.0 if quick else 10.0
    rounds = 1 if quick else 3
    revocations = 3 if quick else 8
    state = Path(tempfile.mkdtemp(prefix="wm-bench-auth-"))
    processes: list[subprocess.Popen[bytes]] = []
    async with scratch_database("wm_bench_auth") as url:
        pool = await create_pool(url, min_size=1, max_size=2)
        store = TokenStore(pool)
        host = endpoint_host(tenant=TENANT, model=MODEL, environment=ENVIRONMENT, domain=DOMAIN)
        await store.register_deployment(
            tenant=TENANT, model=MODEL, environment=ENVIRONMENT, domain=DOMAIN
        )
        load = await store.issue(actor="bench", tenant=TENANT, model=MODEL, environment=ENVIRONMENT)
        auth_port, health_port, model_port, empty_port = (free_port() for _ in range(4))
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "REDIS_URL": REDIS_URL,
            "ML_SERVING_DOMAIN": DOMAIN,
            "HTTP_PORT": str(auth_port),
            "HEALTH_PORT": str(health_port),
            "LOG_JSON": "true",
            "LOG_LEVEL": "WARNING",
        }
        python = sys.executable
        nginx = Nginx(
            prefix=state / "nginx",
            sites=deployment_sites([REF], domain=DOMAIN, backend=f"127.0.0.1:{model_port}"),
            auth=ExternalAuth(servers=(f"127.0.0.1:{auth_port}",)),
            plain_port=free_port(),
        )
        try:
            processes.append(
                start([python, "-m", "inference_auth"], env=env, log=state / "auth.log")
            )
            model_command = [python, "-m", "sim.ingress", "model", "--port", str(model_port)]
            processes.append(start(model_command, env=dict(os.environ), log=state / "model.log"))
            empty_command = [python, "-m", "sim.ingress", "empty", "--port", str(empty_port)]
            processes.append(start(empty_command, env=dict(os.environ), log=state / "empty.log"))
            await wait_ok(
                f"http://127.0.0.1:{health_port}/readyz", process=processes[0], what="auth"
            )
            await wait_ok(f"http://127.0.0.1:{model_port}/", process=processes[1], what="model")
            await wait_ok(f"http://127.0.0.1:{empty_port}/", process=processes[2], what="empty")
            await nginx.start()
            script = state / "post.lua"
            script.write_text(POST_SCRIPT)
            client = {"Host": host, "Authorization": f"Bearer {load.token}"}
            direct = {
                **client,
                "X-Original-URL": f"http://{host}{PREDICT_PATH}",
                "X-Original-Method": "POST",
            }
            plain_url = f"http://127.0.0.1:{nginx.plain_port}{PREDICT_PATH}"
            auth_url = f"{nginx.url}{PREDICT_PATH}"
            await wrk(auth_url, seconds=1, headers=client, script=script)  # warm up
            plain: list[WrkResult] = []
            checked: list[WrkResult] = []
            handler: list[WrkResult] = []
            empty: list[WrkResult] = []
            for _ in range(rounds):
                plain.append(await wrk(plain_url, seconds=seconds, headers=client, script=script))
                checked.append(await wrk(auth_url, seconds=seconds, headers=client, script=script))
                handler.append(
                    await wrk(
                        f"http://127.0.0.1:{auth_port}{ROUTE}", seconds=seconds, headers=direct
                    )
                )
                # The same request, headers included: parsing them is part of the cost.
                empty.append(
                    await wrk(
                        f"http://127.0.0.1:{empty_port}{ROUTE}", seconds=seconds, headers=direct
                    )
                )
            # Revocation under the load the ratio was measured with.
            load_seconds = revocations * 1.0 + 3
            loaded = asyncio.create_task(
                wrk(auth_url, seconds=load_seconds, headers=client, script=script)
            )
            await asyncio.sleep(1)
            polls: list[float] = []
            times = [
                await revocation_ms(store, nginx=nginx, host=host, polls=polls)
                for _ in range(revocations)
            ]
            under_load = await loaded
        finally:
            await nginx.stop()
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
            await pool.close()
    best_plain = max(plain, key=lambda r: r.rps)
    best_checked = max(checked, key=lambda r: r.rps)
    best_handler = max(handler, key=lambda r: r.rps)
    best_empty = max(empty, key=lambda r: r.rps)
    times.sort()
    print(f"connections: {CONNECTIONS}")
    print(f"plain_rps: {best_plain.rps:.0f}")
    print(f"auth_rps: {best_checked.rps:.0f}")
    print(f"plain_p99_ms: {best_plain.p99_ms:.2f}")
    print(f"auth_p99_ms: {best_checked.p99_ms:.2f}")
    print(f"added_p50_ms: {best_checked.p50_ms - best_plain.p50_ms:.2f}")
    print(f"added_p99_ms: {best_checked.p99_ms - best_plain.p99_ms:.2f}")
    print(f"rps_during_revocations: {under_load.rps:.0f}")
    print(f"revocations: {len(times)}")
    print(f"revocation_p50_ms: {times[len(times) // 2]:.0f}")
    print(f"revocation_ms: {times[-1]:.0f}")
    print(f"handler_rps: {best_handler.rps:.0f}")
    print(f"empty_handler_rps: {best_empty.rps:.0f}")
    print(f"handler_ratio: {best_handler.rps / best_empty.rps:.2f}")
    print(f"ratio: {best_checked.rps / best_plain.rps:.2f}")
    shutil.rmtree(state, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1 round of 3 s (under a minute)")
    args = parser.parse_args()
    asyncio.run(bench(quick=args.quick))


if __name__ == "__main__":
    main()
