"""Code every workflow-manager deployable shares: settings, logging, errors, database, Kubernetes."""
