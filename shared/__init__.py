"""Code every workflow-manager deployable shares: settings, logging, errors, database, k8s."""
