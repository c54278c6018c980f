"""The change check: a branch's head commit over Git's smart HTTP, in process (aiohttp).

What ``git ls-remote <repository> refs/heads/<branch>`` does, without starting a ``git``
process (and its TLS set-up) per repository: a poller pass over thousands of repositories
reuses its HTTPS connections, and costs one or two small requests per repository
(``compiler.gitsync.pktline``). Nothing is cloned or fetched here.

Protocol v2's ``ls-refs`` is stateless: once a pass has seen a host answer discovery with v2,
its other repositories on that host are asked ``ls-refs`` at once, one request instead of two
(what the server answers to one repository it answers to all; an answer that is not a valid
``ls-refs`` result sends that check back through discovery).

Every connection goes to an address the installation's policy allows, the one checked
(``compiler.gitsync.reach``). Credentials go in an ``Authorization: Basic`` header built in
memory, never in a URL. Redirects
are not followed (the credentials would follow them): a redirected repository is reported so
its owner can give the final URL. Every answer is read up to ``max_bytes`` at most, within
``timeout`` seconds.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Final
from urllib.parse import urlsplit

import aiohttp

from compiler.gitsync import pktline
from compiler.gitsync import remotes as R
from compiler.gitsync.addresses import NotAllowed
from compiler.gitsync.reach import Reach
from compiler.gitsync.remotes import Credentials, GitFailed
from shared.errors import DependencyDown

USER_AGENT: Final = "git/2 (workflow-manager)"


class RefLister:
    """Inside ``pooled`` (a poller pass) every check shares one pool of HTTPS connections;
    outside it (a save, a sync asked for) a check opens and closes its own."""

    def __init__(
        self,
        *,
        reach: Reach,
        timeout: float,
        ca_bundle: str | None = None,
        max_bytes: int = 4 * 1024 * 1024,
        connections: int = 32,
    ) -> None:
        self._reach = reach
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._max_bytes = max_bytes
        self._connections = connections
        self._ca_bundle = ca_bundle
        self._session: aiohttp.ClientSession | None = None
        self._v2_hosts: dict[str, frozenset[str]] = {}  # host → capabilities, for one pass

    def _open(self) -> aiohttp.ClientSession:
        # A private CA replaces the system's bundle, as http.sslCAInfo does for git; read for
        # each pool, so a renewed bundle is taken without a restart.
        try:
            context = ssl.create_default_context(cafile=self._ca_bundle)
        except (OSError, ssl.SSLError) as exc:
            raise DependencyDown(
                "GIT_CA_BUNDLE could not be read", details={"error": type(exc).__name__}
            ) from None
        return aiohttp.ClientSession(
            # Every connection goes to an address the policy checked (compiler.gitsync.reach).
            connector=aiohttp.TCPConnector(
                limit=self._connections, ssl=context, resolver=self._reach.resolver()
            ),
            cookie_jar=aiohttp.DummyCookieJar(),  # nothing a server sets follows a request
            trust_env=False,  # no proxy variables, no .netrc credentials
        )

    @contextlib.asynccontextmanager
    async def pooled(self) -> AsyncIterator[None]:
        """Checks inside the block reuse their connections (one pass); closed at its end."""
        async with self._open() as session:
            self._session = session
            try:
                yield
            finally:
                self._session = None
                self._v2_hosts = {}

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[aiohttp.ClientSession]:
        if self._session is not None:
            yield self._session
            return
        async with self._open() as session:
            yield session

    async def head(
        self, repository: str, branch: str, credentials: Credentials | None, *, path: str = ""
    ) -> str:
        """The commit ``refs/heads/<branch>`` points at; ``GitFailed`` otherwise."""
        base = repository.rstrip("/")
        ref = f"refs/heads/{branch}"

        def failed(reason: str) -> GitFailed:
            return GitFailed(
                reason,
                R.sentence(
                    reason,
                    repository=repository,
                    branch=branch,
                    path=path,
                    commit=None,
                    credentials=credentials is not None,
                ),
            )

        headers = {"Git-Protocol": "version=2", "User-Agent": USER_AGENT}
        if credentials is not None:
            headers["Authorization"] = aiohttp.encode_basic_auth(
                credentials.username, credentials.password
            )
        host = urlsplit(base).netloc
        pooled = self._session is not None

        async def ls_refs(capabilities: frozenset[str]) -> dict[str, str]:
            data = await self._request(
                "POST",
                f"{base}/git-upload-pack",
                headers={
                    **headers,
                    "Content-Type": pktline.REQUEST_TYPE,
                    "Accept": pktline.RESULT_TYPE,
                },
                body=pktline.ref_request(ref, capabilities),
                expect=pktline.RESULT_TYPE,
                failed=failed,
            )
            return pktline.parse_refs(data)

        try:
            self._reach.literal(base)  # a host written as an address is never resolved
            refs: dict[str, str] | None = None
            known = self._v2_hosts.get(host) if pooled else None
            if known is not None:
                try:
                    refs = await ls_refs(known)
                except (GitFailed, pktline.ProtocolError) as error:
                    if isinstance(error, GitFailed) and error.reason != R.PROTOCOL:
                        raise
            if refs is None:
                data = await self._request(
                    "GET",
                    f"{base}/info/refs?service=git-upload-pack",
                    headers=headers,
                    expect=pktline.ADVERTISEMENT_TYPE,
                    failed=failed,
                )
                advertisement = pktline.parse_advertisement(data)
                refs = dict(advertisement.refs)
                if advertisement.version == 2:
                    if pooled:
                        self._v2_hosts[host] = advertisement.capabilities
                    refs = await ls_refs(advertisement.capabilities)
        except pktline.ProtocolError:
            raise failed(R.PROTOCOL) from None
        except (aiohttp.ClientError, OSError, TimeoutError, NotAllowed):
            # The exception's text may carry the URL; the sentence is ours alone.
            raise failed(R.UNREACHABLE) from None
        commit = refs.get(ref)
        if commit is None:
            raise failed(R.BRANCH_NOT_FOUND)
        return commit

    async def _request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str],
        expect: str,
        failed: Callable[[str], GitFailed],
        body: bytes | None = None,
    ) -> bytes:
        async with (
            self._client() as session,
            session.request(
                method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=self._timeout,
            ) as response,
        ):
            if response.status in (401, 403):
                raise failed(R.AUTH)
            if response.status == 404:
                raise failed(R.REPOSITORY_NOT_FOUND)
            if response.status != 200:
                raise failed(R.UNREACHABLE if response.status >= 500 else R.PROTOCOL)
            if response.content_type != expect:  # a dumb server, a login page, a proxy's answer
                raise failed(R.PROTOCOL)
            data = bytearray()
            while chunk := await response.content.read(64 * 1024):
                data += chunk
                if len(data) > self._max_bytes:
                    raise failed(R.TOO_LARGE)
            return bytes(data)
