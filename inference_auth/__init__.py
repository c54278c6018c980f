"""The `inference_auth` deployable of workflow-manager (see docs/architecture.md)."""
