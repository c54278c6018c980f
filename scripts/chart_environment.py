"""What the chart gives each deployable, for the demo to give the same: only the variables it
reads (``charts/workflow-manager/files/environment.yaml``, which the chart's tests hold to the
code), and inference_auth a login role of its own, a member of ``wm_inference_auth``, instead
of the owner's (docs/operations.md, "Each deployable's Secret").
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
import yaml

TABLE = Path(__file__).resolve().parent.parent / "charts/workflow-manager/files/environment.yaml"
READER_ROLE = "wm_inference_auth_demo"


def only_what_it_reads(deployable: str, env: dict[str, str]) -> dict[str, str]:
    """``env`` without the variables of the chart's table that ``deployable`` does not read
    (anything else, PATH and the like, is kept)."""
    readers: dict[str, list[str]] = yaml.safe_load(TABLE.read_text())["readers"]
    name = deployable.replace("_", "-")
    return {k: v for k, v in env.items() if k not in readers or name in readers[k]}


async def reader_url(owner_url: str) -> str:
    """inference_auth's URL: a LOGIN member of ``wm_inference_auth`` (migration 0007 must have
    run), created once per PostgreSQL cluster; the demo's PostgreSQL trusts local logins."""
    connection = await asyncpg.connect(owner_url)
    try:
        exists = await connection.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", READER_ROLE)
        if not exists:
            await connection.execute(f"CREATE ROLE {READER_ROLE} LOGIN IN ROLE wm_inference_auth")
    finally:
        await connection.close()
    scheme, _, rest = owner_url.partition("://")
    return f"{scheme}://{READER_ROLE}@{rest.partition('@')[2]}"
