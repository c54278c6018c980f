"""``/data-secrets``: the tenant's write-only secrets, all through the compiler's internal API
(the apiserver has no rights in tenant namespaces)."""
