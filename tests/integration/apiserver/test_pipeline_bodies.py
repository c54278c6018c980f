"""The apiserver checks a pipeline body with the compiler's own model before forwarding it: a
malformed one is a 400 naming every field even while the compiler is unreachable."""

from __future__ import annotations

from tests.integration.apiserver.conftest import Api, headers

WRITER = headers("acme", permissions="pipelines.read,pipelines.write")


async def test_a_malformed_body_never_leaves_the_apiserver(api: Api) -> None:
    assert api.services.compiler is None  # nothing to forward to
    bad = {"name": "no/slashes", "definition": {"type": "yaml"}, "colour": "blue"}
    for method, path in (
        ("POST", "/api/v1/data-pipelines/validate"),
        ("POST", "/api/v1/ml-pipelines"),
        ("PUT", "/api/v1/data-pipelines/abc123"),
    ):
        response = await api.client.request(method, path, headers=WRITER, json=bad)
        answer = await response.json()
        assert response.status == 400, answer
        assert answer["error"] == "invalid"
        fields = {error["field"] for error in answer["details"]["errors"]}
        assert fields == {"name", "definition.yaml.template", "colour"}, fields
    good = {"name": "nightly", "definition": {"type": "yaml", "template": "kind: x"}}
    response = await api.client.post("/api/v1/data-pipelines", headers=WRITER, json=good)
    assert response.status == 503  # well-formed: only now is the compiler needed
