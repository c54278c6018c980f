"""Demo: a model released to staging and production. A tenant saves an ML pipeline whose
release has a ``serving`` block and runs it: wm-stagectl registers and gates the model, deploys
it to staging (the tenant's kubeopera-serve-demo namespace, an InferenceService served by the
KServe stand-in, an Ingress behind the token check), and asks for approval. The showcase calls
staging through a real nginx rendered from the Ingress stagectl wrote, with the token ``GET
.../endpoint`` shows; approves; promotes the version to production through the route; and
calls production, with its own token and with staging's (refused). Called once from
scripts/demo.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from showcase_stages import ml_pipeline

SERVE_NAMESPACE = "kubeopera-serve-demo"
MODEL_PERMISSIONS = "models.read,models.deploy,models.approve"
# What the simulated train step writes: the stand-in runtime's JSON model (prediction 1*x1+2*x2).
MODEL = '{"weights": [1.0, 2.0], "bias": 0.0}'


def serving_pipeline() -> dict[str, Any]:
    body = ml_pipeline("churn-serving", auc=0.93, threshold=0.8, approval=True)
    body["definition"]["spec"]["steps"][0]["env"] = [{"name": "SIM_ARTIFACT_MODEL", "value": MODEL}]
    body["release"]["serving"] = {
        "model_format": {"name": "sklearn"},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
        "min_replicas": 1,
        "max_replicas": 1,
        "readiness_deadline_seconds": 120,
    }
    return body


async def serving_showcase(
    *,
    api: str,
    headers: Mapping[str, str],
    kubeconfig: str,
    gateway: str,
    auth_port: int,
    state: Path,
    log: Callable[[str], None],
) -> None:
    """See the module docstring; ``gateway`` is the KServe stand-in's gateway URL (what the
    ExternalName backends name), ``auth_port`` inference_auth's HTTP port."""
    import aiohttp

    from shared.k8s import client_from_kubeconfig
    from shared.k8s_objects import KubeObjects
    from sim.ingress import ExternalAuth, Nginx, sites_from_ingress

    await asyncio.sleep(20)  # after the other showcases' first lines
    gateway_address = gateway.removeprefix("http://")
    acting = {**headers, "X-Kubeopera-Permissions": f"{headers['X-Kubeopera-Permissions']},"
              f"{MODEL_PERMISSIONS}"}  # fmt: skip
    kube = await client_from_kubeconfig(await asyncio.to_thread(Path(kubeconfig).read_text))
    try:
        async with aiohttp.ClientSession(headers=acting) as http:

            async def call(method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
                async with http.request(method, f"{api}/api/v1/{path}", **kwargs) as answer:
                    return answer.status, await answer.json()

            status, saved = await call("POST", "ml-pipelines", json=serving_pipeline())
            if status != 201:
                log(f"serving: POST /api/v1/ml-pipelines → {status} {saved}")
                return
            status, started = await call("POST", f"ml-pipelines/{saved['id']}/run", json={})
            if status != 201:
                log(f"serving: POST .../run → {status} {started}")
                return
            run = started["workflow"]["name"]
            log(f"serving: ML pipeline 'churn-serving' (serving: sklearn) saved; run {run}")
            model_id = await _until(lambda: _model_id(call), what="the model was never registered")
            staging = await _until(
                lambda: _deployment(call, model_id, "staging"), what="staging was never ready"
            )
            log(
                f"serving: stagectl deployed v{staging['version']} to staging: "
                f"{staging['url']} (InferenceService churn-serving-staging in {SERVE_NAMESPACE})"
            )
            _, staging_endpoint = await call(
                "GET", f"models/{model_id}/deployments/staging/endpoint"
            )
            objects = KubeObjects(kube)

            async def nginx_sites() -> list[Any]:
                sites = []
                for ingress in await objects.list(
                    "networking.k8s.io/v1", "Ingress", SERVE_NAMESPACE
                ):
                    for rule in ingress["spec"]["rules"]:
                        for path in rule["http"]["paths"]:
                            service = path["backend"]["service"]
                            key = f"{service['name']}:{service['port']['number']}"
                            sites += sites_from_ingress(
                                {
                                    **ingress,
                                    "spec": {"rules": [{**rule, "http": {"paths": [path]}}]},
                                },
                                backends={key: gateway_address},
                            )
                return sites

            async def predict(nginx: Nginx, endpoint: Mapping[str, Any], token: str | None) -> str:
                host = str(endpoint["url"]).removeprefix("https://")
                request = {"Host": host}
                if token:
                    request["Authorization"] = f"Bearer {token}"
                model = str(endpoint["example"]["url"]).rsplit("/", 1)[1]
                async with (
                    aiohttp.ClientSession() as plain,
                    plain.post(
                        f"{nginx.url}/v1/models/{model}",
                        json={"instances": [[1.0, 1.0]]},
                        headers=request,
                    ) as answer,
                ):
                    return f"{answer.status} {(await answer.text()).strip()[:80]}"

            auth = ExternalAuth(servers=(f"127.0.0.1:{auth_port}",))
            async with Nginx(
                prefix=state / "nginx-serving-1", sites=await nginx_sites(), auth=auth
            ) as nginx:
                log(f"serving: {staging_endpoint['example']['curl'][:120]}...")
                answer = await predict(nginx, staging_endpoint, staging_endpoint["token"])
                log(
                    f"serving: POST {staging['url']} (nginx → inference_auth → model) "
                    f"with its token → {answer}"
                )
                log(
                    "serving: the same without a token → "
                    + await predict(nginx, staging_endpoint, None)
                )

            approvals = await _until(
                lambda: _pending(call, model_id), what="the release never asked for approval"
            )
            status, _ = await call(
                "POST",
                f"models/{model_id}/approvals/{approvals[0]['run']['name']}/approve",
                json={"reason": "staging looks right"},
            )
            log(f"serving: dana@demo approves v{staging['version']} → {status}")
            status, _ = await call(
                "POST", f"models/{model_id}/versions/{staging['version']}/promote"
            )
            log(
                f"serving: POST /models/{model_id}/versions/{staging['version']}/promote → {status}"
            )
            live = await _until(
                lambda: _deployment(call, model_id, "production"), what="production was never ready"
            )
            _, live_endpoint = await call(
                "GET", f"models/{model_id}/deployments/production/endpoint"
            )
            async with Nginx(
                prefix=state / "nginx-serving-2", sites=await nginx_sites(), auth=auth
            ) as nginx:
                answer = await predict(nginx, live_endpoint, live_endpoint["token"])
                log(
                    f"serving: production {live['url']} serves v{live['version']}; "
                    f"with its token → {answer}"
                )
                answer = await predict(nginx, live_endpoint, staging_endpoint["token"])
                log(f"serving: production with staging's token → {answer}")
    finally:
        await kube.close()


async def _model_id(call: Callable[..., Any]) -> str | None:
    status, page = await call("GET", "models")
    for item in page.get("items") or [] if status == 200 else []:
        if item["name"] == "churn-serving":
            return str(item["id"])
    return None


async def _pending(call: Callable[..., Any], model_id: str) -> Any:
    status, model = await call("GET", f"models/{model_id}")
    return (model.get("pending_approvals") or None) if status == 200 else None


async def _deployment(call: Callable[..., Any], model_id: str, environment: str) -> Any:
    status, model = await call("GET", f"models/{model_id}")
    for deployment in model.get("deployments") or [] if status == 200 else []:
        if deployment["environment"] == environment and deployment["state"] != "deploying":
            return deployment
    return None


async def _until(check: Callable[[], Any], *, what: str, within: float = 240) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(1)
    raise RuntimeError(what)
