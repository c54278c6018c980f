"""``/workflows``: the run list, summary and detail (query building is in ``query``)."""
