"""The route table: every route of the apiserver declared once, with the access it needs and
what the OpenAPI document says about it (``apiserver.openapi`` renders the same table)."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from apiserver.auth import Access
from apiserver.paging import DEFAULT_LIMIT, MAX_LIMIT
from shared import identifiers as ids
from shared.errors import Invalid

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
API_PREFIX = "/api/v1"
INTERNAL_PREFIX = "/internal/v1"


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter as the OpenAPI document describes it; ``pattern`` (anchored, matched whole),
    ``max_length``, ``minimum`` and ``maximum`` are the rules the server enforces."""

    name: str
    description: str
    type: str = "string"
    required: bool = False
    enum: tuple[str, ...] = ()
    pattern: str | None = None
    max_length: int | None = None
    minimum: int | None = None
    maximum: int | None = None
    format: str | None = None
    example: str | None = None

    def schema(self) -> dict[str, Any]:
        """The JSON schema of the parameter's value. Purely computational."""
        schema: dict[str, Any] = {"type": self.type}
        if self.enum:
            schema["enum"] = list(self.enum)
        if self.pattern is not None:
            schema["pattern"] = self.pattern
        if self.max_length is not None:
            schema["minLength"] = 1
            schema["maxLength"] = self.max_length
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        if self.format is not None:
            schema["format"] = self.format
        return schema

    def accepts(self, value: str) -> bool:
        """Whether ``value`` keeps the pattern and length rules, and an integer's bounds.
        Purely computational."""
        if self.type == "integer":
            # isascii first: str.isdigit accepts "²", which int() refuses.
            if not value.isascii() or not value.isdigit() or len(value) > 18:
                return False
            number = int(value)
            low, high = self.minimum, self.maximum
            return (low is None or number >= low) and (high is None or number <= high)
        if self.max_length is not None and not 1 <= len(value) <= self.max_length:
            return False
        return self.pattern is None or re.fullmatch(self.pattern, value) is not None


# Kubernetes names: a namespace is a DNS-1123 label, a workflow, template or node (Argo derives
# node ids and pod names from the workflow's name) a DNS-1123 subdomain.
DNS_LABEL: Final = ids.DNS_LABEL_PATTERN
DNS_SUBDOMAIN: Final = ids.DNS_SUBDOMAIN_PATTERN
CLUSTER_ID: Final = ids.CLUSTER_ID_PATTERN
# Argo's own rule for artifact (and parameter) names.
ARTIFACT_NAME: Final = r"^[-A-Za-z0-9_]+$"
PIPELINE_ID: Final = ids.PIPELINE_ID_PATTERN
# MLflow's rule for metric names (letters, digits, '_', '-', '.', ':', '/'), ASCII and without
# the space it also allows.
METRIC_KEY: Final = r"^[A-Za-z0-9_\-.:/]+$"
# Model ids are ours (lower-case hexadecimal); a file of a model version is a plain file name.
MODEL_ID: Final = r"^[a-z0-9]{1,40}$"
FILE_NAME: Final = r"^[A-Za-z0-9_.-]+$"

# Every path placeholder of every route, with the rule checked before its handler runs (an
# unknown placeholder fails at registration: nothing is served undocumented).
PATH_PARAMS: Final[Mapping[str, Param]] = {
    param.name: param
    for param in (
        Param("cluster", "Cluster id.", pattern=CLUSTER_ID, max_length=253, example="c1"),
        Param("ns", "Namespace.", pattern=DNS_LABEL, max_length=63, example="kubeopera-data-acme"),
        Param("name", "Workflow name.", pattern=DNS_SUBDOMAIN, max_length=253, example="etl-1"),
        Param(
            "node", "Node id or pod name.", pattern=DNS_SUBDOMAIN, max_length=253, example="etl-1"
        ),
        Param(
            "artifact",
            "Output artifact name.",
            pattern=ARTIFACT_NAME,
            max_length=253,
            example="out",
        ),
        Param(
            "template",
            "WorkflowTemplate name.",
            pattern=DNS_SUBDOMAIN,
            max_length=253,
            example="etl",
        ),
        Param("id", "Pipeline id.", pattern=PIPELINE_ID, max_length=40, example="a1b2c3"),
        Param(
            "trigger",
            "Trigger name.",
            pattern=ids.TRIGGER_NAME_PATTERN,
            max_length=40,
            example="on-upload",
        ),
        Param(
            "secret",
            "Data secret name.",
            pattern=DNS_SUBDOMAIN,
            max_length=253,
            example="warehouse",
        ),
        Param("pipeline", "ML pipeline id.", pattern=PIPELINE_ID, max_length=40, example="b2c3d4"),
        # An MLflow run id under /ml-tracking (32 hexadecimal digits), a workflow run's name
        # under /models approvals: both DNS-1123 subdomains.
        Param(
            "run",
            "Run id.",
            pattern=DNS_SUBDOMAIN,
            max_length=253,
            example="5df970fc59da4761ad087131c171f4aa",
        ),
        Param(
            "key",
            "MLflow metric key ('/' percent-encoded as %2F).",
            pattern=METRIC_KEY,
            max_length=250,
            example="loss",
        ),
        Param("model", "Model id.", pattern=MODEL_ID, max_length=40, example="c3d4e5"),
        Param(
            "v", "Model version number.", type="integer", minimum=1, maximum=2**31 - 1, example="1"
        ),
        Param(
            "env",
            "A deployment's environment.",
            pattern=r"^(staging|production)$",
            example="staging",
        ),
        Param(
            "file",
            "A version's file: eval_scorecard.json or lineage.json.",
            pattern=FILE_NAME,
            max_length=64,
            example="eval_scorecard.json",
        ),
    )
}
# The page of every keyset-paginated list (apiserver.paging holds the rule).
PAGE: Final = (
    Param(
        "limit",
        f"Page size (default {DEFAULT_LIMIT}).",
        type="integer",
        minimum=1,
        maximum=MAX_LIMIT,
    ),
    Param("cursor", "The next_cursor of the previous page."),
)
PLACEHOLDER: Final = re.compile(r"{([^}]+)}")


def path_params(path: str) -> list[Param]:
    """The placeholders of ``path`` as parameters; KeyError for an undeclared one."""
    return [PATH_PARAMS[name] for name in PLACEHOLDER.findall(path)]


def check_path(match_info: Mapping[str, str], params: Iterable[Param]) -> None:
    """Raise Invalid naming the first path parameter that breaks its rule."""
    for param in params:
        value = match_info.get(param.name, "")
        if not param.accepts(value):
            raise Invalid(
                f"{param.name}: not a valid {param.description.rstrip('.').lower()}",
                details={"parameter": param.name, "value": value[:253]},
            )


@dataclass(frozen=True, slots=True)
class RouteSpec:
    method: str
    path: str  # full path with {placeholders}, e.g. /api/v1/workflows/{cluster}/{ns}/{name}
    handler: Handler
    access: Access
    summary: str
    tag: str
    query: tuple[Param, ...] = ()
    headers: tuple[Param, ...] = ()  # beyond the key and the identity headers
    body: Mapping[str, Any] | None = None  # JSON schema of the request body
    responses: Mapping[int, str] = field(default_factory=dict)
    content_type: str = "application/json"  # of the 200/201/202 answer


ROUTE_SPEC = web.AppKey("route_specs", dict[tuple[str, str], RouteSpec])


def add_routes(app: web.Application, specs: Iterable[RouteSpec]) -> None:
    """Register ``specs`` and remember each route's access for the auth middleware."""
    table: dict[tuple[str, str], RouteSpec] = {}
    for spec in specs:
        app.router.add_route(spec.method, spec.path, _checked(spec.handler, path_params(spec.path)))
        table[(spec.method, spec.path)] = spec
    app[ROUTE_SPEC] = table


def _checked(handler: Handler, params: list[Param]) -> Handler:
    """``handler`` behind the rules of its path parameters (after the auth middleware: an
    unauthenticated caller learns nothing about the shapes)."""
    if not params:
        return handler

    @functools.wraps(handler)
    async def checked(request: web.Request) -> web.StreamResponse:
        check_path(request.match_info, params)
        return await handler(request)

    return checked


def access_of(request: web.Request) -> Access | None:
    """What the matched route needs; None for a path no route matches."""
    route = request.match_info.route
    resource = route.resource
    if resource is None:
        return None
    spec = request.app[ROUTE_SPEC].get((route.method, resource.canonical))
    if spec is None and request.method == "HEAD":
        spec = request.app[ROUTE_SPEC].get(("GET", resource.canonical))
    return None if spec is None else spec.access
