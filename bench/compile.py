"""Compile benchmark: a 50-step wizard pipeline through the whole pure path of a save.

That path is ``compiler.pipelines.definitions.render``: compile, stamp, the allowlist and Argo's
schema (Hera's models plus the round trip). Figures (STYLE.md convention, goal figure last):
- document_kb: size of the stamped WorkflowTemplate as JSON;
- compile_ms, stamp_ms, check_ms, schema_ms: median time of each stage alone;
- yaml_parse_ms: median time to parse the same template written as tenant YAML
  (``compiler.pipelines.yamldoc``, the first stage of a YAML pipeline's save);
- baseline_json_roundtrip_ms: median time of ``json.loads(json.dumps(doc))`` of the same stamped
  document, measured in the same run: the floor any pass over the document pays;
- ratio: render_ms / baseline_json_roundtrip_ms;
- release_render_ms, release_ratio: the same pipeline as an ML pipeline with a release (the
  platform's stages appended and checked too), and its median over render_ms;
- render_p95_ms: p95 of one whole save's pure work, spec to checked template (goal < 20 ms).

As the compiler does after start-up, the heap is frozen (``gc.freeze``) before measuring.
Pure computation: no services are needed. ``--quick`` runs fewer rounds (well under a minute).

    python bench/compile.py
    python bench/compile.py --quick
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit" / "compiler"))

import yaml  # noqa: E402
from _pipelines import wide_dag  # noqa: E402 - shared with the tests, on the path above

from compiler.pipelines.allowlist import check  # noqa: E402
from compiler.pipelines.argo_schema import schema_violations  # noqa: E402
from compiler.pipelines.compile import StepLimits, compile_wizard  # noqa: E402
from compiler.pipelines.definitions import Target, render  # noqa: E402
from compiler.pipelines.stamping import stamp  # noqa: E402
from compiler.pipelines.yamldoc import parse_template_yaml  # noqa: E402
from shared.pipelines import parse_body  # noqa: E402

TENANT = "acme"
NAMESPACE = "kubeopera-data-acme"
LIMITS = StepLimits(max_cpu="4", max_memory="8Gi")
DATA_SECRETS = frozenset({"warehouse"})  # the one data secret wide_dag's steps read


def timings(action: Callable[[], Any], rounds: int) -> list[float]:
    """Milliseconds of each of ``rounds`` calls, after a few warm-up calls."""
    for _ in range(5):
        action()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, under a minute")
    parser.add_argument("--steps", type=int, default=50)
    options = parser.parse_args()
    rounds = 200 if options.quick else 2000
    spec = wide_dag(options.steps)

    def compiled() -> dict[str, Any]:
        return compile_wizard(
            spec, tenant=TENANT, pipeline_id="bench", version=1, kind="data", limits=LIMITS
        )

    def stamped(document: dict[str, Any]) -> dict[str, Any]:
        return stamp(
            document,
            tenant=TENANT,
            namespace=NAMESPACE,
            pipeline_id="bench",
            version=1,
            kind="data",
        )

    def checked(document: dict[str, Any]) -> list[Any]:
        return check(
            document,
            namespace=NAMESPACE,
            tenant=TENANT,
            artifact_bucket="kubeopera-artifacts",
            kind="data",
            limits=LIMITS,
            data_secrets=DATA_SECRETS,
        )

    body = parse_body({"name": "bench", "definition": {"type": "wizard", "spec": spec}})
    target = Target(
        tenant=TENANT,
        pipeline_id="bench",
        version=1,
        kind="data",
        limits=LIMITS,
        artifact_bucket="kubeopera-artifacts",
        data_secrets=DATA_SECRETS,
    )

    def whole() -> None:
        render(body, target)  # raises when refused: the benchmark would be broken

    ml_spec = json.loads(json.dumps(spec))
    ml_spec["steps"][0]["outputs"]["artifacts"] = [
        {"name": "model", "path": "/out/model"},
        {"name": "scorecard", "path": "/out/eval_scorecard.json"},
    ]
    first = ml_spec["steps"][0]["name"]
    ml_body = parse_body(
        {
            "name": "bench",
            "definition": {"type": "wizard", "spec": ml_spec},
            "release": {
                "model": "bench",
                "model_artifact": {"step": first, "artifact": "model"},
                "scorecard": {"step": first, "artifact": "scorecard"},
                "gate": {"thresholds": [{"metric": "auc", "op": ">=", "value": 0.8}]},
                "approval": {"required": True},
            },
        },
        "ml",
    )
    ml_target = dataclasses.replace(target, kind="ml")

    def released() -> None:
        if not render(ml_body, ml_target).stages:
            raise SystemExit("the release compiled to no stages: the benchmark is broken")

    document = stamped(compiled())
    if checked(document) or schema_violations(document):
        raise SystemExit("the compiled pipeline was refused: the benchmark is broken")
    text = yaml.safe_dump(document, sort_keys=False)
    gc.collect()
    gc.freeze()
    compile_ms = statistics.median(timings(compiled, rounds))
    stamp_ms = statistics.median(timings(lambda: stamped(document), rounds))
    check_ms = statistics.median(timings(lambda: checked(document), rounds))
    schema_ms = statistics.median(timings(lambda: schema_violations(document), rounds))
    yaml_ms = statistics.median(timings(lambda: parse_template_yaml(text), rounds // 4))
    baseline = statistics.median(timings(lambda: json.loads(json.dumps(document)), rounds))
    total = timings(whole, rounds)
    release_ms = statistics.median(timings(released, rounds))
    figures: list[tuple[str, float | int]] = [
        ("steps", options.steps),
        ("rounds", rounds),
        ("document_kb", len(json.dumps(document, separators=(",", ":"))) / 1024),
        ("compile_ms", compile_ms),
        ("stamp_ms", stamp_ms),
        ("check_ms", check_ms),
        ("schema_ms", schema_ms),
        ("yaml_parse_ms", yaml_ms),
        ("render_ms", statistics.median(total)),
        ("baseline_json_roundtrip_ms", baseline),
        ("ratio", statistics.median(total) / baseline),
        ("release_render_ms", release_ms),
        ("release_ratio", release_ms / statistics.median(total)),
        ("render_p95_ms", p95(total)),
    ]
    for name, value in figures:
        print(f"{name}: {value:.2f}" if isinstance(value, float) else f"{name}: {value}")


if __name__ == "__main__":
    main()
