"""Data secrets benchmark: the check a delete makes before removing a secret.

A delete reads the current versions of the tenant's pipelines whose template, definition or
settings mention the secret's name (``PipelineStore.current_versions_mentioning``, a text match
in PostgreSQL) and scans those for real references (``compiler.secrets.references``). Seeded:
one tenant with ``pipelines`` pipelines, each a 50-step wizard template (the one ``bench/
compile.py`` measures) reading the data secret ``warehouse``; a tenth of them also read
``target``. Figures (STYLE.md convention, goal figure last):
- template_kb: one current version's template as JSON;
- scan_ms: the pure reference scan of one version (template, definition, settings);
- baseline_json_roundtrip_ms: ``json.loads(json.dumps(template))`` of the same template, same run;
- scan_ratio: scan_ms / baseline_json_roundtrip_ms;
- check_ms, check_p95_ms: the whole check for ``target`` (lock, text match, fetch and scan of the
  matches), its users found;
- baseline_read_all_ms: reading every current version's template of the tenant (what a check
  without the text match would fetch and scan), same run;
- check_ratio: check_ms / baseline_read_all_ms (goal < 0.5: the text match in PostgreSQL saves
  more than half of reading everything).

    python bench/data_secrets.py            # 1,000 pipelines
    python bench/data_secrets.py --quick    # 200 pipelines, under a minute
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit" / "compiler"))

from _pipelines import wide_dag  # noqa: E402 - shared with the tests, on the path above

from bench._common import scratch_database  # noqa: E402
from compiler.pipelines.compile import StepLimits, compile_wizard  # noqa: E402
from compiler.secrets import references  # noqa: E402
from shared.db.pipelines import PipelineStore  # noqa: E402
from shared.db.pool import create_pool  # noqa: E402

TENANT = "acme"
LIMITS = StepLimits(max_cpu="4", max_memory="8Gi")


def template(spec: dict[str, Any], *, target: bool) -> dict[str, Any]:
    document = compile_wizard(
        spec, tenant=TENANT, pipeline_id="bench", version=1, kind="data", limits=LIMITS
    )
    if target:
        step = document["spec"]["templates"][-1]["container"]
        step.setdefault("envFrom", []).append({"secretRef": {"name": "target"}})
    return document


def timed(samples: list[float], start: float) -> None:
    samples.append((time.perf_counter() - start) * 1000)


def p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def main(quick: bool) -> None:
    count = 200 if quick else 1000
    rounds = 10 if quick else 20
    spec = wide_dag(50)
    plain, marked = template(spec, target=False), template(spec, target=True)
    definition = {"type": "wizard", "spec": spec}
    async with scratch_database("wm_bench_secrets") as url:
        pool = await create_pool(url, min_size=2, max_size=4)
        try:
            rows = [(f"p{i:05d}", i % 10 == 0) for i in range(count)]
            await pool.execute("INSERT INTO tenants (id) VALUES ($1)", TENANT)
            await pool.executemany(
                "INSERT INTO pipelines (id, tenant, kind, name, definition_type, "
                "current_version, latest_version, created_by) "
                "VALUES ($1, $2, 'data', $1, 'wizard', 1, 1, 'bench')",
                [(pipeline, TENANT) for pipeline, _ in rows],
            )
            await pool.executemany(
                "INSERT INTO pipeline_versions (pipeline_id, version, definition, parameters, "
                "settings, template_name, template, created_by) "
                "VALUES ($1, 1, $2, '[]', '{}', $1, $3, 'bench')",
                [(p, definition, marked if t else plain) for p, t in rows],
            )
            await pool.execute("ANALYZE")
            expected = sorted(p for p, t in rows if t)

            scan: list[float] = []
            baseline: list[float] = []
            for _ in range(rounds * 20):
                start = time.perf_counter()
                references.of_version(marked, definition, {})
                timed(scan, start)
                start = time.perf_counter()
                json.loads(json.dumps(marked))
                timed(baseline, start)

            check: list[float] = []
            read_all: list[float] = []
            for _ in range(rounds):
                start = time.perf_counter()
                async with PipelineStore.transaction(pool) as store:
                    await store.guard_data_secrets(TENANT, exclusive=True)
                    found = await store.current_versions_mentioning(TENANT, "target")
                    users = references.users(
                        "target",
                        {p.id: (v.template, v.definition, v.settings) for p, v in found},
                    )
                timed(check, start)
                if sorted(users) != expected:
                    raise SystemExit("the check found the wrong pipelines: the benchmark is broken")
                start = time.perf_counter()
                await pool.fetch(
                    "SELECT v.template FROM pipelines p JOIN pipeline_versions v "
                    "ON v.pipeline_id = p.id AND v.version = p.current_version WHERE p.tenant = $1",
                    TENANT,
                )
                timed(read_all, start)
        finally:
            await pool.close()
    figures: list[tuple[str, float | int]] = [
        ("pipelines", count),
        ("users", len(expected)),
        ("template_kb", len(json.dumps(marked, separators=(",", ":"))) / 1024),
        ("scan_ms", statistics.median(scan)),
        ("baseline_json_roundtrip_ms", statistics.median(baseline)),
        ("scan_ratio", statistics.median(scan) / statistics.median(baseline)),
        ("check_ms", statistics.median(check)),
        ("check_p95_ms", p95(check)),
        ("baseline_read_all_ms", statistics.median(read_all)),
        ("check_ratio", statistics.median(check) / statistics.median(read_all)),
    ]
    for name, value in figures:
        print(f"{name}: {value:.2f}" if isinstance(value, float) else f"{name}: {value}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 pipelines, under a minute")
    asyncio.run(main(parser.parse_args().quick))
