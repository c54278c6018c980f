"""What pipelines refuse end to end: other tenants and missing permissions, calls without the
compiler's key, hostile YAML of each allowlist class, and malformed bodies."""

from __future__ import annotations

from typing import Any

import asyncpg

from tests.integration.compiler.pipeline_stack import (
    INTERNAL_KEY,
    Stack,
    body,
    headers,
    make_stack,
)


async def test_tenants_and_permissions_are_enforced(stack: Stack) -> None:
    status, saved = await stack.call("POST", "data-pipelines", json=body())
    pipeline = saved["id"]
    other = headers("globex", actor="bob@globex")
    for method, path, payload in (
        ("GET", f"data-pipelines/{pipeline}", None),
        ("GET", f"data-pipelines/{pipeline}/versions", None),
        ("PUT", f"data-pipelines/{pipeline}", body()),
        ("DELETE", f"data-pipelines/{pipeline}", None),
        ("POST", f"data-pipelines/{pipeline}/rollback", {"version": 1}),
        ("POST", f"data-pipelines/{pipeline}/run", {}),
        ("GET", f"ml-pipelines/{pipeline}", None),
    ):
        status, answer = await stack.call(method, path, as_=other, json=payload)
        assert status == 404, (method, path, answer)
    status, listing = await stack.call("GET", "data-pipelines", as_=other)
    assert listing["items"] == []

    reader = headers(permissions="pipelines.read")
    status, answer = await stack.call("PUT", f"data-pipelines/{pipeline}", as_=reader, json=body())
    assert (status, answer["details"]) == (403, {"permission": "pipelines.write"})
    status, answer = await stack.call("POST", f"data-pipelines/{pipeline}/run", as_=reader, json={})
    assert (status, answer["details"]) == (403, {"permission": "pipelines.run"})

    admin = headers(None, admin=True, actor="root")
    status, answer = await stack.call("POST", "data-pipelines", as_=admin, json=body("x"))
    assert status == 400, answer
    status, listing = await stack.call("GET", "data-pipelines", as_=admin)
    assert [item["tenant"] for item in listing["items"]] == ["acme"]
    status, saved_b = await stack.call(
        "POST", "data-pipelines?acting_tenant=globex", as_=admin, json=body()
    )
    assert status == 201, saved_b
    assert stack.templates("kubeopera-data-globex") == [saved_b["template_name"]]


async def test_the_compiler_refuses_calls_without_its_key(stack: Stack) -> None:
    payload = {"tenant": "acme", "actor": "x", "pipeline": body()}
    for key in (None, "wrong"):
        extra = {"X-Internal-Key": key} if key else {}
        response = await stack.internal.post(
            "/internal/v1/pipelines/data", json=payload, headers=extra
        )
        assert response.status == 401
    response = await stack.internal.post(
        "/internal/v1/pipelines/data", json=payload, headers={"X-Internal-Key": INTERNAL_KEY}
    )
    assert response.status == 201


def _yaml_pipeline(spec: str) -> dict[str, Any]:
    template = (
        "apiVersion: argoproj.io/v1alpha1\nkind: WorkflowTemplate\nmetadata:\n  name: t\n"
        f"spec:\n  entrypoint: main\n{spec}"
    )
    return {"name": "hostile", "definition": {"type": "yaml", "template": template}}


MAIN = """  templates:
    - name: main
      container:
        image: alpine:3.20
        command: [sh, -c, echo hi]
"""
# One hostile document per class the allowlist once accepted: (YAML spec body, {(rule, path)}).
HOSTILE_CLASSES: dict[str, tuple[str, set[tuple[str, str]]]] = {
    "artifact repository": (
        """  artifactRepositoryRef: {key: platform-default}
  templates:
    - name: main
      container: {image: alpine:3.20, command: [sh, -c, echo hi]}
      archiveLocation:
        s3: {key: tenants/acme/models/churn/1}
""",
        {
            ("artifact_repository_ref", "spec.artifactRepositoryRef.key"),
            ("artifact_location", "spec.templates[0].archiveLocation.s3.key"),
        },
    ),
    "secret reference": (
        """  templates:
    - name: main
      sidecars:
        - name: s
          image: alpine:3.20
          envFrom: [{secretRef: {name: argo-server-sso}}]
      container:
        image: alpine:3.20
        env:
          - name: K
            valueFrom: {secretKeyRef: {name: kubeopera-artifact-credentials, key: secretKey}}
""",
        {
            ("secret_reference", "spec.templates[0].sidecars[0].envFrom[0].secretRef.name"),
            (
                "platform_secret",
                "spec.templates[0].container.env[0].valueFrom.secretKeyRef.name",
            ),
        },
    ),
    "labels and annotations": (
        """  podMetadata:
    labels: {kubeopera.io/pipeline-id: someone-elses}
    annotations: {workflows.argoproj.io/outputs: "{}"}
"""
        + MAIN
        + """      metadata:
        annotations:
          container.apparmor.security.beta.kubernetes.io/main: unconfined
""",
        {
            ("reserved_label", 'spec.podMetadata.labels["kubeopera.io/pipeline-id"]'),
            (
                "reserved_annotation",
                'spec.podMetadata.annotations["workflows.argoproj.io/outputs"]',
            ),
            (
                "security_annotation",
                'spec.templates[0].metadata.annotations["container.apparmor.security.beta'
                '.kubernetes.io/main"]',
            ),
        },
    ),
    "resources": (
        MAIN
        + """        resources:
          requests: {cpu: "3", memory: 9Gi}
          limits: {nvidia.com/gpu: 1, amd.com/gpu: 1}
""",
        {
            ("resource_limit", "spec.templates[0].container.resources.requests.cpu"),
            ("resource_limit", "spec.templates[0].container.resources.requests.memory"),
            ("resource_limit", 'spec.templates[0].container.resources.limits["nvidia.com/gpu"]'),
            ("extended_resource", 'spec.templates[0].container.resources.limits["amd.com/gpu"]'),
        },
    ),
}


async def test_a_hostile_yaml_pipeline_of_each_class_is_refused_at_save_with_its_violations(
    db: asyncpg.Pool, database_url: str, settings_factory: Any
) -> None:
    async for stack in make_stack(db, database_url, settings_factory, DATA_MAX_CPU="2"):
        for name, (spec, expected) in HOSTILE_CLASSES.items():
            status, refused = await stack.call("POST", "data-pipelines", json=_yaml_pipeline(spec))
            assert status == 422, (name, refused)
            violations = refused["details"]["violations"]
            assert {(v["rule"], v["path"]) for v in violations} == expected, name
        messages = {v["path"]: v["message"] for v in violations}
        # The settings reach the check: the limit is the deployment's, named.
        cpu = messages["spec.templates[0].container.resources.requests.cpu"]
        assert cpu == "3 is above DATA_MAX_CPU (2)"
        assert stack.templates() == []
        # The near-miss of each: the default repository, keys under artifacts/, ordinary labels,
        # amounts exactly at the largest step.
        near_miss = """  artifactRepositoryRef: {configMap: artifact-repositories, key: default-v1}
  podMetadata:
    labels: {app: etl}
  templates:
    - name: main
      container:
        image: alpine:3.20
        command: [sh, -c, echo hi]
        resources:
          limits: {cpu: 2000m, memory: 8Gi}
      archiveLocation:
        s3: {key: tenants/acme/artifacts/logs}
"""
        status, saved = await stack.call("POST", "data-pipelines", json=_yaml_pipeline(near_miss))
        assert status == 201, saved


MALFORMED_BODIES: list[Any] = [
    {"name": "", "definition": {"type": "yaml"}},
    {"name": "x", "definition": {"type": "svn", "url": "svn://x"}},
    {"name": "x", "definition": {"type": "wizard", "spec": {}}, "colour": "blue"},
    {"name": "x", "definition": {"type": "yaml", "template": "a"}, "schedule": "0 * * * *"},
    {"name": "x", "description": 7, "parameters": {"a": [1]}, "definition": None},
]


async def test_the_apiserver_refuses_a_malformed_body_exactly_as_the_compiler_does(
    stack: Stack,
) -> None:
    _, saved = await stack.call("POST", "data-pipelines", json=body())
    for bad in MALFORMED_BODIES:
        direct = await stack.internal.post(
            "/internal/v1/pipelines/data/validate",
            json={"tenant": "acme", "actor": "alice@acme", "pipeline": bad},
            headers={"X-Internal-Key": INTERNAL_KEY},
        )
        expected = (direct.status, await direct.json())
        assert expected[0] == 400, expected
        for method, path in (
            ("POST", "data-pipelines/validate"),
            ("POST", "data-pipelines"),
            ("PUT", f"data-pipelines/{saved['id']}"),
        ):
            assert await stack.call(method, path, json=bad) == expected, (method, bad)
