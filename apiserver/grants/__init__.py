"""``/access-grants``: administrators widen a tenant's view to namespaces of other clusters."""
