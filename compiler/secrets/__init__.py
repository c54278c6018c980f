"""The tenant's data secrets: write-only Kubernetes Secrets in its namespace that pipelines,
Git credentials and notification channels refer to by name."""
