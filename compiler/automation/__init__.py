"""Automation: what makes a pipeline run by itself. Schedules (a CronWorkflow per pipeline,
following its current version, paused and resumed without a new version)."""
