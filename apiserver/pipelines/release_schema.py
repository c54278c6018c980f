"""The OpenAPI schema (3.0) of a pipeline body's ``release``, as ``shared.pipelines.Release``
parses it: the same fields, patterns and bounds, read from the same constants so the document
cannot drift from what a save accepts. Purely computational.

What one field alone cannot say (limits against requests, min against max replicas, the canary's
deadline against its steps, ``production`` refused until canary releases exist) is in the
descriptions; the 400 of a save names it (docs/pipeline-spec.md, "Releases").
"""

from __future__ import annotations

from typing import Any, Final

from shared import serving as V
from shared.identifiers import DNS_LABEL_PATTERN
from shared.pipelines import CANARY_RELEASES, MAX_THRESHOLDS

_OUTPUT_REF: Final = {
    "type": "object",
    "additionalProperties": False,
    "required": ["step", "artifact"],
    "properties": {"step": {"type": "string"}, "artifact": {"type": "string"}},
    "description": "An output artifact of one task or step of the template (or of main).",
}
_QUANTITY: Final = {"oneOf": [{"type": "string", "maxLength": 64}, {"type": "number"}]}
_AMOUNTS: Final = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "cpu": {**_QUANTITY, "description": "10m to 64 CPUs, e.g. 500m or 2."},
        "memory": {**_QUANTITY, "description": "16Mi to 256Gi, e.g. 512Mi or 2Gi."},
    },
}


def _object(properties: dict[str, Any], *, required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }
    if required:
        schema["required"] = list(required)
    return schema


def _integer(minimum: int, maximum: int, default: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": minimum, "maximum": maximum}
    if default is not None:
        schema["default"] = default
    return schema


_SERVING: Final = {
    **_object(
        {
            "model_format": _object(
                {
                    "name": {"type": "string", "enum": list(V.MODEL_FORMATS)},
                    "version": {
                        "type": "string",
                        "pattern": V.FORMAT_VERSION_PATTERN,
                        "nullable": True,
                    },
                },
                required=("name",),
            ),
            "runtime": {"type": "string", "pattern": DNS_LABEL_PATTERN, "nullable": True},
            "resources": _object(
                {
                    "requests": {**_AMOUNTS, "description": "Default: the limits, else 1 / 2Gi."},
                    "limits": {**_AMOUNTS, "description": "Default: the requests; not below."},
                    "gpu": _integer(0, V.MAX_GPUS, 0),
                }
            ),
            "min_replicas": {
                **_integer(0, V.MAX_REPLICAS, 1),
                "description": "0 scales to zero; at most max_replicas.",
            },
            "max_replicas": _integer(1, V.MAX_REPLICAS, 3),
            "readiness_deadline_seconds": _integer(
                V.MIN_READINESS_SECONDS, V.MAX_READINESS_SECONDS, V.DEFAULT_READINESS_SECONDS
            ),
        },
        required=("model_format",),
    ),
    "nullable": True,
    "description": "How the registered version is served; with it, the run deploys it to "
    "staging after a passed gate (the deploy stage).",
}
_PRODUCTION: Final = {
    **_object(
        {
            "canary_steps": {
                "type": "array",
                "minItems": 1,
                "maxItems": V.MAX_CANARY_STEPS,
                "items": _integer(1, 99),
                "description": "Traffic percents, strictly increasing.",
            },
            "analysis_interval_seconds": _integer(
                V.MIN_INTERVAL_SECONDS, V.MAX_INTERVAL_SECONDS, 60
            ),
            "deadline_seconds": {
                **_integer(60, V.MAX_DEADLINE_SECONDS, 3600),
                "description": "At least steps x analysis interval.",
            },
            "thresholds": _object(
                {
                    "min_success_rate": {
                        "type": "number",
                        "exclusiveMinimum": True,
                        "minimum": 0,
                        "maximum": 100,
                        "default": 99,
                    },
                    "max_p99_latency_ms": {
                        "type": "number",
                        "exclusiveMinimum": True,
                        "minimum": 0,
                        "maximum": V.MAX_LATENCY_MS,
                        "default": 500,
                    },
                    "min_requests": _integer(1, V.MAX_MIN_REQUESTS, 100),
                    "compare_to_stable": {
                        **_object(
                            {
                                "max_success_rate_drop": {
                                    "type": "number",
                                    "minimum": 0,
                                    "maximum": 100,
                                },
                                "max_latency_increase_percent": {
                                    "type": "number",
                                    "minimum": 0,
                                    "maximum": 1000,
                                },
                            },
                            required=("max_success_rate_drop", "max_latency_increase_percent"),
                        ),
                        "nullable": True,
                    },
                }
            ),
        },
        required=("canary_steps",),
    ),
    "nullable": True,
    "description": "A canary release to production (needs serving)."
    + ("" if CANARY_RELEASES else " Refused (400) until canary releases are available."),
}
RELEASE_SCHEMA: Final = {
    **_object(
        {
            "model": {"type": "string", "pattern": DNS_LABEL_PATTERN},
            "model_artifact": _OUTPUT_REF,
            "scorecard": _OUTPUT_REF,
            "gate": _object(
                {
                    "thresholds": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_THRESHOLDS,
                        "items": _object(
                            {
                                "metric": {"type": "string", "minLength": 1, "maxLength": 200},
                                "op": {"type": "string", "enum": [">=", ">", "<=", "<", "=="]},
                                "value": {"type": "number"},
                            },
                            required=("metric", "op", "value"),
                        ),
                    },
                    "compare_to_production": {
                        **_object(
                            {
                                "metric": {"type": "string", "minLength": 1, "maxLength": 200},
                                "max_regression": {"type": "number", "minimum": 0},
                                "higher_is_better": {"type": "boolean", "default": True},
                            },
                            required=("metric", "max_regression"),
                        ),
                        "nullable": True,
                    },
                },
                required=("thresholds",),
            ),
            "approval": _object({"required": {"type": "boolean", "default": False}}),
            "serving": _SERVING,
            "production": _PRODUCTION,
        },
        required=("model", "model_artifact", "scorecard", "gate"),
    ),
    "nullable": True,
    "description": "ML pipelines only: the model a run registers, the gate it must pass, "
    "its staging deployment and approval (docs/pipeline-spec.md, Releases).",
}
