"""The demo's model endpoint: a deployment registered through the token module, put behind a
real nginx configured as ingress-nginx renders the Ingress the platform writes (its auth-url
names the deployment), and called with a valid token (200), another deployment's (403) and a
revoked one (401).

``make demo`` calls ``inference_showcase`` once inference_auth is started."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

SERVING_DOMAIN = "models.demo.test"
INFERENCE_AUTH_HEALTH = "http://127.0.0.1:8134/readyz"


async def inference_showcase(
    url: str,
    processes: dict[str, subprocess.Popen[bytes]],
    *,
    start: Callable[[str, list[str], dict[str, str]], subprocess.Popen[bytes]],
    log: Callable[[str], None],
    state: Path,
    auth_port: int,
) -> None:
    """A model endpoint behind nginx and inference_auth: one deployment and its backend
    registered through the token module (as serving will), then a valid, another
    deployment's and a revoked token sent through nginx. ``start`` runs a process the demo
    stops at the end (kept in ``processes``), ``state`` is the demo's state folder and
    ``auth_port`` inference_auth's HTTP port."""
    import aiohttp

    from shared.db.inference_tokens import TokenStore
    from shared.db.pool import create_pool
    from shared.inference_tokens import DeploymentRef
    from sim.ingress import ExternalAuth, Nginx, deployment_sites, free_port

    async with aiohttp.ClientSession() as http:
        for _ in range(300):
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(INFERENCE_AUTH_HEALTH) as answer:
                    if answer.status == 200:
                        break
            await asyncio.sleep(0.2)
        else:
            log("inference_auth did not become ready: see .run/demo/inference_auth.log")
            return
    model_port = free_port()
    processes["model"] = start(
        "model",
        [sys.executable, "-m", "sim.ingress", "model", "--port", str(model_port)],
        dict(os.environ),
    )
    pool = await create_pool(url, min_size=1, max_size=2)
    try:
        store = TokenStore(pool)
        fraud = {"tenant": "demo", "model": "fraud", "environment": "production"}
        churn = {"tenant": "demo", "model": "churn", "environment": "production"}
        hosts = []
        for deployment in (fraud, churn):
            registered = await store.register_deployment(**deployment, domain=SERVING_DOMAIN)
            hosts.append(registered.host)
        valid = await store.issue(actor="demo", **fraud)
        wrong = await store.issue(actor="demo", **churn)
        revoked = await store.issue(actor="demo", **fraud)
        nginx = Nginx(
            prefix=state / "nginx",
            # Each deployment's Ingress as the platform writes it: its auth-url names it.
            sites=deployment_sites(
                [DeploymentRef(**deployment) for deployment in (fraud, churn)],
                domain=SERVING_DOMAIN,
                backend=f"127.0.0.1:{model_port}",
            ),
            auth=ExternalAuth(servers=(f"127.0.0.1:{auth_port}",)),
        )
        async with nginx, aiohttp.ClientSession() as http:
            log(
                f"model endpoint {hosts[0]} (nginx {nginx.url}, auth_request → "
                "inference_auth, as ingress-nginx renders the deployment's Ingress: its auth-url "
                "names the deployment; tokens from the token module)"
            )

            async def call(label: str, token: str) -> None:
                for _ in range(50):  # the stand-in model may still be starting
                    async with http.post(
                        f"{nginx.url}/v1/models/fraud:predict",
                        json={"instances": [[1.0, 2.0]]},
                        headers={"Host": hosts[0], "Authorization": f"Bearer {token}"},
                    ) as answer:
                        if answer.status not in (502, 503, 504):
                            break
                    await asyncio.sleep(0.2)
                log(f"POST {hosts[0]}/v1/models/fraud:predict with {label} → {answer.status}")

            await call("a valid token", valid.token)
            await call("demo/churn's token (another deployment)", wrong.token)
            await call("a token, before revoking it", revoked.token)
            await store.revoke(revoked.token_id, actor="demo")
            await asyncio.sleep(1)  # revocation reaches every replica within a second
            await call("the same token, revoked", revoked.token)
    finally:
        await pool.close()
