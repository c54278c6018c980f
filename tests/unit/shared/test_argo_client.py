"""The Argo server client: URL parsing, request bodies, paths and error translation (no sockets)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from shared.argo import (
    ArgoRefused,
    ArgoServer,
    ServiceRef,
    parse_service_url,
    proxy_prefix,
    resubmit_body,
    retry_body,
    set_body,
    stop_body,
    translate_argo_error,
)
from shared.errors import (
    ConfigError,
    Conflict,
    DependencyDown,
    Invalid,
    NotFound,
    WorkflowManagerError,
)

PROXY = "/api/v1/namespaces/argo/services/https:argo-server:2746/proxy"


# --- URL parsing ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "https://argo-data-server.kubeopera-argo-data.svc:2746",
            ServiceRef("https", "argo-data-server", "kubeopera-argo-data", "2746"),
        ),
        ("http://argo-server.argo:2746/", ServiceRef("http", "argo-server", "argo", "2746")),
        (
            "https://argo-server.argo.svc.cluster.local:2746",
            ServiceRef("https", "argo-server", "argo", "2746"),
        ),
        ("https://argo-server.argo.svc", ServiceRef("https", "argo-server", "argo", "443")),
        ("http://argo-server.argo", ServiceRef("http", "argo-server", "argo", "80")),
    ],
)
def test_parse_service_url(url: str, expected: ServiceRef) -> None:
    assert parse_service_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "argo-server.argo:2746",
        "grpc://argo-server.argo:2746",
        "https://argo-server:2746",
        "https://argo-server.argo.example.com:2746",
        "https://argo-server.argo.svc:2746/api",
        "https://user:pw@argo-server.argo.svc:2746",
        "https://argo-server.argo.svc:http",
        "https://argo-server..svc:2746",
    ],
)
def test_parse_service_url_refuses_what_is_not_a_service(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_service_url(url)


def test_proxy_prefix_keeps_the_scheme_colon_unescaped() -> None:
    ref = ServiceRef("https", "argo-data-server", "kubeopera-argo-data", "2746")
    assert proxy_prefix(ref) == (
        "/api/v1/namespaces/kubeopera-argo-data/services/https:argo-data-server:2746/proxy"
    )


# --- bodies ---------------------------------------------------------------------------------
def test_retry_body() -> None:
    assert retry_body() == {"restartSuccessful": False}
    assert retry_body(
        restart_successful=True,
        node_field_selector="templateName=train",
        parameters={"lr": "0.1", "epochs": "3"},
    ) == {
        "restartSuccessful": True,
        "nodeFieldSelector": "templateName=train",
        "parameters": ["lr=0.1", "epochs=3"],
    }


def test_resubmit_body() -> None:
    assert resubmit_body() == {"memoized": False}
    assert resubmit_body(memoized=True, parameters={"a": "b=c"}) == {
        "memoized": True,
        "parameters": ["a=b=c"],
    }


def test_set_body_encodes_output_parameters_as_a_json_string() -> None:
    body = set_body(
        node_field_selector="id=wf-123",
        phase="Succeeded",
        message="approved by alice",
        output_parameters={"approved": "true", "note": 'says "ok"'},
    )
    assert body["nodeFieldSelector"] == "id=wf-123"
    assert body["phase"] == "Succeeded"
    assert body["message"] == "approved by alice"
    assert isinstance(body["outputParameters"], str)
    assert json.loads(body["outputParameters"]) == {"approved": "true", "note": 'says "ok"'}


def test_set_body_omits_what_was_not_given() -> None:
    assert set_body(node_field_selector="id=n", phase="") == {
        "nodeFieldSelector": "id=n",
        "phase": "",
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {"node_field_selector": "id=n", "phase": "Running"},
        {"node_field_selector": "", "phase": "Succeeded"},
        {"node_field_selector": "id=n", "phase": "Succeeded", "output_parameters": {"n": 1}},
    ],
)
def test_set_body_refuses_what_argo_would(kwargs: dict[str, Any]) -> None:
    with pytest.raises(Invalid):
        set_body(**kwargs)


def test_stop_body() -> None:
    assert stop_body() == {}
    assert stop_body(node_field_selector="name=a", message="why") == {
        "nodeFieldSelector": "name=a",
        "message": "why",
    }


# --- error translation ----------------------------------------------------------------------
def grpc(code: int, message: str) -> str:
    return json.dumps({"code": code, "message": message, "details": []})


def k8s_status(code: int, reason: str, message: str) -> str:
    return json.dumps(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
         "reason": reason, "message": message}
    )  # fmt: skip


@pytest.mark.parametrize(
    ("status", "body", "error_type"),
    [
        (400, grpc(3, "workflow must be Failed/Error to retry"), Invalid),
        (404, grpc(5, 'workflows.argoproj.io "x" not found'), NotFound),
        (409, grpc(6, "already exists"), Conflict),
        (500, grpc(13, "currently, set only targets suspend nodes"), ArgoRefused),
        (500, grpc(2, "templates.main: unknown field"), ArgoRefused),
        (400, grpc(9, "precondition"), ArgoRefused),
        (503, grpc(14, "connection refused"), DependencyDown),
        (403, grpc(7, "permission denied"), DependencyDown),
        (401, grpc(16, "token expired"), DependencyDown),
        (503, k8s_status(503, "ServiceUnavailable", "no endpoints available"), DependencyDown),
        (404, k8s_status(404, "NotFound", 'services "argo-server" not found'), DependencyDown),
        (403, k8s_status(403, "Forbidden", "cannot get services/proxy"), DependencyDown),
        (502, "<html>Bad Gateway</html>", DependencyDown),
        (404, "404 page not found", DependencyDown),
        (400, "bad", Invalid),
        (409, None, Conflict),
    ],
)
def test_translate_argo_error(status: int, body: str | None, error_type: type) -> None:
    error = translate_argo_error(status, body)
    assert type(error) is error_type


def test_translate_argo_error_keeps_argos_message_and_code() -> None:
    error = translate_argo_error(500, grpc(13, "currently, set only targets suspend nodes"))
    assert isinstance(error, Conflict)
    assert error.message == "currently, set only targets suspend nodes"
    assert error.details == {"http_status": 500, "argo_code": 13}


def test_translate_argo_error_lets_lint_refusals_be_invalid() -> None:
    error = translate_argo_error(500, grpc(2, "spec.templates is required"), refusal=Invalid)
    assert type(error) is Invalid
    assert error.message == "spec.templates is required"


def test_proxy_unavailable_is_retryable_with_retry_after() -> None:
    error = translate_argo_error(
        503, k8s_status(503, "ServiceUnavailable", "x"), headers={"Retry-After": "7"}
    )
    assert isinstance(error, DependencyDown)
    assert error.retryable
    assert error.delay == 7.0


# --- the client against a recording ApiClient -------------------------------------------------
class RecordingApiClient:
    """Stands in for kubernetes_asyncio's ApiClient.call_api; records each call."""

    def __init__(self, *, answer: Any = None, error: BaseException | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answer = answer if answer is not None else {"metadata": {"name": "wf"}}
        self.error = error

    async def call_api(self, resource_path: str, method: str, **kwargs: Any) -> Any:
        self.calls.append({"path": resource_path, "method": method, **kwargs})
        if self.error is not None:
            raise self.error
        return self.answer


def api_exception(status: int, body: str) -> ApiException:
    exc = ApiException(status=status, reason="x")
    exc.body = body.encode()
    return exc


async def test_every_route_goes_through_the_service_proxy_with_bearer_auth() -> None:
    api = RecordingApiClient()
    argo = ArgoServer(api)  # type: ignore[arg-type]
    await argo.retry("team-a", "wf-1", node_field_selector="name=x", parameters={"p": "1"})
    await argo.resubmit("team-a", "wf-1", memoized=True)
    await argo.set_node(
        "team-a", "wf-1", node_field_selector="id=n1", phase="Succeeded",
        output_parameters={"approved": "yes"},
    )  # fmt: skip
    await argo.resume("team-a", "wf-1", node_field_selector="id=n1")
    await argo.stop("team-a", "wf-1", message="enough")
    await argo.terminate("team-a", "wf-1")
    await argo.lint_template("team-a", {"metadata": {"name": "t"}})
    await argo.lint_workflow("team-a", {"metadata": {"name": "w"}})
    await argo.version()
    assert [(c["method"], c["path"], c["body"]) for c in api.calls] == [
        (
            "PUT",
            f"{PROXY}/api/v1/workflows/team-a/wf-1/retry",
            {"restartSuccessful": False, "nodeFieldSelector": "name=x", "parameters": ["p=1"]},
        ),
        ("PUT", f"{PROXY}/api/v1/workflows/team-a/wf-1/resubmit", {"memoized": True}),
        (
            "PUT",
            f"{PROXY}/api/v1/workflows/team-a/wf-1/set",
            {
                "nodeFieldSelector": "id=n1",
                "phase": "Succeeded",
                "outputParameters": '{"approved":"yes"}',
            },
        ),
        ("PUT", f"{PROXY}/api/v1/workflows/team-a/wf-1/resume", {"nodeFieldSelector": "id=n1"}),
        ("PUT", f"{PROXY}/api/v1/workflows/team-a/wf-1/stop", {"message": "enough"}),
        ("PUT", f"{PROXY}/api/v1/workflows/team-a/wf-1/terminate", {}),
        (
            "POST",
            f"{PROXY}/api/v1/workflow-templates/team-a/lint",
            {"namespace": "team-a", "template": {"metadata": {"name": "t"}}},
        ),
        (
            "POST",
            f"{PROXY}/api/v1/workflows/team-a/lint",
            {"namespace": "team-a", "workflow": {"metadata": {"name": "w"}}},
        ),
        ("GET", f"{PROXY}/api/v1/version", None),
    ]
    for call in api.calls:
        assert call["auth_settings"] == ["BearerToken"]
        assert call["header_params"]["Content-Type"] == "application/json"
        assert call["_return_http_data_only"] is True


async def test_from_url_targets_the_configured_service() -> None:
    api = RecordingApiClient()
    argo = ArgoServer.from_url(api, "https://argo-data-server.kubeopera-argo-data.svc:2746")  # type: ignore[arg-type]
    await argo.terminate("t", "w")
    assert api.calls[0]["path"] == (
        "/api/v1/namespaces/kubeopera-argo-data/services/https:argo-data-server:2746/proxy"
        "/api/v1/workflows/t/w/terminate"
    )


async def test_client_returns_argos_answer() -> None:
    api = RecordingApiClient(answer={"metadata": {"name": "wf-1"}, "status": {"phase": "Running"}})
    argo = ArgoServer(api)  # type: ignore[arg-type]
    assert (await argo.retry("ns", "wf-1"))["status"]["phase"] == "Running"


async def test_client_translates_argo_errors_keeping_the_cause() -> None:
    cause = api_exception(500, grpc(13, "currently, set only targets suspend nodes"))
    argo = ArgoServer(RecordingApiClient(error=cause))  # type: ignore[arg-type]
    with pytest.raises(ArgoRefused, match="set only targets suspend nodes") as caught:
        await argo.set_node("ns", "wf", node_field_selector="id=n", phase="Succeeded")
    assert caught.value.__cause__ is cause


async def test_lint_failure_is_invalid() -> None:
    cause = api_exception(500, grpc(2, "spec.entrypoint: template main not found"))
    argo = ArgoServer(RecordingApiClient(error=cause))  # type: ignore[arg-type]
    with pytest.raises(Invalid, match="template main not found"):
        await argo.lint_workflow("ns", {})


@pytest.mark.parametrize(
    "cause",
    [aiohttp.ClientConnectionError("refused"), TimeoutError(), ConnectionResetError()],
)
async def test_unreachable_api_server_is_dependency_down(cause: BaseException) -> None:
    argo = ArgoServer(RecordingApiClient(error=cause))  # type: ignore[arg-type]
    with pytest.raises(DependencyDown):
        await argo.version()


async def test_invalid_arguments_are_refused_before_any_request() -> None:
    api = RecordingApiClient()
    argo = ArgoServer(api)  # type: ignore[arg-type]
    with pytest.raises(WorkflowManagerError):
        await argo.set_node("ns", "wf", node_field_selector="id=n", phase="Running")
    assert api.calls == []
