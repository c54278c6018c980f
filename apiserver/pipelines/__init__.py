"""``/data-pipelines`` and ``/ml-pipelines``: reads from PostgreSQL, everything that renders,
checks or applies through the compiler's internal API."""
