"""Artifact downloads from object storage, after the caller's access to the run is checked."""
