"""Reading one file at a branch's head with the ``git`` command (the compiler's image has it).

Only when the change check found a new commit (or a save reads it): a bare repository in a
fresh directory under ``workdir`` (a tmpfs in the chart: the root filesystem is read-only), one
shallow partial fetch of the branch (depth 1, no tags, ``--filter=blob:none``: the commit and
its trees only), then the blob at ``path`` is looked up in the trees and fetched alone (git's
partial clone fetches a missing blob from its promisor remote when it is read), its size read
first. A repository whose other files are far larger than ``max_fetch_bytes`` still yields its
one document. A server that ignores the filter sends everything, and one that will not send a
blob by its id (protocol v0 without ``uploadpack.allowAnySHA1InWant``) is asked for the tip
again, into a fresh repository, with every blob smaller than the document's limit
(``--filter=blob:limit``); the limit below bounds both.
The directory is removed afterwards, whatever happened.

What keeps it safe:

- git connects only to the address ``compiler.gitsync.reach`` checked (``http.curloptResolve``;
  TLS still checks the certificate for the URL's name);
- ``git`` runs with an environment built here, nothing inherited: no user or system
  configuration, no credential helper, no prompt, only the ``https`` protocol, no redirects;
- the credentials reach git as an ``http.extraHeader`` passed through ``GIT_CONFIG_*``
  environment variables: never in argv (visible to every process), never in a URL, never on
  disk; git's own error output is scrubbed of them and goes to the platform's log only (a
  tenant reads one of ``remotes.sentence``'s fixed sentences, never git's words);
- each fetch may write no file larger than ``max_fetch_bytes`` (RLIMIT_FSIZE, packs are never
  exploded into loose objects), every command is killed with its process group after
  ``timeout`` seconds, and the document is read only if it is at most ``max_document_bytes``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import resource
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from compiler.gitsync import remotes as R
from compiler.gitsync.addresses import NotAllowed
from compiler.gitsync.reach import Pinned, Reach
from compiler.gitsync.remotes import Credentials, GitFailed
from shared.errors import DependencyDown
from shared.logging import get_logger

log = get_logger(__name__)

_REF: Final = "refs/heads/wm-sync"
_REMOTE: Final = "origin"
_PACK_MARGIN: Final = 64 * 1024  # a one-blob pack's header and index beside the blob
_PATH: Final = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True, slots=True)
class Document:
    commit: str
    text: str
    blob: str  # the file's object id: equal ids, equal content


@dataclass(frozen=True, slots=True)
class _Result:
    code: int
    stdout: bytes
    stderr: str


class GitCli:
    def __init__(
        self,
        *,
        workdir: str | None,
        ca_bundle: str | None,
        timeout: float,
        max_fetch_bytes: int,
        max_document_bytes: int,
        reach: Reach,
        executable: str = "git",
    ) -> None:
        self._reach = reach
        self._workdir = workdir
        self._ca_bundle = ca_bundle
        self._timeout = timeout
        self._max_fetch = max_fetch_bytes
        self._max_document = max_document_bytes
        self._git = shutil.which(executable) or executable
        self._version_checked = False

    async def read(
        self, repository: str, branch: str, path: str, credentials: Credentials | None
    ) -> Document:
        """The file at ``path`` on ``branch``'s head, and that commit; ``GitFailed`` otherwise."""
        secrets = credentials.secrets() if credentials else ()
        deadline = time.monotonic() + self._timeout

        def failed(reason: str, commit: str | None = None, stderr: str = "") -> GitFailed:
            if stderr:  # git's own words are the platform's to read, never the tenant's
                log.warning(
                    "git_read_failed",
                    repository=repository,
                    reason=reason,
                    detail=R.detail(stderr, secrets),
                )
            message = R.sentence(
                reason,
                repository=repository,
                branch=branch,
                path=path,
                commit=commit,
                credentials=credentials is not None,
            )
            if reason == R.TOO_LARGE:
                message = (
                    f"{path!r} in {repository} is larger than {self._max_document} bytes"
                    if commit
                    else f"fetching branch {branch!r} of {repository} would bring more than "
                    f"{self._max_fetch} bytes"
                )
            return GitFailed(reason, message, commit=commit)

        try:
            async with asyncio.timeout(self._timeout):  # a resolver that never answers
                pinned = await self._reach.pin(repository)
        except (NotAllowed, TimeoutError):
            raise failed(R.UNREACHABLE) from None
        await self._check_version(deadline)
        with tempfile.TemporaryDirectory(prefix="wm-git-", dir=self._workdir) as home:
            env = self._environment(home, credentials, repository, pinned)

            async def git(
                *args: str, stdin: bytes | None = None, limit: int | None = None
            ) -> _Result:
                return await self._run(
                    [self._git, *args], env=env, stdin=stdin, deadline=deadline, fsize=limit
                )

            # First the commit and its trees, the one blob fetched when it is read. A server
            # that sends no object by its id (protocol v0 without allowAnySHA1InWant): again,
            # in a fresh repository, with every blob a document could be (below its limit).
            for attempt, blobs in enumerate(("blob:none", f"blob:limit={self._max_document + 1}")):
                repo = os.path.join(home, f"repo-{attempt}.git")
                init = await git("init", "--bare", "--quiet", repo)
                if init.code != 0:
                    raise failed(R.GIT_FAILED, stderr=init.stderr)
                fetched = await git(
                    "-C", repo, "fetch", "--depth=1", f"--filter={blobs}", "--no-tags", "--quiet",
                    "--no-write-fetch-head", _REMOTE, f"+refs/heads/{branch}:{_REF}",
                    limit=self._max_fetch,
                )  # fmt: skip
                if fetched.code != 0:
                    # index-pack, killed by SIGXFSZ, leaves its partial pack at the limit.
                    too_large = _largest_file(repo) >= self._max_fetch
                    reason = R.TOO_LARGE if too_large else R.classify(fetched.stderr)
                    raise failed(reason, stderr=fetched.stderr)
                head = await git(
                    "-C", repo, "rev-parse", "--verify", "--quiet", f"{_REF}^{{commit}}"
                )
                commit = head.stdout.decode().strip()
                if head.code != 0 or not commit:
                    raise failed(R.GIT_FAILED, stderr=head.stderr)
                listed = await git("-C", repo, "ls-tree", "-z", "--full-tree", commit, "--", path)
                entry = _entry(listed.stdout, path) if listed.code == 0 else None
                if entry is None:
                    raise failed(R.PATH_NOT_FOUND, commit)
                kind, oid = entry
                if kind != "blob":
                    raise failed(R.NOT_A_FILE, commit)
                # Its size, once this one blob is fetched: its pack may hold the document and
                # little more, so a document far above the limit is never brought whole.
                before = frozenset(_sizes(repo))
                limit = min(self._max_fetch, self._max_document + _PACK_MARGIN)
                found = await git(
                    "-C", repo, "cat-file", "--batch-check", stdin=f"{oid}\n".encode(), limit=limit
                )
                fields = found.stdout.decode(errors="replace").split()
                if found.code == 0 and len(fields) == 3 and fields[1] == "blob":
                    break
                if attempt or _largest_file(repo, besides=before) >= limit:
                    raise failed(R.TOO_LARGE, commit)  # the filter left out larger blobs only
                log.info("git_blob_fetch_refused", repository=repository)
                shutil.rmtree(repo, ignore_errors=True)
            if int(fields[2]) > self._max_document:
                raise failed(R.TOO_LARGE, commit)
            blob = await git("-C", repo, "cat-file", "blob", oid)
            if blob.code != 0:
                raise failed(R.GIT_FAILED, commit, blob.stderr)
        try:
            text = blob.stdout.decode("utf-8")
        except UnicodeDecodeError:
            raise GitFailed(
                R.REFUSED, f"{path!r} at commit {commit[:12]} is not UTF-8 text", commit=commit
            ) from None
        return Document(commit, text, oid)

    async def _check_version(self, deadline: float) -> None:
        """Once: a git too old to be pinned to the checked address reads nothing."""
        if self._version_checked:
            return
        found = await self._run(
            [self._git, "version"], env={"PATH": _PATH}, stdin=None, deadline=deadline, fsize=None
        )
        if found.code != 0 or not R.git_version_ok(found.stdout.decode(errors="replace")):
            log.error("git_too_old", version=found.stdout.decode(errors="replace").strip())
            raise DependencyDown(
                f"Git sync needs git {'.'.join(map(str, R.MIN_GIT))} or newer on the compiler",
                details={"reason": "git_version"},
            )
        self._version_checked = True

    def _environment(
        self, home: str, credentials: Credentials | None, repository: str, pinned: Pinned
    ) -> dict[str, str]:
        config = [
            # The remote a partial clone fetches a missing blob from when it is read.
            (f"remote.{_REMOTE}.url", repository),
            (f"remote.{_REMOTE}.promisor", "true"),
            (f"remote.{_REMOTE}.partialCloneFilter", "blob:none"),
            ("protocol.allow", "never"),
            ("protocol.https.allow", "always"),
            ("http.followRedirects", "false"),
            ("credential.helper", ""),
            ("fetch.unpackLimit", "1"),
            ("transfer.unpackLimit", "1"),
            ("gc.auto", "0"),
            ("maintenance.auto", "false"),
        ]
        resolve = pinned.curl_resolve()
        if resolve is not None:  # curl connects to the checked address, TLS checks the name
            config.append(("http.curloptResolve", resolve))
        if self._ca_bundle:
            config.append(("http.sslCAInfo", self._ca_bundle))
        if credentials is not None:
            pair = f"{credentials.username}:{credentials.password}".encode()
            header = f"Authorization: Basic {base64.b64encode(pair).decode()}"
            config.append(("http.extraHeader", header))
        env = {
            "PATH": _PATH,
            "HOME": home,
            "LANG": "C",
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_LITERAL_PATHSPECS": "1",  # the path is a path, never a pattern
            "GIT_CONFIG_COUNT": str(len(config)),
        }
        for index, (key, value) in enumerate(config):
            env[f"GIT_CONFIG_KEY_{index}"] = key
            env[f"GIT_CONFIG_VALUE_{index}"] = value
        return env

    async def _run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        stdin: bytes | None,
        deadline: float,
        fsize: int | None,
    ) -> _Result:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group: a timeout kills git's children too
            preexec_fn=_file_size_limit(fsize) if fsize is not None else None,
        )
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                stdout, stderr = await process.communicate(stdin)
        except TimeoutError:
            _kill(process.pid)
            await process.wait()
            return _Result(-1, b"", "fatal: timed out")
        except BaseException:
            _kill(process.pid)
            raise
        return _Result(process.returncode or 0, stdout, stderr.decode(errors="replace"))


def _entry(listing: bytes, path: str) -> tuple[str, str] | None:
    """The type and object id ``ls-tree -z`` lists for exactly ``path`` (None: no such entry)."""
    for record in listing.split(b"\0"):
        meta, tab, name = record.partition(b"\t")
        fields = meta.split()
        if tab and len(fields) == 3 and name.decode(errors="replace") == path:
            return fields[1].decode(), fields[2].decode()
    return None


def _sizes(directory: str) -> dict[str, int]:
    """Every file under ``directory`` and its size."""
    paths = (os.path.join(root, name) for root, _, names in os.walk(directory) for name in names)
    return {path: os.path.getsize(path) for path in paths}


def _largest_file(directory: str, *, besides: frozenset[str] = frozenset()) -> int:
    """The size of the largest file under ``directory`` other than ``besides``."""
    return max((size for path, size in _sizes(directory).items() if path not in besides), default=0)


def _file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:  # in the child, before exec: a pack larger than this cannot be written
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)

    return apply


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
