"""Run actions (stop, terminate, retry) and template submission, each recorded with its actor
and outcome in ``run_actions``."""
