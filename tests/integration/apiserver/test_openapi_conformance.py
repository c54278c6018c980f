"""The served OpenAPI document against the real deployable, by schemathesis: every answer to
generated requests (valid and invalid) is one the document states, with its content type,
headers and schema; undocumented methods are 405 with ``Allow``.

The live stream is left out of the runs: an SSE answer never ends, and schemathesis reads an
answer whole (tests/integration/apiserver/test_stream*.py cover it). Follow logs stay in: no
cluster is reachable here, so they answer at once. No cluster, object storage, compiler or
tracking server is wired in, so the routes that need one may answer their documented 503."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from shared.runs import RunPhase, RunSource
from tests.integration.apiserver.conftest import ADMIN, API_KEY, Api, Process, add_cluster, record
from watcher.pg_store import RunStore

ST = str(Path(sys.executable).parent / "st")
STREAM = "/api/v1/workflows/stream"
CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_headers_conformance,response_schema_conformance,unsupported_method"
)
# The routes that reach a cluster, object storage or the compiler (none exists in this run)
# may answer their documented 503: by operation name, "METHOD /path".
NEED_A_DEPENDENCY = "|".join(
    (
        "GET .*/(logs|artifacts)/",
        "POST .*/(stop|terminate|retry|submit)$",
        "(POST|PUT|DELETE) /api/v1/(data|ml)-pipelines",
        "GET /api/v1/(data|ml)-pipelines/.*/webhook$",
        "(GET|PUT|DELETE) /api/v1/data-secrets",
        "GET /api/v1/ml-tracking/",
        "GET /api/v1/models/.*/files/",
    )
)
CONFIG = f"""
[[operations]]
include-name-regex = "^({NEED_A_DEPENDENCY})"
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "503"]
"""


async def _document(process: Process) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{process.url}/api/v1/openapi.json", headers={"X-API-Key": API_KEY}) as got,
    ):
        assert got.status == 200
        document: dict[str, Any] = await got.json()
        return document


async def _seed(db: asyncpg.Pool, examples: dict[str, str]) -> None:
    """Runs (one at the coordinates the document gives as examples, so that generated
    requests reach a run, its node and its artifact), a grant and a pipeline with a version."""
    cluster, namespace, name = examples["cluster"], examples["ns"], examples["name"]
    node = {
        "id": examples["node"],
        "name": name,
        "type": "Pod",
        "phase": "Succeeded",
        "podName": examples["node"],
        "outputs": {
            "artifacts": [
                {
                    "name": examples["artifact"],
                    "location": {"kind": "s3", "bucket": "b", "key": f"{namespace}/out.tgz"},
                }
            ]
        },
    }
    await add_cluster(db, cluster)
    await add_cluster(db, "c2", region="us-east-1")
    await RunStore(db).write_batch(
        [
            record(
                name,
                cluster=cluster,
                namespace=namespace,
                tenant="acme",
                template=examples["template"],
                pipeline=examples["id"],
                parameters={"date": "2025-03-14"},
                graph={"nodes": [node], "node_count": 1, "truncated": False},
            ),
            record("acme-failed", cluster=cluster, phase=RunPhase.FAILED),
            record("globex-1", cluster="c2", tenant="globex", source=RunSource.SCHEDULE),
            record("pending-1", cluster="c2", tenant=None, started=None, phase=RunPhase.PENDING),
        ]
    )
    await db.execute(
        "INSERT INTO access_grants (tenant, cluster_id, namespace, granted_by) "
        "VALUES ('globex', $1, $2, 'root')",
        cluster,
        namespace,
    )
    await db.execute("INSERT INTO tenants (id) VALUES ('acme')")
    await db.execute(
        "INSERT INTO pipelines (id, tenant, kind, name, definition_type, current_version, "
        "latest_version, created_by) VALUES ($1, 'acme', 'data', 'etl', 'yaml', 1, 1, 'a')",
        examples["id"],
    )
    await db.execute(
        "INSERT INTO pipeline_versions (pipeline_id, version, definition, template_name, "
        "template, parameters, created_by) VALUES ($1, 1, '{}', 'p-etl-v1', '{}', '[]', 'a')",
        examples["id"],
    )
    # An ML pipeline with an experiment: its tracking routes reach MLflow (not configured: 503).
    await db.execute(
        "INSERT INTO pipelines (id, tenant, kind, name, definition_type, current_version, "
        "latest_version, created_by) VALUES ($1, 'acme', 'ml', 'train', 'yaml', 1, 1, 'a')",
        examples["pipeline"],
    )
    await db.execute(
        "INSERT INTO ml_experiments (pipeline_id, tenant, experiment_id, name) "
        "VALUES ($1, 'acme', '1', 'acme/' || $1)",
        examples["pipeline"],
    )
    # A model with a registered version and a release of it waiting for approval.
    await db.execute(
        "INSERT INTO models (id, tenant, name) VALUES ($1, 'acme', 'churn')", examples["model"]
    )
    await db.execute(
        "INSERT INTO model_versions (model_id, number, cluster_id, run_namespace, run_name, "
        "run_uid, pipeline_id, pipeline_version, prefix, model_file, scorecard, lineage, state) "
        "VALUES ($1, 1, $2, $3, $4, $5, $6, 1, 'tenants/acme/models/churn/1/', 'model.tgz', "
        "'{}', '{}', 'passed')",
        examples["model"],
        cluster,
        namespace,
        examples["run"],
        examples["run"],
        examples["pipeline"],
    )
    await db.execute(
        "INSERT INTO approvals (run_uid, model_id, version, cluster_id, run_namespace, run_name, "
        "expires_at) VALUES ($1, $2, 1, $3, $4, $1, now() + interval '1 day')",
        examples["run"],
        examples["model"],
        cluster,
        namespace,
    )


async def _schemathesis(
    process: Process, config: Path, headers: list[str], *, phases: str, examples: int
) -> tuple[int, str]:
    """``st run`` over the served document (saved beside ``config``: loading it needs the key,
    which one run goes without)."""
    args = [
        "--config-file",
        str(config),
        "--no-color",
        "run",
        str(config.parent / "openapi.json"),
        "--url",
        process.url,
        "--checks",
        CHECKS,
        "--exclude-path-regex",
        f"^{STREAM}$",
        "--phases",
        phases,
        "--max-examples",
        str(examples),
        "--workers",
        "1",
        "--seed",
        "20250314",
        "--request-timeout",
        "10",
    ]
    for header in headers:
        args += ["--header", header]
    child = await asyncio.create_subprocess_exec(
        ST,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=config.parent,
    )
    output, _ = await child.communicate()
    return child.returncode or 0, output.decode(errors="replace")


@pytest.mark.timeout(180)
async def test_every_answer_is_documented(
    apiserver_process: Process, db: asyncpg.Pool, tmp_path: Path
) -> None:
    document = await _document(apiserver_process)
    examples = {
        parameter["name"]: parameter["example"]
        for operations in document["paths"].values()
        for operation in operations.values()
        for parameter in operation["parameters"]
        if parameter["in"] == "path"
    }
    await _seed(db, examples)
    tested = sum(len(ops) for path, ops in document["paths"].items() if path != STREAM)
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    (tmp_path / "openapi.json").write_text(json.dumps(document))
    key = f"X-API-Key: {API_KEY}"
    runs = [
        # An administrator reaches every handler, with every phase.
        ([key, "X-Kubeopera-Admin: true", "X-Kubeopera-Actor: st"], "examples,coverage,fuzzing", 5),
        # A tenant with some permissions meets 403s, and 404s for what it may not see.
        (
            [key, "X-Kubeopera-Tenant: globex", "X-Kubeopera-Permissions: workflows.read"],
            "fuzzing",
            3,
        ),
        # No key: every answer a documented 401 (with WWW-Authenticate).
        ([], "fuzzing", 1),
    ]
    for headers, phases, count in runs:
        code, output = await _schemathesis(
            apiserver_process, config, headers, phases=phases, examples=count
        )
        assert code == 0, output[-8000:]
        assert f"Tested: {tested}\n" in output, output[-8000:]


def _probes(schema: dict[str, Any], example: str | None) -> tuple[list[str], list[str]]:
    """Values the schema admits (at its bounds) and values it refuses, as sent on the wire."""
    admitted: list[str] = []
    refused: list[str] = []
    kind = schema.get("type")
    if "enum" in schema:
        admitted += schema["enum"]
        refused.append("not-one-of-them")
    elif kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        admitted += [str(low if low is not None else 1)]
        if high is not None:
            admitted.append(str(high))
            refused.append(str(high + 1))
        if low is not None:
            refused.append(str(low - 1))
        refused.append("abc")
    elif kind == "boolean":
        admitted += ["true", "false"]
        refused.append("maybe")
    elif schema.get("format") == "date-time":
        admitted.append("2025-03-14T06:00:00Z")
        refused.append("yesterday")
    else:
        # "a" keeps every pattern of the document; a space breaks them all.
        admitted.append(example or "a")
        if "maxLength" in schema:
            admitted.append("a" * schema["maxLength"])
            refused.append("a" * (schema["maxLength"] + 1))
        if "pattern" in schema:
            refused.append("x y")
    return admitted, refused


def _constrained(schema: dict[str, Any]) -> bool:
    keys = {"enum", "pattern", "maxLength", "minimum", "maximum", "format"}
    return bool(keys & set(schema)) or schema.get("type") in ("integer", "boolean")


async def test_the_document_states_the_rules_the_server_enforces(api: Api) -> None:
    """Every rule the document gives a parameter, the server applies, and no stricter one: a
    value the document admits is never refused for that parameter, one it refuses always is
    (400 naming it). Fails when the document and the validators drift apart."""
    await api.hub.started.wait()
    status, document = await api.get("/api/v1/openapi.json", as_={"X-API-Key": API_KEY})
    assert status == 200
    probed = 0
    for template, operations in document["paths"].items():
        for method, operation in operations.items():
            parameters = operation["parameters"]
            path_values = {
                p["name"]: p.get("example", "a") for p in parameters if p["in"] == "path"
            }
            for parameter in parameters:
                if not _constrained(parameter["schema"]):
                    continue
                name, where = parameter["name"], parameter["in"]
                admitted, refused = _probes(parameter["schema"], parameter.get("example"))
                for value, valid in [(v, True) for v in admitted] + [(v, False) for v in refused]:
                    values = {**path_values, name: value} if where == "path" else path_values
                    path = template.format(**values).replace(" ", "%20")
                    sent_headers = {**ADMIN}
                    params = {}
                    if where == "header":
                        sent_headers[name] = value
                    elif where == "query":
                        params[name] = value
                    async with api.client.request(
                        method.upper(), path, headers=sent_headers, params=params
                    ) as response:
                        refused_it = False
                        if response.status == 400:
                            body = await response.json()
                            refused_it = body["details"].get("parameter") == name
                    assert refused_it is not valid, (method, template, where, name, value)
                    probed += 1
    assert probed > 300
