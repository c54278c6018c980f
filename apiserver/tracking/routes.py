"""``GET /ml-tracking/{pipeline}/runs`` and ``/runs/{run}/metrics/{key}``.

The pipeline is checked first, here, against the caller's tenant (an ML pipeline of another
tenant is a 404 like a missing one, and MLflow is never asked); only then is MLflow read, as
its administrator, on the experiment the compiler recorded for that pipeline. A run is served
only when it belongs to that experiment. Pages are MLflow's, their token carried inside our
signed cursor (bound to the path and the tenant), so a cursor cannot be moved to another
pipeline, run or metric, nor edited to reach one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from apiserver.auth import Identity, Permission, identity_of
from apiserver.paging import parse_cursor, parse_limit
from apiserver.params import query_params
from apiserver.routing import API_PREFIX, PAGE, Param, RouteSpec
from apiserver.services import SERVICES, Services
from apiserver.tracking.views import experiment_of, metric_item, run_item
from shared import cursors
from shared.db.experiments import ExperimentRow
from shared.errors import DependencyDown, NotFound
from shared.labels import PIPELINE_KIND_ML
from shared.mlflow import MlflowClient

BASE: Final = f"{API_PREFIX}/ml-tracking/{{pipeline}}"


async def _experiment(
    services: Services, identity: Identity, pipeline_id: str
) -> ExperimentRow | None:
    """The caller's ML pipeline's experiment (None: it has none yet); NotFound for a pipeline
    the caller's tenant does not have, before anything else is asked."""
    pipeline = await services.pipelines.find(PIPELINE_KIND_ML, pipeline_id, tenant=identity.tenant)
    if pipeline is None:
        raise NotFound(f"no ML pipeline {pipeline_id!r}", details={"pipeline": pipeline_id})
    return await services.experiments.find(pipeline.id, tenant=pipeline.tenant)


def _tracking(services: Services) -> MlflowClient:
    if services.mlflow is None:
        raise DependencyDown(
            "experiment tracking is not configured (MLFLOW_URL)", details={"dependency": "mlflow"}
        )
    return services.mlflow


def _page_token(
    services: Services, params: Mapping[str, list[str]], *, bound_to: str
) -> str | None:
    position = parse_cursor(services.cursors, params.get("cursor"), bound_to=bound_to, shape=(str,))
    return str(position[0]) if position else None


def _answer(
    services: Services, items: list[dict[str, Any]], token: str | None, *, bound_to: str
) -> dict[str, Any]:
    cursor = services.cursors.encode((token,), bound_to=bound_to) if token else None
    # MLflow counts nothing: the total is unknown, and said so.
    return {"items": items, "next_cursor": cursor, "total": None}


async def list_runs(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    params = query_params(request, {"limit", "cursor"})
    limit = parse_limit(params.get("limit"))
    experiment = await _experiment(services, identity, request.match_info["pipeline"])
    bound_to = cursors.binding(request.path, tenant=identity.tenant)
    token = _page_token(services, params, bound_to=bound_to)
    if experiment is None:  # saved before tracking was configured: no run was ever logged
        return web.json_response(
            {**_answer(services, [], None, bound_to=bound_to), "experiment": None}
        )
    page = await _tracking(services).search_runs(
        experiment.experiment_id, max_results=limit, page_token=token
    )
    answer = _answer(
        services, [run_item(run) for run in page.items], page.next_token, bound_to=bound_to
    )
    answer["experiment"] = {"id": experiment.experiment_id, "name": experiment.name}
    return web.json_response(answer)


async def metric_history(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    params = query_params(request, {"limit", "cursor"})
    limit = parse_limit(params.get("limit"))
    run_id, key = request.match_info["run"], request.match_info["key"]
    experiment = await _experiment(services, identity, request.match_info["pipeline"])
    bound_to = cursors.binding(request.path, tenant=identity.tenant)
    token = _page_token(services, params, bound_to=bound_to)
    missing = NotFound(f"the pipeline has no run {run_id!r}", details={"run": run_id})
    if experiment is None:
        raise missing
    mlflow = _tracking(services)
    run = await mlflow.run(run_id)
    if run is None or experiment_of(run) != experiment.experiment_id:
        raise missing
    page = await mlflow.metric_history(run_id, key, max_results=limit, page_token=token)
    answer = _answer(
        services, [metric_item(metric) for metric in page.items], page.next_token, bound_to=bound_to
    )
    answer.update(run_id=run_id, key=key)
    return web.json_response(answer)


_ACTING = Param("acting_tenant", "An administrator acting for this tenant.")
_ERRORS: Final = {400: "Error", 403: "Error", 404: "Error", 503: "Error"}

ROUTES = (
    RouteSpec(
        "GET",
        f"{BASE}/runs",
        list_runs,
        Permission.TRACKING_READ,
        "The ML pipeline's MLflow runs, newest first (MLflow's pages; total is null).",
        "ml-tracking",
        query=(*PAGE, _ACTING),
        responses={200: "TrackingRunPage", **_ERRORS},
    ),
    RouteSpec(
        "GET",
        f"{BASE}/runs/{{run}}/metrics/{{key}}",
        metric_history,
        Permission.TRACKING_READ,
        "One metric's history in one of the pipeline's runs (a '/' in the key as %2F).",
        "ml-tracking",
        query=(*PAGE, _ACTING),
        responses={200: "MetricHistoryPage", **_ERRORS},
    ),
)
