"""``GET /workflows/stream``: one LISTEN connection per replica, fanned out in-process."""
