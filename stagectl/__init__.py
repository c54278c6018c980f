"""The `stagectl` deployable of workflow-manager (see docs/architecture.md)."""
