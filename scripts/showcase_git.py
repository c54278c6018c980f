"""The demo's Git-defined pipeline: a real Git server (``git http-backend`` over HTTPS with basic
auth, ``python -m sim.git_server``) holds a tenant's pipeline; the tenant saves it as a Git
pipeline (version 1 at the first commit), pushes a commit and pulls it with ``POST .../sync``
(version 2), pushes another and the compiler's poller picks it up by itself (version 3), then
pushes a document the allowlist refuses, which becomes a sync error on the pipeline, not a
version.

``ENVIRONMENT`` is what the compiler needs for it (the demo adds it to every deployable's
environment): the server's CA and a short poll interval.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".run" / "demo"
GIT_PORT = 8127
CA_FILE = STATE / "git-ca.pem"
INTERVAL = 15
ENVIRONMENT = {
    "GIT_CA_BUNDLE": str(CA_FILE),
    "GIT_SYNC_INTERVAL": f"{INTERVAL}s",
    # Exactly the demo's Git server: any other address inside (another port of 127.0.0.1,
    # another spelling of it, the cluster's ranges) stays refused, as in production.
    "GIT_ALLOW_REMOTES": f"127.0.0.1:{GIT_PORT}",
}
USER, PASSWORD = "demo-bot", "demo-git-password-4e1d"
PATH = "pipelines/nightly.yaml"
DOCUMENT = """apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: nightly-report}
spec:
  entrypoint: main
  arguments: {parameters: [{name: region, value: "%s"}]}
  templates:
    - name: main
      container:
        image: alpine:3.20
        command: [sh, -c, "echo report for {{workflow.parameters.region}}"]
"""
HOSTILE = DOCUMENT.replace("  entrypoint: main\n", "  entrypoint: main\n  hostNetwork: true\n")


async def git_showcase(
    *,
    api: str,
    headers: dict[str, str],
    kubeconfig: str,  # the host's kubeconfig file
    processes: dict[str, subprocess.Popen[bytes]],
    start: Callable[[str, list[str], dict[str, str]], subprocess.Popen[bytes]],
    log: Callable[[str], None],
) -> None:
    import aiohttp

    sys.path.insert(0, str(ROOT))
    from sim.git_server import GitServer

    await asyncio.sleep(20)  # after the other showcases' first steps
    root = STATE / "git"
    shutil.rmtree(root, ignore_errors=True)  # a fresh repository each demo
    root.mkdir(parents=True)
    repos = GitServer(root, {})
    first = repos.create("reports", {PATH: DOCUMENT % "eu-north"})
    command = [
        sys.executable, "-m", "sim.git_server", "--root", str(root), "--port", str(GIT_PORT),
        "--user", f"{USER}:{PASSWORD}", "--ca-file", str(CA_FILE),
    ]  # fmt: skip
    processes["git"] = start("git", command, {"PATH": "/usr/bin:/bin"})
    await asyncio.sleep(2)
    url = f"https://127.0.0.1:{GIT_PORT}/reports.git"
    log(f"git server {url} (git http-backend, basic auth), first commit {first[:12]}")
    await _credentials(kubeconfig)
    log("tenant demo stored its Git credentials as data secret 'git-creds' (username, password)")

    base = f"{api}/api/v1/data-pipelines"
    body = {
        "name": "reports-from-git",
        "definition": {
            "type": "git",
            "repository": url,
            "branch": "main",
            "path": PATH,
            "credentials_secret": "git-creds",
        },
    }
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(base, json=body) as answer:
            saved = await answer.json()
        if answer.status != 201:
            log(f"POST /api/v1/data-pipelines (git) → {answer.status} {saved}")
            return
        pipeline = saved["id"]
        log(
            f"POST /api/v1/data-pipelines (git: {PATH} on main) → 201: version "
            f"{saved['version']} at commit {saved['commit'][:12]}"
        )
        # The platform's network is out of reach: another spelling or port of the demo's own
        # server, the metadata address, the Kubernetes API. Each reads as unreachable.
        for inside in (
            f"https://127.1:{GIT_PORT}/reports.git",
            f"https://[::ffff:127.0.0.1]:{GIT_PORT}/reports.git",
            "https://localhost:6443/reports.git",
            "https://169.254.169.254/latest/meta-data.git",
            "https://kubernetes.default.svc/api.git",
        ):
            probe = {**body, "definition": {**body["definition"], "repository": inside}}
            async with http.post(f"{base}/validate", json=probe) as answer:
                refused = await answer.json()
            log(f"POST /api/v1/data-pipelines/validate ({inside}) → {answer.status}: "
                f"{refused.get('message')}")  # fmt: skip
        second = repos.commit("reports", {PATH: DOCUMENT % "eu-west"}, message="west")
        log(f"pushed commit {second[:12]} (region eu-west)")
        async with http.post(f"{base}/{pipeline}/sync") as answer:
            synced = await answer.json()
        log(
            f"POST /api/v1/data-pipelines/{pipeline}/sync → {answer.status}: "
            f"{synced.get('outcome')}, version {synced.get('version')} at "
            f"{str(synced.get('commit'))[:12]}"
        )
        third = repos.commit("reports", {PATH: DOCUMENT % "us-east"}, message="east")
        log(f"pushed commit {third[:12]} (region us-east); the poller checks every {INTERVAL}s")
        version = await _wait_for(http, f"{base}/{pipeline}", lambda d: d["current_version"] == 3)
        if version is not None:
            log(
                f"the compiler's poller picked it up: version 3 at commit "
                f"{version['current']['commit'][:12]}, no request needed"
            )
        hostile = repos.commit("reports", {PATH: HOSTILE}, message="hostNetwork")
        log(f"pushed commit {hostile[:12]} asking for hostNetwork")
        detail = await _wait_for(
            http, f"{base}/{pipeline}", lambda d: (d.get("git") or {}).get("last_error")
        )
        if detail is not None:
            error = detail["git"]["last_error"]
            log(
                f"GET /api/v1/data-pipelines/{pipeline} → still version "
                f"{detail['current_version']}; git.last_error: {error['reason']}: "
                f"{error['message'][:160]}"
            )


async def _credentials(kubeconfig: str) -> None:
    from shared import labels as L
    from shared.k8s import client_from_kubeconfig
    from shared.k8s_objects import KubeObjects

    kube = await client_from_kubeconfig(await asyncio.to_thread(Path(kubeconfig).read_text))
    try:
        objects = KubeObjects(kube)
        namespace = "kubeopera-data-demo"
        await objects.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        encode = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
        await objects.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "git-creds",
                    "namespace": namespace,
                    "labels": {L.DATA_SECRET: L.DATA_SECRET_VALUE},
                },
                "data": {"username": encode(USER), "password": encode(PASSWORD)},
            }
        )
    finally:
        await kube.close()


async def _wait_for(http: Any, url: str, done: Callable[[dict[str, Any]], Any]) -> Any:
    for _ in range(INTERVAL * 3):
        async with http.get(url) as answer:
            detail = await answer.json()
        if done(detail):
            return detail
        await asyncio.sleep(1)
    return None
