"""What a pipeline sets in motion besides a manual run: its event triggers (Argo Events)."""
