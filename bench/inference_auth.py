"""The bearer-token check on the hot path: nginx → model with and without the check by a real
`wm-inference-auth`, in each form ingress-nginx renders `auth-url`, measured with wrk in the
same run.

Traffic is mixed, as production's: DEPLOYMENTS deployments (hosts) with TOKENS_EACH tokens
each, requests cycling over them; one deployment has a rate limit (a Redis round trip per
check, never reached); 1 % of requests carry a well-formed token with a fresh unknown lookup id
(refused, 401, the only non-2xx allowed).

- `ratio_default`: requests/s through nginx configured as ingress-nginx renders `auth-url` by
  default (`auth_request`, a new connection to the check per request: ingress-nginx never pairs
  `auth_request` with upstream keepalive) divided by the same nginx and model without the check
  (a second listener). `ratio_keepalive`: the `auth-keepalive` form (HTTP/2 off): an upstream
  with keepalive, checked by ingress-nginx's Lua subrequest (needs libnginx-mod-http-lua; its
  `auth-response-headers` are left out, see docs/benchmarks.md). `ratio` (last line): the
  lower of the two. Goal ≥ 0.8 in every form. `ratio_plain_nginx_keepalive`: plain nginx's
  `auth_request` over kept-alive connections (the form this bench measured before; not one
  ingress-nginx renders), for reference. Also the latency each adds at p50 and p99.
- `ceiling_<form>`: the same nginx configuration with the cheapest possible check server
  behind it, a second nginx (C, one worker) answering `return 200` with
  `X-Inference-Deployment` on the same routes, no token logic (`sim.ingress`'s
  `zero_cost_check`). `ceiling_ratio_<form>`: its requests/s divided by the chain without a
  check: the most any check server can reach in that form; `ratio_vs_ceiling_<form>`: our
  check's requests/s divided by the zero-cost check's: how close it comes.
- `*_uvicorn`, `*_granian`: the same forms with the check served by a maintained server instead
  of http_server.py, uvicorn (httptools on uvloop, bench/_inference_auth_uvicorn.py) and granian's
  RSGI (Rust, bench/_inference_auth_granian.py); `<server>_vs_own_default` divides its chain's
  requests/s by http_server.py's. Each is skipped (and said so) when not installed in `.run/extra`
  (`pip install --target .run/extra uvicorn granian`: the project does not depend on them).
- `model_rps`: the model stand-in's own capacity (wrk straight at it), to show it is not what
  limits `plain_rps`: a precomputed answer from a bare protocol (bench/_model_stand_in.py),
  since the aiohttp stand-in's ~60 µs a request capped the baseline near one core.
- `revocation_ms`: under load, a token is revoked through the token store and polled through
  nginx (default form) until it is refused (401); the slowest of several. Goal < 1000.
- `cpu_us_<part>_<form>`: CPU time per request of nginx's worker, the check's process and the
  model's, summed over the rounds: where each form's cost goes (the check's new connection
  per request in the default form costs in nginx as much as in the check);
  `cpu_us_<part>_kernel_<form>` the part of it spent in the kernel; `added_cpu_us_<form>` what
  the check adds to the whole chain per request (nginx, the check and the model, against the
  chain without it): the figure to size an installation by, and to set against a real model's
  own CPU per prediction (the ratio here sets it against a model that costs next to nothing).
- `handler_ratio`: inference_auth's own requests/s (wrk straight at it, the same mixed traffic,
  keep-alive) divided by an empty aiohttp handler's on the same machine. Goal ≥ 0.8.

One nginx worker, one process per server, wrk with one thread and 32 connections for every
figure (2 cores: more threads only fight the servers). Rounds are interleaved and the best of
each side kept, since the machine is shared.

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
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import scratch_database
from shared.db.inference_tokens import TokenStore
from shared.db.pool import create_pool
from shared.inference_routes import DEPLOYMENT_HEADER, deployment_path
from shared.inference_tokens import DeploymentRef, endpoint_host
from sim.ingress import ExternalAuth, Nginx, deployment_sites, free_port, lua_available

REDIS_URL = os.environ.get("WM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
DOMAIN = "models.bench.test"
TENANT, MODEL, ENVIRONMENT = "acme", "fraud", "production"
CONNECTIONS = 32
DEPLOYMENTS = 8  # the first has a rate limit
TOKENS_EACH = 4
RATE_LIMIT = 1_000_000  # per second: a Redis round trip per check, never reached
UNKNOWN_EVERY = 100  # 1 %: a fresh unknown lookup id
PREDICT_PATH = f"/v1/models/{MODEL}:predict"
EXTRA = Path(__file__).resolve().parent.parent / ".run" / "extra"
# wrk's Lua: each request takes the next (host, token); every UNKNOWN_EVERY-th a random lookup id.
MIXED_SCRIPT = """local pairs = {%(pairs)s}
local alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
local secret = string.rep("s", 43)
local direct = %(direct)s
local counter = 0
math.randomseed(os.time())
local function lookup_id()
  local t = {}
  for i = 1, 16 do
    local n = math.random(1, 62)
    t[i] = alphabet:sub(n, n)
  end
  return table.concat(t)
end
request = function()
  counter = counter + 1
  local pair = pairs[counter %% #pairs + 1]
  local token = pair[2]
  if counter %% %(every)d == 0 then
    token = "wmi_" .. lookup_id() .. "_" .. secret
  end
  local headers = {["Authorization"] = "Bearer " .. token}
  if direct then
    headers["X-Original-URL"] = "http://" .. pair[1] .. "%(path)s"
    headers["X-Original-Method"] = "POST"
    return wrk.format("GET", pair[3], headers, nil)
  end
  headers["Host"] = pair[1]
  headers["Content-Type"] = "application/json"
  return wrk.format("POST", "%(path)s", headers, '{"instances": [[1.0, 2.0, 3.0, 4.0]]}')
end
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
    url: str,
    *,
    seconds: float,
    headers: dict[str, str] | None = None,
    script: Path | None = None,
    refused: float = 0.0,
) -> WrkResult:
    """wrk's figures; more than `refused` of the requests answered non-2xx is an error."""
    command = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds:g}s", "--latency", "--timeout", "5s"]
    for name, value in (headers or {}).items():
        command += ["-H", f"{name}: {value}"]
    if script is not None:
        command += ["-s", str(script)]
    process = await asyncio.create_subprocess_exec(
        *command, url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    result = parse_wrk(out.decode())
    if result.non_2xx > refused * result.requests:
        raise RuntimeError(f"{result.non_2xx} of {result.requests} refused by {url}")
    return result


def mixed_script(path: Path, *, pairs: list[tuple[str, str, str]], direct: bool) -> Path:
    entries = ", ".join(f'{{"{host}", "{token}", "{route}"}}' for host, token, route in pairs)
    path.write_text(
        MIXED_SCRIPT
        % {
            "pairs": entries,
            "direct": "true" if direct else "false",
            "every": UNKNOWN_EVERY,
            "path": PREDICT_PATH,
        }
    )
    return path


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


async def deployments(store: TokenStore) -> list[tuple[str, str, str]]:
    """DEPLOYMENTS deployments (the first rate-limited), TOKENS_EACH tokens each, interleaved:
    (host, token, the check's route for the deployment) triples."""
    by_deployment: list[list[tuple[str, str, str]]] = []
    for index in range(DEPLOYMENTS):
        model = MODEL if index == 0 else f"{MODEL}{index}"
        host = endpoint_host(tenant=TENANT, model=model, environment=ENVIRONMENT, domain=DOMAIN)
        await store.register_deployment(
            tenant=TENANT,
            model=model,
            environment=ENVIRONMENT,
            domain=DOMAIN,
            rate_limit=RATE_LIMIT if index == 0 else None,
        )
        issued = [
            await store.issue(actor="bench", tenant=TENANT, model=model, environment=ENVIRONMENT)
            for _ in range(TOKENS_EACH)
        ]
        route = deployment_path(DeploymentRef(tenant=TENANT, model=model, environment=ENVIRONMENT))
        by_deployment.append([(host, token.token, route) for token in issued])
    return [pair for group in zip(*by_deployment, strict=True) for pair in group]


def cpu_seconds(pid: int, *, system_only: bool = False) -> float:
    """CPU time a process has used so far: user and system, or system (the kernel's) alone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = int(fields[12]) if system_only else int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def system_seconds(pid: int) -> float:
    return cpu_seconds(pid, system_only=True)


def nginx_workers(nginx: Nginx) -> list[int]:
    master = (nginx.prefix / "nginx.pid").read_text().strip()
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return [int(child) for child in children]


class CpuUse:
    """CPU time per request of each part of a chain (nginx, the check, the model), summed
    over the rounds: where a form's cost goes."""

    def __init__(self) -> None:
        self.seconds: dict[tuple[str, str], float] = {}
        self.requests: dict[str, int] = {}

    async def measure(
        self, form: str, parts: dict[str, list[int]], run: Awaitable[WrkResult]
    ) -> WrkResult:
        parts = {**parts, **{f"{part}_kernel": pids for part, pids in parts.items()}}

        def used(part: str, pids: list[int]) -> float:
            return sum(map(system_seconds if part.endswith("_kernel") else cpu_seconds, pids))

        before = {part: used(part, pids) for part, pids in parts.items()}
        result = await run
        for part, pids in parts.items():
            spent = used(part, pids) - before[part]
            self.seconds[form, part] = self.seconds.get((form, part), 0.0) + spent
        self.requests[form] = self.requests.get(form, 0) + result.requests
        return result

    def per_request_us(self, form: str) -> float:
        """The whole chain's CPU time per request (kernel shares are already in the parts)."""
        total = sum(
            seconds
            for (measured, part), seconds in self.seconds.items()
            if measured == form and not part.endswith("_kernel")
        )
        return total / self.requests[form] * 1e6

    def lines(self) -> list[str]:
        lines = [
            f"cpu_us_{part}_{form}: {seconds / self.requests[form] * 1e6:.0f}"
            for (form, part), seconds in self.seconds.items()
        ]
        plain = self.per_request_us("plain")
        lines += [
            f"added_cpu_us_{form}: {self.per_request_us(form) - plain:.0f}"
            for form in self.requests
            if form != "plain"
        ]
        return lines


def best(results: list[WrkResult]) -> WrkResult:
    return max(results, key=lambda r: r.rps)


async def bench(*, quick: bool) -> None:
    if shutil.which("wrk") is None or shutil.which("nginx") is None:
        raise SystemExit("nginx and wrk are needed: run scripts/ensure-services.sh")
    seconds = 3.0 if quick else 10.0
    rounds = 1 if quick else 3
    revocations = 3 if quick else 8
    state = Path(tempfile.mkdtemp(prefix="wm-bench-auth-"))
    processes: list[subprocess.Popen[bytes]] = []
    nginxes: list[Nginx] = []
    candidates = [name for name in ("uvicorn", "granian") if (EXTRA / name).is_dir()]
    lua = lua_available()
    async with scratch_database("wm_bench_auth") as url:
        pool = await create_pool(url, min_size=1, max_size=2)
        store = TokenStore(pool)
        pairs = await deployments(store)
        models = [MODEL if index == 0 else f"{MODEL}{index}" for index in range(DEPLOYMENTS)]
        refs = [DeploymentRef(tenant=TENANT, model=m, environment=ENVIRONMENT) for m in models]
        auth_port, health_port, model_port, empty_port = (free_port() for _ in range(4))
        candidate_ports = {name: free_port() for name in candidates}
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
        # The Ingress objects the platform writes (their auth-url names the deployment).
        sites = deployment_sites(refs, domain=DOMAIN, backend=f"127.0.0.1:{model_port}")
        # The Lua form without auth-response-headers: ingress-nginx's Lua numbers them from 1
        # and its template from 0, so with one every allowed request is a 500 (and so that form
        # cannot keep the token from the model: docs/inference-auth.md).
        bare_sites = [replace(site, auth_response_headers=()) for site in sites]

        def nginx(
            name: str, port: int, *, keepalive: int, lua: bool = True, plain: bool = False
        ) -> Nginx:
            headers = () if keepalive and lua else (DEPLOYMENT_HEADER,)
            auth = ExternalAuth(
                servers=(f"127.0.0.1:{port}",),
                response_headers=headers,
                keepalive=keepalive,
                lua=lua,
            )
            made = Nginx(
                prefix=state / name,
                sites=bare_sites if keepalive and lua else sites,
                auth=auth,
                plain_port=free_port() if plain else None,
            )
            nginxes.append(made)
            return made

        # Each form: (keepalive, Lua). plain_nginx_keepalive is plain nginx only (ingress-nginx
        # never renders it): auth_request over kept-alive connections, measured before.
        shapes = {
            "default": (0, True),
            "keepalive": (64, True),
            "plain_nginx_keepalive": (64, False),
        }
        if not lua:
            del shapes["keepalive"]
        default = nginx("default", auth_port, keepalive=0, plain=True)
        forms = {"default": default}
        for name, (keepalive, uses_lua) in shapes.items():
            if name != "default":
                forms[name] = nginx(name, auth_port, keepalive=keepalive, lua=uses_lua)
        # The same configurations with the zero-cost check (a second nginx) behind them.
        zero_cost = Nginx(prefix=state / "zero-cost", sites=(), auth=None, zero_cost_check=True)
        nginxes.append(zero_cost)
        for name, (keepalive, uses_lua) in shapes.items():
            forms[f"ceiling_{name}"] = nginx(
                f"ceiling_{name}", zero_cost.port, keepalive=keepalive, lua=uses_lua
            )
        for name, port in candidate_ports.items():
            forms[f"default_{name}"] = nginx(f"default-{name}", port, keepalive=0)
            if lua:
                forms[f"keepalive_{name}"] = nginx(f"keepalive-{name}", port, keepalive=64)
        try:
            processes.append(
                start([python, "-m", "inference_auth"], env=env, log=state / "auth.log")
            )
            model_command = [
                python,
                str(Path(__file__).with_name("_model_stand_in.py")),
                "--port",
                str(model_port),
            ]
            processes.append(start(model_command, env=dict(os.environ), log=state / "model.log"))
            empty_command = [python, "-m", "sim.ingress", "empty", "--port", str(empty_port)]
            processes.append(start(empty_command, env=dict(os.environ), log=state / "empty.log"))
            await wait_ok(
                f"http://127.0.0.1:{health_port}/readyz", process=processes[0], what="auth"
            )
            await wait_ok(f"http://127.0.0.1:{model_port}/", process=processes[1], what="model")
            await wait_ok(f"http://127.0.0.1:{empty_port}/", process=processes[2], what="empty")
            for name, port in candidate_ports.items():
                candidate_env = {
                    **env,
                    "HTTP_PORT": str(port),
                    "HEALTH_PORT": str(free_port()),
                    "PYTHONPATH": os.pathsep.join(
                        [str(EXTRA), *filter(None, [os.environ.get("PYTHONPATH")])]
                    ),
                }
                command = [python, str(Path(__file__).with_name(f"_inference_auth_{name}.py"))]
                processes.append(start(command, env=candidate_env, log=state / f"{name}.log"))
                await wait_ok(f"http://127.0.0.1:{port}/", process=processes[-1], what=name)
            for made in nginxes:
                await made.start()
            through = mixed_script(state / "mixed.lua", pairs=pairs, direct=False)
            direct = mixed_script(state / "direct.lua", pairs=pairs, direct=True)
            assert default.plain_port is not None
            plain_url = f"http://127.0.0.1:{default.plain_port}{PREDICT_PATH}"
            model_url = f"http://127.0.0.1:{model_port}{PREDICT_PATH}"
            refused = 1.5 / UNKNOWN_EVERY
            for name, made in forms.items():  # warm up: every token seen once by each server
                if name.startswith("ceiling_"):
                    continue  # no token logic
                await wrk(f"{made.url}{PREDICT_PATH}", seconds=1, script=through, refused=refused)
            plain: list[WrkResult] = []
            model: list[WrkResult] = []
            checked: dict[str, list[WrkResult]] = {name: [] for name in forms}
            handler: list[WrkResult] = []
            empty: list[WrkResult] = []
            cpu = CpuUse()
            model_pid = processes[1].pid
            server_pids = dict.fromkeys(
                ("default", "keepalive", "plain_nginx_keepalive"), processes[0].pid
            )
            for name, process in zip(candidates, processes[3:], strict=True):
                server_pids[f"default_{name}"] = server_pids[f"keepalive_{name}"] = process.pid
            for _ in range(rounds):
                chain = {"nginx": nginx_workers(default), "model": [model_pid]}
                plain.append(
                    await cpu.measure(
                        "plain", chain, wrk(plain_url, seconds=seconds, script=through)
                    )
                )
                for name, made in forms.items():
                    ceiling = name.startswith("ceiling_")
                    parts = {
                        "nginx": nginx_workers(made),
                        "check": nginx_workers(zero_cost) if ceiling else [server_pids[name]],
                        "model": [model_pid],
                    }
                    result = await cpu.measure(
                        name,
                        parts,
                        wrk(
                            f"{made.url}{PREDICT_PATH}",
                            seconds=seconds,
                            script=through,
                            refused=refused,
                        ),
                    )
                    checked[name].append(result)
                model.append(await wrk(model_url, seconds=seconds, script=through))
                handler.append(
                    await wrk(
                        f"http://127.0.0.1:{auth_port}/",
                        seconds=seconds,
                        script=direct,
                        refused=refused,
                    )
                )
                # The same requests, headers included: parsing them is part of the cost.
                empty.append(
                    await wrk(f"http://127.0.0.1:{empty_port}/", seconds=seconds, script=direct)
                )
            # Revocation under load, through the default form.
            load_seconds = revocations * 1.0 + 3
            loaded = asyncio.create_task(
                wrk(
                    f"{default.url}{PREDICT_PATH}",
                    seconds=load_seconds,
                    script=through,
                    refused=refused,
                )
            )
            await asyncio.sleep(1)
            polls: list[float] = []
            times = [
                await revocation_ms(store, nginx=default, host=pairs[0][0], polls=polls)
                for _ in range(revocations)
            ]
            under_load = await loaded
        finally:
            for made in nginxes:
                await made.stop()
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
            await pool.close()
    best_plain = best(plain)
    best_checked = {name: best(results) for name, results in checked.items()}
    best_handler = best(handler)
    best_empty = best(empty)
    times.sort()
    print(f"connections: {CONNECTIONS}")
    print(f"deployments: {DEPLOYMENTS}")
    print(f"tokens: {len(pairs)}")
    print(f"unknown_token_share: {1 / UNKNOWN_EVERY:.2f}")
    print(f"model_rps: {best(model).rps:.0f}")
    print(f"plain_rps: {best_plain.rps:.0f}")
    print(f"plain_p50_ms: {best_plain.p50_ms:.2f}")
    print(f"plain_p99_ms: {best_plain.p99_ms:.2f}")
    for name, result in best_checked.items():
        print(f"{name}_rps: {result.rps:.0f}")
        print(f"added_p50_ms_{name}: {result.p50_ms - best_plain.p50_ms:.2f}")
        print(f"added_p99_ms_{name}: {result.p99_ms - best_plain.p99_ms:.2f}")
    if not lua:
        print(
            "keepalive_form: skipped (no nginx Lua module: apt-get install libnginx-mod-http-lua)"
        )
    for name in ("uvicorn", "granian"):
        if name not in candidates:
            print(f"{name}: skipped (pip install --target {EXTRA} {name})")
    for line in cpu.lines():
        print(line)
    print(f"rps_during_revocations: {under_load.rps:.0f}")
    print(f"revocations: {len(times)}")
    print(f"revocation_p50_ms: {times[len(times) // 2]:.0f}")
    print(f"revocation_ms: {times[-1]:.0f}")
    print(f"handler_rps: {best_handler.rps:.0f}")
    print(f"empty_handler_rps: {best_empty.rps:.0f}")
    print(f"handler_ratio: {best_handler.rps / best_empty.rps:.2f}")
    ratios = {
        name: result.rps / best_plain.rps
        for name, result in best_checked.items()
        if not name.startswith("ceiling_")
    }
    for name, value in ratios.items():
        print(f"ratio_{name}: {value:.2f}")
    for name in shapes:
        ceiling_rps = best_checked[f"ceiling_{name}"].rps
        print(f"ceiling_ratio_{name}: {ceiling_rps / best_plain.rps:.2f}")
        print(f"ratio_vs_ceiling_{name}: {best_checked[name].rps / ceiling_rps:.2f}")
    for name in candidates:
        own = best_checked["default"].rps
        print(f"{name}_vs_own_default: {best_checked[f'default_{name}'].rps / own:.2f}")
    production = [ratios[name] for name in ("default", "keepalive") if name in ratios]
    print(f"ratio: {min(production):.2f}")
    shutil.rmtree(state, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1 round of 3 s (under a minute)")
    args = parser.parse_args()
    asyncio.run(bench(quick=args.quick))


if __name__ == "__main__":
    main()
