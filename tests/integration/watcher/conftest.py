"""Watcher fixtures live in harness.py so tests can import its helpers too."""

from tests.integration.watcher.harness import start_watcher, world

__all__ = ["start_watcher", "world"]
