"""Wizard specifications the compiler tests and the benchmark share."""

from __future__ import annotations

from typing import Any


def step(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "ghcr.io/acme/job:1.0", "command": ["run"], **fields}


def pipeline(*steps: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "pipelines.kubeopera.io/v1", "steps": list(steps), **fields}


def wide_dag(size: int = 50) -> dict[str, Any]:
    """A realistic ``size``-step DAG: layers of five, each step waiting on two of the previous
    layer, with retries, timeouts, resources, secrets, parameters, an activation every seventh
    step and a jq filter every eleventh."""
    steps = []
    for index in range(size):
        fields: dict[str, Any] = {
            "args": ["--day", "{{workflow.parameters.day}}", "--shard", str(index)],
            "env": [
                {"name": "MODE", "value": "full"},
                {"name": "TOKEN", "from_secret": {"name": "warehouse", "key": "token"}},
            ],
            "resources": {
                "requests": {"cpu": "250m", "memory": "512Mi"},
                "limits": {"cpu": "1", "memory": "1Gi"},
            },
            "retries": {"limit": 2, "backoff": {"duration": "5s", "factor": 2}},
            "timeout": "20m",
            "outputs": {"parameters": [{"name": "rows", "path": "/tmp/rows"}]},
        }
        if index >= 5:
            layer = index // 5
            parents = [f"s{(layer - 1) * 5 + index % 5}", f"s{(layer - 1) * 5 + (index + 1) % 5}"]
            fields["depends_on"] = parents
            fields["inputs"] = {"parameters": [{"name": "rows", "from": f"{parents[0]}.rows"}]}
            if index % 7 == 0:
                fields["activation"] = (
                    f"{parents[0]}.succeeded and ({parents[1]}.succeeded or {parents[1]}.skipped)"
                )
            if index % 11 == 0:
                fields["input_filter"] = "{rows: (.rows | tonumber)}"
                fields["output_filter"] = "{rows: .count}"
        steps.append(step(f"s{index}", **fields))
    return pipeline(
        *steps, parameters=[{"name": "day", "default": "2026-01-01", "description": "Day"}]
    )
