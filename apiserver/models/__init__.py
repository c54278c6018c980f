"""``/models``: the registry's models, versions, files and approvals, read and decided through
``shared.db.registry`` (stagectl writes it)."""
