"""Demo: the stage controller at work. A tenant saves two ML pipelines with a release through the
API and runs each: one passes its gate, waits for approval and is approved; the other fails its
gate. Each stage is printed as wm-stagectl records it, with what it did (the version it
registered and where its files are, the verdict and its reasons, the decision, how the release
ended). Called once from scripts/demo.py."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

STAGES = ("register", "gate", "approval", "cleanup")


def ml_pipeline(name: str, *, auc: float, threshold: float, approval: bool) -> dict[str, Any]:
    return {
        "name": name,
        "description": "train a churn model, evaluate it, release it",
        "definition": {
            "type": "wizard",
            "spec": {
                "apiVersion": "pipelines.kubeopera.io/v1",
                "steps": [
                    {
                        "name": "train",
                        "image": "ghcr.io/demo/train:1.0",
                        "command": ["train"],
                        "env": [{"name": "SIM_ARTIFACT_MODEL", "value": "model weights"}],
                        "outputs": {"artifacts": [{"name": "model", "path": "/out/model.pkl"}]},
                    },
                    {
                        "name": "evaluate",
                        "image": "ghcr.io/demo/evaluate:1.0",
                        "command": ["evaluate"],
                        "depends_on": ["train"],
                        # What the simulated step writes as its scorecard artifact.
                        "env": [
                            {
                                "name": "SIM_ARTIFACT_SCORECARD",
                                "value": json.dumps({"auc": auc, "f1": 0.81}),
                            }
                        ],
                        "outputs": {
                            "artifacts": [{"name": "scorecard", "path": "/out/eval_scorecard.json"}]
                        },
                    },
                ],
            },
        },
        "release": {
            "model": name,
            "model_artifact": {"step": "train", "artifact": "model"},
            "scorecard": {"step": "evaluate", "artifact": "scorecard"},
            "gate": {"thresholds": [{"metric": "auc", "op": ">=", "value": threshold}]},
            "approval": {"required": approval},
        },
    }


def describe(stage: str, outcome: Mapping[str, Any], version: Mapping[str, Any] | None) -> str:
    outputs = outcome.get("outputs") or {}
    if outcome.get("phase") == "Failed":
        return f"{stage} failed: {outcome.get('message')}"
    if stage == "register" and version is not None:
        return (
            f"register → version {outputs.get('version')} in {version['prefix']} "
            f"({version['model_file']}, eval_scorecard.json, lineage.json)"
        )
    if stage == "gate":
        reasons = "; ".join(json.loads(outputs.get("reasons") or "[]")) or "every threshold met"
        return f"gate → {outputs.get('verdict')} ({reasons})"
    if stage == "approval":
        return f"approval → {outputs.get('decision')} ({outcome.get('message')})"
    return f"cleanup → release {outputs.get('outcome')}"


async def showcase_stages(
    *, api: str, headers: Mapping[str, str], database_url: str, log: Callable[[str], None]
) -> None:
    """Save, run, follow and approve through wm-stagectl (see the module docstring)."""
    import aiohttp

    from shared.db.pool import create_pool
    from shared.db.registry import RegistryReader

    await asyncio.sleep(12)  # after the other showcases' first lines
    pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        async with aiohttp.ClientSession(headers=dict(headers)) as http:
            runs = []
            for name, auc, approval in (("churn", 0.91, True), ("churn-strict", 0.91, False)):
                body = ml_pipeline(
                    name, auc=auc, threshold=0.8 if approval else 0.95, approval=approval
                )
                async with http.post(f"{api}/api/v1/ml-pipelines", json=body) as answer:
                    saved = await answer.json()
                if answer.status != 201:
                    log(f"POST /api/v1/ml-pipelines ({name}) → {answer.status} {saved}")
                    return
                async with http.post(
                    f"{api}/api/v1/ml-pipelines/{saved['id']}/run", json={}
                ) as answer:
                    started = await answer.json()
                if answer.status != 201:
                    log(f"POST .../run ({name}) → {answer.status} {started}")
                    return
                workflow = started["workflow"]["name"]
                log(
                    f"stagectl: ML pipeline {name!r} saved with a release (stages "
                    f"{', '.join(s for s in STAGES if approval or s != 'approval')}); "
                    f"run {workflow} started"
                )
                runs.append((name, workflow))
            await asyncio.gather(*(follow(pool, name, run, log) for name, run in runs))
            reader = RegistryReader(pool)
            page = await reader.page(tenant="demo", after=None, limit=10)
            for model in page.rows:
                for version in await reader.versions(model.id):
                    log(
                        f"stagectl: registry: {model.name} v{version.number} state "
                        f"{version.state}, release {version.release_outcome}"
                    )
    finally:
        await pool.close()


async def follow(pool: Any, name: str, run: str, log: Callable[[str], None]) -> None:
    """Print each stage of ``run`` as it is recorded; approve the release when it waits."""
    from shared.db.registry import RegistryReader

    seen: set[str] = set()
    deadline = time.monotonic() + 180
    approved = False
    while "cleanup" not in seen and time.monotonic() < deadline:
        rows = await pool.fetch(
            "SELECT stage, outcome FROM stage_outcomes WHERE run_name = $1 ORDER BY recorded_at",
            run,
        )
        for row in rows:
            if row["stage"] in seen:
                continue
            seen.add(row["stage"])
            version = await pool.fetchrow(
                "SELECT prefix, model_file FROM model_versions WHERE run_name = $1", run
            )
            log(f"stagectl: {name} {run}: {describe(row['stage'], row['outcome'], version)}")
        pending = await pool.fetchrow(
            "SELECT model_id, expires_at FROM approvals WHERE run_name = $1 AND state = 'pending'",
            run,
        )
        if pending is not None and not approved:
            log(
                f"stagectl: {name} {run}: approval waiting (expires "
                f"{pending['expires_at']:%Y-%m-%d %H:%M}); dana@demo approves it"
            )
            await RegistryReader(pool).decide(
                pending["model_id"],
                run,
                tenant="demo",
                approve=True,
                actor="dana@demo",
                reason="scorecard reviewed",
            )
            approved = True
        await asyncio.sleep(0.5)
    if "cleanup" not in seen:
        log(f"stagectl: {name} {run}: stages recorded so far: {sorted(seen)}")
