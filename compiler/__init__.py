"""The `compiler` deployable of workflow-manager (see docs/architecture.md)."""
