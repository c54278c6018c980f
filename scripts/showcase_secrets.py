"""The demo's data secrets: a tenant stores a credential, lists it (names and keys, never a
value), saves a pipeline whose step reads it, has a reference to a Secret that is not its own
refused, and cannot delete the credential while the pipeline's current version uses it.

``make demo`` calls ``secrets_showcase`` once the apiserver and the compiler answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp

TENANT = "demo"
SECRET = "warehouse"
# A credential the demo writes and never sees again: the script checks no answer echoes it.
VALUE = "demo-warehouse-password-0xC0FFEE"

PIPELINE: dict[str, Any] = {
    "name": "warehouse-load",
    "description": "loads the day's sales into the warehouse with the tenant's credential",
    "definition": {
        "type": "wizard",
        "spec": {
            "apiVersion": "pipelines.kubeopera.io/v1",
            "steps": [
                {
                    "name": "load",
                    "image": "ghcr.io/demo/load:1.0",
                    "command": ["load"],
                    "env": [
                        {"name": "WAREHOUSE_USER", "from_secret": {"name": SECRET, "key": "user"}},
                        {
                            "name": "WAREHOUSE_PASSWORD",
                            "from_secret": {"name": SECRET, "key": "password"},
                        },
                    ],
                }
            ],
        },
    },
}
HOSTILE = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: borrow}
spec:
  entrypoint: main
  templates:
    - name: main
      container:
        image: alpine:3.20
        command: [sh, -c, env]
        envFrom: [{secretRef: {name: kubeopera-artifact-credentials}}]
        env: [{name: T, valueFrom: {secretKeyRef: {name: argo-server-sso, key: token}}}]
"""


async def secrets_showcase(
    api: str, api_key: str, log: Callable[[str], None], *, delay: float = 0.0
) -> None:
    """Drive ``/api/v1/data-secrets`` and ``/api/v1/data-pipelines`` on ``api`` as a tenant,
    after ``delay`` seconds (the demo's other showcases go first)."""
    await asyncio.sleep(delay)
    headers = {
        "X-API-Key": api_key,
        "X-Kubeopera-Tenant": TENANT,
        "X-Kubeopera-Actor": "dana@demo",
        "X-Kubeopera-Permissions": "pipelines.read,pipelines.write,secrets.write",
    }
    seen: list[str] = []

    async def call(http: aiohttp.ClientSession, method: str, path: str, **kw: Any) -> Any:
        async with http.request(method, f"{api}/api/v1/{path}", **kw) as answer:
            text = await answer.text()
            seen.append(text)
            return answer.status, (await answer.json(content_type=None))

    async with aiohttp.ClientSession(headers=headers) as http:
        status, secret = await call(
            http,
            "PUT",
            f"data-secrets/{SECRET}",
            json={"data": {"user": "loader", "password": VALUE}},
        )
        if status not in (200, 201):
            log(f"PUT /api/v1/data-secrets/{SECRET} → {status} {secret}")
            return
        log(
            f"data secrets: PUT /api/v1/data-secrets/{SECRET} → {status}: keys {secret['keys']}, "
            f"by {secret['updated_by']} (the answer holds no value)"
        )
        status, listing = await call(http, "GET", "data-secrets")
        for item in listing["items"]:
            log(
                f"data secrets: GET /api/v1/data-secrets → {item['name']}: keys {item['keys']}, "
                f"created {item['created_at']} by {item['created_by']}"
            )
        status, saved = await call(http, "POST", "data-pipelines", json=PIPELINE)
        log(
            f"data secrets: pipeline {PIPELINE['name']!r} whose step reads {SECRET}/user and "
            f"{SECRET}/password (env from data secret) → {status}"
        )
        borrowing = {"name": "borrow", "definition": {"type": "yaml", "template": HOSTILE}}
        status, refused = await call(http, "POST", "data-pipelines/validate", json=borrowing)
        log(f"data secrets: a template reading Secrets that are not the tenant's → {status}:")
        for violation in refused.get("details", {}).get("violations", []):
            log(f"    {violation['path']}: {violation['rule']}")
        status, conflict = await call(http, "DELETE", f"data-secrets/{SECRET}")
        log(f"data secrets: DELETE /api/v1/data-secrets/{SECRET} → {status}: {conflict['message']}")
        if status == 409 and isinstance(saved, dict) and "id" in saved:
            await call(http, "DELETE", f"data-pipelines/{saved['id']}")
            status, _ = await call(http, "DELETE", f"data-secrets/{SECRET}")
            log(f"data secrets: with the pipeline deleted, DELETE → {status}")
    echoed = any(VALUE in text for text in seen)
    log(f"data secrets: the value appeared in {'SOME' if echoed else 'no'} answer")


if __name__ == "__main__":  # against a running demo: python scripts/showcase_secrets.py
    asyncio.run(secrets_showcase("http://127.0.0.1:8120", "demo-api-key", print))
