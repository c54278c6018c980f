"""Compile benchmark: a 50-step wizard pipeline through compile, stamp and allowlist check.

Figures (STYLE.md convention, goal figure last):
- document_kb: size of the stamped WorkflowTemplate as JSON;
- compile_ms, stamp_ms, check_ms: median time of each stage alone;
- baseline_json_roundtrip_ms: median time of ``json.loads(json.dumps(doc))`` of the same stamped
  document, measured in the same run: the floor any pass over the document pays;
- ratio: compile_stamp_check_ms / baseline_json_roundtrip_ms;
- compile_stamp_check_p95_ms: p95 of one whole save's pure work, spec to checked template
  (goal < 20 ms).

Pure computation: no services are needed. ``--quick`` runs fewer rounds (well under a minute).

    python bench/compile.py
    python bench/compile.py --quick
"""

from __future__ import annotations

import argparse
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

from _pipelines import wide_dag  # noqa: E402 - shared with the tests, on the path above

from compiler.allowlist import check  # noqa: E402
from compiler.compile import StepLimits, compile_wizard  # noqa: E402
from compiler.stamping import stamp  # noqa: E402

TENANT = "acme"
NAMESPACE = "kubeopera-data-acme"
LIMITS = StepLimits(max_cpu="4", max_memory="8Gi")


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
            artifact_prefix="tenants/acme/",
        )

    def whole() -> None:
        if checked(stamped(compiled())):
            raise SystemExit("the compiled pipeline was refused: the benchmark is broken")

    document = stamped(compiled())
    if checked(document):
        raise SystemExit("the compiled pipeline was refused: the benchmark is broken")
    compile_ms = statistics.median(timings(compiled, rounds))
    stamp_ms = statistics.median(timings(lambda: stamped(document), rounds))
    check_ms = statistics.median(timings(lambda: checked(document), rounds))
    baseline = statistics.median(timings(lambda: json.loads(json.dumps(document)), rounds))
    total = timings(whole, rounds)
    figures: list[tuple[str, float | int]] = [
        ("steps", options.steps),
        ("rounds", rounds),
        ("document_kb", len(json.dumps(document, separators=(",", ":"))) / 1024),
        ("compile_ms", compile_ms),
        ("stamp_ms", stamp_ms),
        ("check_ms", check_ms),
        ("compile_stamp_check_ms", statistics.median(total)),
        ("baseline_json_roundtrip_ms", baseline),
        ("ratio", statistics.median(total) / baseline),
        ("compile_stamp_check_p95_ms", p95(total)),
    ]
    for name, value in figures:
        print(f"{name}: {value:.2f}" if isinstance(value, float) else f"{name}: {value}")


if __name__ == "__main__":
    main()
