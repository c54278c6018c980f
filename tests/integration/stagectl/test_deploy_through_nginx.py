"""End to end through the real nginx with the endpoint's token: a release deploys to staging
and is called there with the token ``GET .../endpoint`` shows; approved and promoted, it is
called in production. nginx is configured from the Ingress objects stagectl wrote on the sim
host (read back from the cluster, rendered as ingress-nginx renders them: ``auth-url`` naming
the deployment, ``upstream-vhost`` the predictor's cluster-local host), in front of a real
``wm-inference-auth`` and the KServe stand-in's gateway, as in production."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from sim.ingress import ExternalAuth, Nginx, free_port, sites_from_ingress
from sim.serving.controller import ServingSimulator
from tests.integration.compiler.pipeline_stack import headers
from tests.integration.inference_auth.nginx_stack import _start_replica
from tests.integration.stagectl.release_stack import ReleaseStack
from tests.integration.stagectl.test_deploy import (
    DOMAIN,
    MODEL,
    MODELS,
    SERVE_NS,
    SERVING,
    production,
)
from tests.integration.stagectl.test_stages import waiting_for_approval


def ingresses(stack: ReleaseStack) -> list[dict[str, Any]]:
    store = stack.stack.world.host.store
    items, _ = store.list(store.resolve("networking.k8s.io", "v1", "ingresses"), SERVE_NS)
    return items


@contextlib.asynccontextmanager
async def nginx_for(
    stack: ReleaseStack, serving: ServingSimulator, auth_port: int, prefix: Path
) -> AsyncIterator[Nginx]:
    """nginx with a site per Ingress stagectl wrote; each ExternalName backend (the Knative
    gateway's Service) is the stand-in gateway's address."""
    sites = []
    for ingress in ingresses(stack):
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                service = path["backend"]["service"]
                key = f"{service['name']}:{service['port']['number']}"
                sites += sites_from_ingress(
                    {**ingress, "spec": {"rules": [{**rule, "http": {"paths": [path]}}]}},
                    backends={key: serving.gateway.address},
                )
    nginx = Nginx(
        prefix=prefix, sites=sites, auth=ExternalAuth(servers=(f"127.0.0.1:{auth_port}",))
    )
    async with nginx:
        yield nginx


async def call(nginx: Nginx, host: str, model: str, token: str | None) -> tuple[int, Any]:
    request_headers = {"Host": host}
    if token is not None:
        request_headers["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{nginx.url}/v1/models/{model}:predict",
            json={"instances": [[1, 1]]},
            headers=request_headers,
        ) as answer,
    ):
        body = await answer.json() if answer.content_type == "application/json" else None
        return answer.status, body


async def endpoint(stack: ReleaseStack, model_id: str, environment: str) -> dict[str, Any]:
    status, body = await stack.stack.call(
        "GET",
        f"models/{model_id}/deployments/{environment}/endpoint",
        as_=headers(permissions=MODELS),
    )
    assert status == 200, body
    return dict(body)


async def test_staging_then_production_answer_through_nginx_with_the_endpoint_token(
    deploying: ReleaseStack,
    serving: ServingSimulator,
    reader_url: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    http_port, health_port = free_port(), free_port()
    env = {
        **os.environ,
        "DATABASE_URL": reader_url,
        "REDIS_URL": redis_url,
        "ML_SERVING_DOMAIN": DOMAIN,
        "HTTP_PORT": str(http_port),
        "HEALTH_PORT": str(health_port),
        "LOG_JSON": "true",
        "POD_NAME": "inference-auth-e2e",
    }
    process = await _start_replica(env, log=tmp_path / "inference_auth.log")
    try:
        pipeline = await deploying.save(approval=True, serving=SERVING, model=MODEL)
        name = await deploying.run(pipeline)
        await waiting_for_approval(deploying, name)
        model_id = await deploying.pool.fetchval("SELECT model_id FROM approvals")
        staging = await endpoint(deploying, model_id, "staging")
        staging_host = staging["url"].removeprefix("https://")
        async with nginx_for(deploying, serving, http_port, tmp_path / "nginx-1") as nginx:
            status, body = await call(nginx, staging_host, "churn-staging", staging["token"])
            assert status == 200, body
            assert body["predictions"] == [3.0]
            assert (await call(nginx, staging_host, "churn-staging", None))[0] == 401
            assert (await call(nginx, staging_host, "churn-staging", "wmi_x_y"))[0] == 401

        # Approved, then promoted through the route, it answers in production.
        status, body = await deploying.stack.call(
            "POST",
            f"models/{model_id}/approvals/{name}/approve",
            as_=headers(permissions=MODELS),
            json={},
        )
        assert status == 200, body
        status, body = await deploying.stack.call(
            "POST", f"models/{model_id}/versions/1/promote", as_=headers(permissions=MODELS)
        )
        assert status == 202, body
        await production(deploying, model_id, 1)
        live = await endpoint(deploying, model_id, "production")
        live_host = live["url"].removeprefix("https://")
        async with nginx_for(deploying, serving, http_port, tmp_path / "nginx-2") as nginx:
            status, body = await call(nginx, live_host, "churn-production", live["token"])
            assert status == 200, body
            assert body["predictions"] == [3.0]
            # A token opens its own deployment only: staging's is refused in production.
            assert (await call(nginx, live_host, "churn-production", staging["token"]))[0] == 403
            # The example the route gives is the request that works.
            example = live["example"]
            assert example["url"] == f"{live['url']}/v1/models/churn-production:predict"
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 15)
