"""What a release deploys with: its ``serving`` block (the model format KServe loads, the
resources and replicas of the predictor, how long staging may take to become ready) and, for
canary releases, its ``production`` block (the canary's steps and the analysis that judges each).
Purely computational.

``shared.pipelines.Release`` holds both; ``shared.pipelines.parse_body`` checks what one field
alone cannot (``release_errors``: limits against requests, replicas, the canary's deadline
against its steps) with a 400 naming the field. Quantities are read by ``shared.quantity``, the
one parser, and kept as written (Kubernetes takes them so). docs/pipeline-spec.md ("Releases")
is the user's account of every field.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Final, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    model_validator,
)

from shared import quantity
from shared.identifiers import DNS_LABEL_PATTERN

# The model formats KServe's built-in (Cluster)ServingRuntimes list in supportedModelFormats
# (kserve config/runtimes: sklearn, xgboost, lightgbm, mlserver, tensorflow-serving,
# torchserve, tritonserver, pmml, paddle, huggingface): an InferenceService names one as
# ``spec.predictor.model.modelFormat.name`` and KServe picks the runtime that serves it.
ModelFormatName = Literal[
    "sklearn",
    "xgboost",
    "lightgbm",
    "tensorflow",
    "pytorch",
    "onnx",
    "triton",
    "tensorrt",
    "pmml",
    "paddle",
    "huggingface",
    "mlflow",
]
MODEL_FORMATS: Final[tuple[str, ...]] = get_args(ModelFormatName)
# A runtime's supportedModelFormats version: "1", "2", "0.23".
FORMAT_VERSION_PATTERN: Final = r"^[0-9]{1,6}(\.[0-9]{1,6}){0,2}$"

# The bounds of one predictor replica's resources, and of the replicas.
MIN_CPU_MILLIS: Final = 10
MAX_CPU_MILLIS: Final = 64_000
MIN_MEMORY_BYTES: Final = 16 * 1024**2
MAX_MEMORY_BYTES: Final = 256 * 1024**3
MAX_GPUS: Final = 8
MAX_REPLICAS: Final = 20
DEFAULT_CPU: Final = "1"
DEFAULT_MEMORY: Final = "2Gi"
# How long the deploy stage waits for the staging InferenceService to be ready.
MIN_READINESS_SECONDS: Final = 30
MAX_READINESS_SECONDS: Final = 3600
DEFAULT_READINESS_SECONDS: Final = 600


def _quantity_text(value: object) -> str:
    """A quantity as Kubernetes takes it: the text as written, a JSON number as its text."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("a quantity such as 500m, 2 or 512Mi, as a string or a number")
    return value if isinstance(value, str) else repr(value)


def _cpu(value: str) -> str:
    millis = quantity.cpu_millis(value)  # ValueError names what a CPU quantity looks like
    if not MIN_CPU_MILLIS <= millis <= MAX_CPU_MILLIS:
        raise ValueError(
            f"{value!r}: between {MIN_CPU_MILLIS}m and {MAX_CPU_MILLIS // 1000} CPUs per replica"
        )
    return value


def _memory(value: str) -> str:
    size = quantity.memory_bytes(value)
    if not MIN_MEMORY_BYTES <= size <= MAX_MEMORY_BYTES:
        raise ValueError(f"{value!r}: between 16Mi and 256Gi per replica")
    return value


Cpu = Annotated[str, BeforeValidator(_quantity_text), AfterValidator(_cpu)]
Memory = Annotated[str, BeforeValidator(_quantity_text), AfterValidator(_memory)]
Seconds = StrictInt


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelFormat(_Model):
    """KServe's ``modelFormat``: the format's name and, optionally, the version a runtime must
    support (KServe then picks only a runtime listing that version)."""

    name: ModelFormatName
    version: Annotated[str, Field(pattern=FORMAT_VERSION_PATTERN)] | None = None


class Amounts(_Model):
    cpu: Cpu = DEFAULT_CPU
    memory: Memory = DEFAULT_MEMORY


class ServingResources(_Model):
    """One predictor replica's requests and limits, and the GPUs it gets (``nvidia.com/gpu``,
    request and limit alike). Both are complete once validated: a limit not given is its
    request, a request not given its limit, then 1 CPU and 2Gi."""

    requests: Amounts = Amounts()
    limits: Amounts = Amounts()
    gpu: Annotated[StrictInt, Field(ge=0, le=MAX_GPUS)] = 0

    @model_validator(mode="before")
    @classmethod
    def _each_defaults_to_the_other(cls, data: object) -> object:
        """As Kubernetes does: a limit not given is its request, a request not given its limit
        (then the defaults). Only a valid amount is copied: a bad one is reported once, where
        it was written."""
        if not isinstance(data, dict):
            return data
        requests, limits = data.get("requests"), data.get("limits")
        requests = {} if requests is None else requests
        limits = {} if limits is None else limits
        if not isinstance(requests, dict) or not isinstance(limits, dict):
            return data  # pydantic names the field that is no object
        return {
            **data,
            "requests": {**_valid_amounts(limits), **requests},
            "limits": {**_valid_amounts(requests), **limits},
        }


_CHECKS: Final = {"cpu": _cpu, "memory": _memory}


def _valid_amounts(amounts: dict[str, object]) -> dict[str, object]:
    valid = {}
    for key, check in _CHECKS.items():
        if key in amounts:
            try:
                check(_quantity_text(amounts[key]))
            except ValueError:
                continue
            valid[key] = amounts[key]
    return valid


class Serving(_Model):
    """How the registered version is served (an InferenceService per environment)."""

    model_format: ModelFormat
    # A ServingRuntime or ClusterServingRuntime by name (none: KServe picks one for the format).
    runtime: Annotated[str, Field(pattern=DNS_LABEL_PATTERN)] | None = None
    resources: ServingResources = ServingResources()
    min_replicas: Annotated[StrictInt, Field(ge=0, le=MAX_REPLICAS)] = 1  # 0: scale to zero
    max_replicas: Annotated[StrictInt, Field(ge=1, le=MAX_REPLICAS)] = 3
    readiness_deadline_seconds: Annotated[
        Seconds, Field(ge=MIN_READINESS_SECONDS, le=MAX_READINESS_SECONDS)
    ] = DEFAULT_READINESS_SECONDS


# --- production (canary releases; refused at save until the canary stage exists) --------------
MAX_CANARY_STEPS: Final = 10
MIN_INTERVAL_SECONDS: Final = 10
MAX_INTERVAL_SECONDS: Final = 3600
MAX_DEADLINE_SECONDS: Final = 24 * 3600
MAX_LATENCY_MS: Final = 60_000
MAX_MIN_REQUESTS: Final = 1_000_000

# A number as JSON carries it: never a boolean, a string, NaN or an infinity.
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]


def _strictly_increasing(steps: list[int]) -> list[int]:
    for index in range(1, len(steps)):
        if steps[index] <= steps[index - 1]:
            raise ValueError(
                f"the steps must increase: {steps[index]} (step {index}) "
                f"is not above {steps[index - 1]}"
            )
    return steps


class StableComparison(_Model):
    """How much worse than the stable (production) revision the canary may be, in the same
    window: success rate in percentage points, p99 latency in percent of the stable's."""

    max_success_rate_drop: Annotated[Number, Field(ge=0, le=100)]
    max_latency_increase_percent: Annotated[Number, Field(ge=0, le=1000)]


class AnalysisThresholds(_Model):
    """What each analysis window must show. A window with fewer than ``min_requests`` requests
    to the canary judges nothing (neither a pass nor a failure): an idle canary is not rolled
    back for being idle, and the deadline ends one that never gets traffic."""

    min_success_rate: Annotated[Number, Field(gt=0, le=100)] = 99.0  # percent non-5xx
    max_p99_latency_ms: Annotated[Number, Field(gt=0, le=MAX_LATENCY_MS)] = 500.0
    compare_to_stable: StableComparison | None = None
    min_requests: Annotated[StrictInt, Field(ge=1, le=MAX_MIN_REQUESTS)] = 100


class Production(_Model):
    """A canary release to production: the traffic percents the canary takes in turn, each
    held for one analysis interval that must pass, then promotion; the whole within the
    deadline."""

    canary_steps: Annotated[
        list[Annotated[StrictInt, Field(ge=1, le=99)]],
        Field(min_length=1, max_length=MAX_CANARY_STEPS),
        AfterValidator(_strictly_increasing),
    ]
    analysis_interval_seconds: Annotated[
        Seconds, Field(ge=MIN_INTERVAL_SECONDS, le=MAX_INTERVAL_SECONDS)
    ] = 60
    thresholds: AnalysisThresholds = AnalysisThresholds()
    deadline_seconds: Annotated[Seconds, Field(ge=60, le=MAX_DEADLINE_SECONDS)] = 3600


def serving_errors(serving: Serving, where: str = "release.serving") -> list[dict[str, str]]:
    """What the serving block's fields say together: each limit at least its request, at most
    as many replicas at least as at most."""
    errors = []
    requests, limits = serving.resources.requests, serving.resources.limits
    if quantity.cpu_millis(limits.cpu) < quantity.cpu_millis(requests.cpu):
        errors.append(
            {
                "field": f"{where}.resources.limits.cpu",
                "message": f"{limits.cpu!r} is below the request {requests.cpu!r}",
            }
        )
    if quantity.memory_bytes(limits.memory) < quantity.memory_bytes(requests.memory):
        errors.append(
            {
                "field": f"{where}.resources.limits.memory",
                "message": f"{limits.memory!r} is below the request {requests.memory!r}",
            }
        )
    if serving.min_replicas > serving.max_replicas:
        errors.append(
            {
                "field": f"{where}.min_replicas",
                "message": f"{serving.min_replicas} is above max_replicas ({serving.max_replicas})",
            }
        )
    return errors


def production_errors(
    production: Production, where: str = "release.production"
) -> list[dict[str, str]]:
    """What the production block's fields say together: the deadline leaves every step its
    analysis interval."""
    needed = len(production.canary_steps) * production.analysis_interval_seconds
    if production.deadline_seconds < needed:
        message = (
            f"{production.deadline_seconds} s is shorter than the "
            f"{len(production.canary_steps)} steps' analysis ({needed} s)"
        )
        return [{"field": f"{where}.deadline_seconds", "message": message}]
    return []


# --- names -------------------------------------------------------------------------------------
PREDICTOR_SUFFIX: Final = "-predictor"
MAX_ISVC_NAME: Final = 63 - len(PREDICTOR_SUFFIX) - len("-00001")
_ISVC_NAME: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def isvc_name(model: str, environment: str) -> str:
    """``<model>-<environment>`` when it fits Knative's names; otherwise the model shortened
    (and led by ``m`` when it starts with a digit) plus a digest of the pair, so two
    deployments never share a name."""
    name = f"{model}-{environment}"
    if len(name) <= MAX_ISVC_NAME and _ISVC_NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(f"{model}/{environment}".encode()).hexdigest()[:8]
    head = model if model[:1].isalpha() else f"m{model}"
    head = head[: MAX_ISVC_NAME - len(environment) - len(digest) - 2].rstrip("-")
    return f"{head}-{digest}-{environment}"
