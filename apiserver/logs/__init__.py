"""Step logs: from the pod while it exists, from Argo's archived log afterwards."""
