"""Pipelines: the wizard specification and its compilation, tenant YAML, stamping, a save's
definition, and the service that saves, versions, rolls back, deletes and runs them."""
