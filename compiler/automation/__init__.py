"""Automation: what makes a pipeline run by itself. Schedules (a CronWorkflow per pipeline,
following its current version, paused and resumed without a new version) and event triggers
(an Argo Events EventSource and Sensor per pipeline, with webhook tokens)."""
