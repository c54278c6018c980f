"""Run notifications: Slack and PagerDuty, sent by the compiler's leader exactly once per run
and channel (docs/operations.md, "Run notifications")."""
