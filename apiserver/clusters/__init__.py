"""``/workflow-clusters`` and the connection cache reaching each watched cluster."""
