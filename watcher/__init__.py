"""The watcher deployable: one informer per cluster, runs normalised into PostgreSQL."""
