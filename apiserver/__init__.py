"""The `apiserver` deployable of workflow-manager (see docs/architecture.md)."""
