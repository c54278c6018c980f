"""The OpenAPI document's component schemas: the shapes of every answer the apiserver gives
(``apiserver.openapi`` renders the document from the routes and these)."""

from __future__ import annotations

from typing import Any

_ERROR = {
    "type": "object",
    "required": ["error", "message", "details"],
    "properties": {
        "error": {"type": "string"},
        "message": {"type": "string"},
        "details": {"type": "object"},
    },
}
_RUN = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "cluster": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "region": {"type": "string", "nullable": True},
                "provider": {"type": "string", "nullable": True},
            },
        },
        "namespace": {"type": "string"},
        "name": {"type": "string"},
        "uid": {"type": "string"},
        "tenant": {"type": "string", "nullable": True},
        "source": {"type": "string"},
        "phase": {"type": "string"},
        "message": {"type": "string", "nullable": True},
        "progress": {"type": "object", "nullable": True},
        "created_at": {"type": "string", "format": "date-time", "nullable": True},
        "started_at": {"type": "string", "format": "date-time", "nullable": True},
        "finished_at": {"type": "string", "format": "date-time", "nullable": True},
        "duration_seconds": {"type": "number", "nullable": True},
        "parameters": {"type": "object", "additionalProperties": {"type": "string"}},
        "template": {"type": "string", "nullable": True},
        "pipeline": {"type": "object", "nullable": True},
        "deleted": {"type": "boolean"},
    },
}
SCHEMAS: dict[str, Any] = {
    "Error": _ERROR,
    "Run": _RUN,
    "RunPage": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Run"}},
            "next_cursor": {"type": "string", "nullable": True},
            "total": {"type": "integer"},
            "total_capped": {"type": "boolean"},
        },
    },
    "RunSummary": {
        "type": "object",
        "properties": {
            "phases": {"type": "object", "additionalProperties": {"type": "integer"}},
            "total": {"type": "integer"},
            "failures_last_24h": {"type": "integer"},
            "since": {"type": "string", "format": "date-time"},
        },
    },
    "RunDetail": {
        "allOf": [
            {"$ref": "#/components/schemas/Run"},
            {
                "type": "object",
                "properties": {
                    "labels": {"type": "object"},
                    "graph": {"type": "object"},
                    "actions": {"type": "array", "items": {"$ref": "#/components/schemas/Action"}},
                    "notifications": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/NotificationDelivery"},
                    },
                },
            },
        ]
    },
    "Action": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "action": {"type": "string"},
            "actor": {"type": "string"},
            "outcome": {"type": "string", "enum": ["succeeded", "failed"]},
            "detail": {"type": "object"},
            "at": {"type": "string", "format": "date-time"},
        },
    },
    "NotificationDelivery": {
        "type": "object",
        "description": "One channel told of the run's finish, or the PagerDuty resolve of a "
        "failed run that succeeded when retried (docs/operations.md).",
        "required": ["channel", "kind", "type", "state", "attempts"],
        "properties": {
            "channel": {"type": "string"},
            "kind": {"type": "string", "enum": ["notify", "resolve"]},
            "type": {"type": "string", "enum": ["slack", "pagerduty"]},
            "state": {
                "type": "string",
                "enum": ["pending", "sending", "sent", "failed", "unconfirmed"],
            },
            "attempts": {"type": "integer"},
            "status_code": {"type": "integer", "nullable": True},
            "last_error": {"type": "string", "nullable": True},
            "attempted_at": {"type": "string", "format": "date-time", "nullable": True},
            "sent_at": {"type": "string", "format": "date-time", "nullable": True},
            "created_at": {"type": "string", "format": "date-time"},
        },
    },
    "ActionResult": {
        "type": "object",
        "properties": {
            "action": {"type": "string"},
            "outcome": {"type": "string"},
            "workflow": {"type": "object"},
        },
    },
    "Cluster": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "region": {"type": "string", "nullable": True},
            "provider": {"type": "string", "nullable": True},
            "host": {"type": "boolean"},
            "registered": {"type": "boolean"},
            "argo": {"type": "object"},
        },
    },
    "ClusterList": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Cluster"}}
        },
    },
    "Grant": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "tenant": {"type": "string"},
            "cluster_id": {"type": "string"},
            "namespace": {"type": "string"},
            "granted_by": {"type": "string"},
            "created_at": {"type": "string", "format": "date-time"},
        },
    },
    "GrantList": {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Grant"}}},
    },
    "Pipeline": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "tenant": {"type": "string"},
            "kind": {"type": "string", "enum": ["data", "ml"]},
            "name": {"type": "string"},
            "description": {"type": "string"},
            "definition_type": {"type": "string", "enum": ["wizard", "yaml", "git"]},
            "current_version": {"type": "integer"},
            "latest_version": {"type": "integer"},
            "created_by": {"type": "string"},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
            "current": {"$ref": "#/components/schemas/PipelineVersion"},
            "schedule": {"$ref": "#/components/schemas/PipelineSchedule"},
            "git": {"$ref": "#/components/schemas/PipelineGitState"},
        },
    },
    "PipelineSchedule": {
        "type": "object",
        "nullable": True,
        "properties": {
            "cron": {"type": "array", "items": {"type": "string"}},
            "timezone": {"type": "string"},
            "concurrency_policy": {"type": "string", "enum": ["Allow", "Forbid", "Replace"]},
            "starting_deadline_seconds": {"type": "integer", "nullable": True},
            "suspended": {"type": "boolean"},
            "scheduled": {"type": "boolean"},
            "cron_workflow": {"type": "string", "nullable": True},
            "paused": {"type": "boolean", "nullable": True},
            "paused_by": {"type": "string", "nullable": True},
            "paused_at": {"type": "string", "nullable": True},
            "last_scheduled_at": {"type": "string", "nullable": True},
            "active_runs": {"type": "array", "items": {"type": "string"}},
            "next_runs": {"type": "array", "items": {"type": "string", "format": "date-time"}},
        },
    },
    "PipelineGitState": {
        "type": "object",
        "nullable": True,
        "description": "What Git sync last found (Git-defined pipelines only).",
        "properties": {
            "repository": {"type": "string"},
            "branch": {"type": "string"},
            "path": {"type": "string"},
            "last_good_commit": {"type": "string", "nullable": True},
            "last_seen_commit": {"type": "string", "nullable": True},
            "last_error": {
                "type": "object",
                "nullable": True,
                "properties": {
                    "reason": {"type": "string"},
                    "message": {"type": "string"},
                    "commit": {"type": "string", "nullable": True},
                    "since": {"type": "string", "format": "date-time", "nullable": True},
                },
            },
            "checked_at": {"type": "string", "format": "date-time", "nullable": True},
        },
    },
    "PipelineList": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Pipeline"}},
            "next_cursor": {"type": "string", "nullable": True},
            "total": {"type": "integer"},
        },
    },
    "PipelineVersion": {
        "type": "object",
        "properties": {
            "version": {"type": "integer"},
            "template_name": {"type": "string"},
            "template_applied": {"type": "boolean"},
            "parameters": {"type": "array", "items": {"type": "object"}},
            "definition": {"type": "object"},
            "template": {"type": "object"},
            "current": {"type": "boolean"},
            "created_by": {"type": "string"},
            "created_at": {"type": "string", "format": "date-time"},
            "commit": {"type": "string", "nullable": True},
            "stages": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The ML control stages of its template, in run order.",
            },
            "release": {
                "type": "object",
                "nullable": True,
                "description": "The release it was saved with, defaults filled in.",
            },
        },
    },
    "PipelineVersionList": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/PipelineVersion"}},
            "next_cursor": {"type": "string", "nullable": True},
            "total": {"type": "integer"},
        },
    },
    "PipelineSaved": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "version": {"type": "integer"},
            "template_name": {"type": "string"},
            "warnings": {"type": "array", "items": {"type": "string"}},
            "commit": {"type": "string", "description": "Git-defined: the commit read."},
        },
    },
    "PipelineValidation": {
        "type": "object",
        "properties": {
            "valid": {"type": "boolean"},
            "template": {"type": "object"},
            "warnings": {"type": "array", "items": {"type": "string"}},
            "commit": {"type": "string", "description": "Git-defined: the commit read."},
        },
    },
    "PipelineSync": {
        "type": "object",
        "required": ["id", "outcome", "commit"],
        "properties": {
            "id": {"type": "string"},
            "outcome": {"type": "string", "enum": ["unchanged", "updated", "failed"]},
            "commit": {"type": "string", "nullable": True},
            "version": {"type": "integer", "description": "updated: the new version."},
            "error": {
                "type": "object",
                "description": "failed: why (also stored on the pipeline and audited).",
                "properties": {
                    "reason": {"type": "string"},
                    "message": {"type": "string"},
                    "violations": {"type": "array", "items": {"type": "object"}},
                },
            },
        },
    },
    "PipelineDeleted": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "deleted": {"type": "boolean"},
            "templates_removed": {"type": "integer"},
        },
    },
    "PipelineRollback": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "current_version": {"type": "integer"},
            "template_restored": {"type": "boolean"},
        },
    },
    "PipelineRun": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "version": {"type": "integer"},
            "workflow": {"type": "object"},
            "parameters": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "Webhook": {
        "type": "object",
        "description": "A webhook trigger's address and token (a credential: docs/api.md).",
        "properties": {
            "trigger": {"type": "string"},
            "url": {"type": "string", "nullable": True},
            "path": {"type": "string"},
            "token": {"type": "string"},
            "curl": {"type": "string", "nullable": True},
            "warning": {"type": "string"},
        },
    },
    "DataSecret": {
        "type": "object",
        "description": "A data secret's name, keys and history: never a value.",
        "properties": {
            "name": {"type": "string"},
            "keys": {"type": "array", "items": {"type": "string"}},
            "created_at": {"type": "string", "format": "date-time", "nullable": True},
            "created_by": {"type": "string", "nullable": True},
            "updated_at": {"type": "string", "format": "date-time", "nullable": True},
            "updated_by": {"type": "string", "nullable": True},
        },
    },
    "DataSecretList": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/DataSecret"}},
            "next_cursor": {"type": "string", "nullable": True},
            "total": {"type": "integer"},
        },
    },
    "Model": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "tenant": {"type": "string"},
            "name": {"type": "string"},
            "production_version": {"type": "integer", "nullable": True},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
        },
    },
    "ModelList": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Model"}},
            "next_cursor": {"type": "string", "nullable": True},
            "total": {"type": "integer"},
        },
    },
    "DataSecretDeleted": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "deleted": {"type": "boolean"}},
    },
    "ModelVersion": {
        "type": "object",
        "properties": {
            "number": {"type": "integer"},
            "state": {"type": "string"},
            "verdict": {"type": "string", "nullable": True, "enum": ["passed", "failed", None]},
            "reasons": {"type": "array", "items": {"type": "string"}},
            "scorecard": {"type": "object", "nullable": True},
            "run": {"type": "object"},
            "pipeline": {"type": "object"},
            "model_file": {"type": "string"},
            "digest": {
                "type": "string",
                "nullable": True,
                "pattern": "^sha256:[0-9a-f]{64}$",
                "description": "SHA-256 of the registered model's bytes (null until registered)",
            },
            "files": {"type": "array", "items": {"type": "string"}},
            "release_outcome": {"type": "string", "nullable": True},
            "archived_by": {"type": "string", "nullable": True},
            "archived_at": {"type": "string", "format": "date-time", "nullable": True},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
        },
    },
    "Approval": {
        "type": "object",
        "properties": {
            "run": {"type": "object"},
            "version": {"type": "integer"},
            "state": {"type": "string", "enum": ["pending", "approved", "rejected", "expired"]},
            "requested_at": {"type": "string", "format": "date-time"},
            "expires_at": {"type": "string", "format": "date-time"},
            "decided_by": {"type": "string", "nullable": True},
            "decided_at": {"type": "string", "format": "date-time", "nullable": True},
            "reason": {"type": "string", "nullable": True},
        },
    },
    "ModelDetail": {
        "allOf": [
            {"$ref": "#/components/schemas/Model"},
            {
                "type": "object",
                "properties": {
                    "versions": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/ModelVersion"},
                    },
                    "more_versions": {"type": "boolean"},
                    "pending_approvals": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/Approval"},
                    },
                    "deployments": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/Deployment"},
                    },
                },
            },
        ]
    },
    "ModelFile": {"type": "object", "description": "The scorecard or the lineage, as stored."},
    "Deployment": {
        "type": "object",
        "required": ["environment", "version", "state"],
        "properties": {
            "environment": {"type": "string", "enum": ["staging", "production"]},
            "version": {"type": "integer"},
            "state": {"type": "string", "enum": ["deploying", "ready", "failed"]},
            "message": {"type": ["string", "null"]},
            "url": {"type": ["string", "null"]},
            "requested_by": {"type": "string"},
            "requested_at": {"type": "string", "format": "date-time"},
            "ready_at": {"type": ["string", "null"], "format": "date-time"},
            "history": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "version": {"type": "integer"},
                        "previous_version": {"type": ["integer", "null"]},
                        "action": {"type": "string", "enum": ["deploy", "promote", "rollback"]},
                        "actor": {"type": "string"},
                        "run": {"type": ["string", "null"]},
                        "at": {"type": "string", "format": "date-time"},
                    },
                },
            },
        },
    },
    "DeploymentChanged": {
        "type": "object",
        "properties": {
            "model": {"type": "string"},
            "deployment": {"$ref": "#/components/schemas/Deployment"},
        },
    },
    "Endpoint": {
        "type": "object",
        "properties": {
            "model": {"type": "string"},
            "environment": {"type": "string"},
            "version": {"type": "integer"},
            "state": {"type": "string"},
            "url": {"type": ["string", "null"]},
            "token": {"type": ["string", "null"]},
            "token_shown": {"type": "boolean"},
            "token_reason": {"type": ["string", "null"]},
            "example": {"type": ["object", "null"]},
        },
    },
    "ModelVersionArchived": {
        "type": "object",
        "properties": {
            "model": {"type": "string"},
            "version": {"$ref": "#/components/schemas/ModelVersion"},
        },
    },
    "ApprovalDecided": {
        "type": "object",
        "properties": {
            "model": {"type": "string"},
            "approval": {"$ref": "#/components/schemas/Approval"},
        },
    },
    "TrackingRun": {
        "type": "object",
        "properties": {
            "run_id": {"type": "string"},
            "name": {"type": "string", "nullable": True},
            "status": {"type": "string"},
            "started_at": {"type": "string", "format": "date-time", "nullable": True},
            "ended_at": {"type": "string", "format": "date-time", "nullable": True},
            "user": {"type": "string", "nullable": True},
            "metrics": {
                "type": "object",
                "additionalProperties": {"type": "number", "nullable": True},
            },
            "params": {"type": "object", "additionalProperties": {"type": "string"}},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "TrackingRunPage": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/TrackingRun"}},
            "next_cursor": {"type": "string", "nullable": True},
            "total": {"type": "integer", "nullable": True},
            "experiment": {"type": "object", "nullable": True},
        },
    },
    "MetricPoint": {
        "type": "object",
        "properties": {
            "step": {"type": "integer"},
            "value": {"type": "number", "nullable": True},
            "timestamp": {"type": "integer", "nullable": True},
            "at": {"type": "string", "format": "date-time", "nullable": True},
        },
    },
    "MetricHistoryPage": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/MetricPoint"}},
            "next_cursor": {"type": "string", "nullable": True},
            "total": {"type": "integer", "nullable": True},
            "run_id": {"type": "string"},
            "key": {"type": "string"},
        },
    },
    "RefreshAccepted": {"type": "object", "properties": {"refresh": {"type": "string"}}},
    "EventStream": {"type": "string", "description": "text/event-stream"},
    "Text": {"type": "string"},
    "Binary": {"type": "string", "format": "binary"},
    "OpenAPI": {"type": "object"},
}
