"""A tenant's Git repositories as the compiler reaches them: the credentials from the tenant's
data secret, the branch's head over smart HTTP (``http_refs``), the document through ``git``
(``git_cli``), no more than ``fetches`` of them at once whoever asks. This is the save path's
``GitReader`` (``compiler.pipelines.service``) and the poller's way to its repositories.

The data secret ``credentials_secret`` names holds ``username`` (optional) and ``password`` or
``token``; its values are read for each check (a pass shares one read per secret) and kept no
longer than the check.
"""

from __future__ import annotations

import asyncio
import contextlib

from compiler.gitsync import metrics
from compiler.gitsync import remotes as R
from compiler.gitsync.git_cli import GitCli
from compiler.gitsync.http_refs import RefLister
from compiler.gitsync.remotes import Credentials, GitFailed
from compiler.pipelines.definitions import Fetched
from compiler.secrets.values import SecretGetter, read_data_secret
from shared.errors import NotFound
from shared.pipelines import GitDefinition


class GitRepositories:
    def __init__(
        self, *, secrets: SecretGetter, refs: RefLister, cli: GitCli, fetches: int = 4
    ) -> None:
        self._secrets = secrets
        self._refs = refs
        self._cli = cli
        # Every fetch, the poller's and a save's alike, takes one of ``fetches`` places (each
        # costs a git process and room in the tmpfs).
        self._fetches = asyncio.Semaphore(fetches)

    async def credentials(self, tenant: str, definition: GitDefinition) -> Credentials | None:
        """The credentials of ``definition`` (None: a public repository)."""
        name = definition.credentials_secret
        if name is None:
            return None
        try:
            values = await read_data_secret(self._secrets, tenant, name)
        except NotFound:
            raise GitFailed(R.CREDENTIALS, f"there is no data secret {name!r}") from None
        return R.credentials_from(values, name)

    def pooled(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Checks inside share their HTTPS connections (a poller pass)."""
        return self._refs.pooled()

    async def head(self, definition: GitDefinition, credentials: Credentials | None) -> str:
        """The commit the branch points at now (no fetch)."""
        return await self._refs.head(
            definition.repository, definition.branch, credentials, path=definition.path
        )

    async def fetch(self, definition: GitDefinition, credentials: Credentials | None) -> Fetched:
        """The document at the branch's head, and that commit (one of the ``fetches``
        places held meanwhile, waited for in turn)."""
        metrics.FETCHES_WAITING.inc()
        try:
            await self._fetches.acquire()
        finally:
            metrics.FETCHES_WAITING.dec()
        metrics.FETCHES_RUNNING.inc()
        try:
            document = await self._cli.read(
                definition.repository, definition.branch, definition.path, credentials
            )
        finally:
            metrics.FETCHES_RUNNING.dec()
            self._fetches.release()
        return Fetched(document.commit, document.text, document.blob)

    async def read(self, tenant: str, definition: GitDefinition) -> Fetched:
        """``GitReader``: a save reads the document at once."""
        return await self.fetch(definition, await self.credentials(tenant, definition))
