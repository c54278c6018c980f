"""Model serving: the objects a deployment writes on the host cluster, and their I/O."""
