"""Reading one file at a branch's head with the ``git`` command (the compiler's image has it).

Only when the change check found a new commit: a bare repository in a fresh directory under
``workdir`` (a tmpfs in the chart: the root filesystem is read-only), one shallow fetch of the
branch (depth 1, no tags), then the blob at ``path`` is looked up and read, size first. The
directory is removed afterwards, whatever happened.

What keeps it safe:

- ``git`` runs with an environment built here, nothing inherited: no user or system
  configuration, no credential helper, no prompt, only the ``https`` protocol, no redirects;
- the credentials reach git as an ``http.extraHeader`` passed through ``GIT_CONFIG_*``
  environment variables: never in argv (visible to every process), never in a URL, never on
  disk; git's own error output is scrubbed of them before any of it is kept;
- the fetch may write no file larger than ``max_fetch_bytes`` (RLIMIT_FSIZE, packs are never
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
from compiler.gitsync.remotes import Credentials, GitFailed

_REF: Final = "refs/heads/wm-sync"
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
        executable: str = "git",
    ) -> None:
        self._workdir = workdir
        self._ca_bundle = ca_bundle
        self._timeout = timeout
        self._max_fetch = max_fetch_bytes
        self._max_document = max_document_bytes
        self._git = shutil.which(executable) or executable

    async def read(
        self, repository: str, branch: str, path: str, credentials: Credentials | None
    ) -> Document:
        """The file at ``path`` on ``branch``'s head, and that commit; ``GitFailed`` otherwise."""
        secrets = credentials.secrets() if credentials else ()
        deadline = time.monotonic() + self._timeout

        def failed(reason: str, commit: str | None = None, stderr: str = "") -> GitFailed:
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
            elif stderr and reason in (R.UNREACHABLE, R.GIT_FAILED):
                message += f" ({R.detail(stderr, secrets)})"
            return GitFailed(reason, message, commit=commit)

        with tempfile.TemporaryDirectory(prefix="wm-git-", dir=self._workdir) as home:
            env = self._environment(home, credentials)
            repo = os.path.join(home, "repo.git")

            async def git(
                *args: str, stdin: bytes | None = None, limit: int | None = None
            ) -> _Result:
                return await self._run(
                    [self._git, *args], env=env, stdin=stdin, deadline=deadline, fsize=limit
                )

            init = await git("init", "--bare", "--quiet", repo)
            if init.code != 0:
                raise failed(R.GIT_FAILED, stderr=init.stderr)
            fetched = await git(
                "-C", repo, "fetch", "--depth=1", "--no-tags", "--quiet", "--no-write-fetch-head",
                repository, f"+refs/heads/{branch}:{_REF}",
                limit=self._max_fetch,
            )  # fmt: skip
            if fetched.code != 0:
                # index-pack, killed by SIGXFSZ, leaves its partial pack at exactly the limit.
                too_large = _largest_file(repo) >= self._max_fetch
                reason = R.TOO_LARGE if too_large else R.classify(fetched.stderr)
                raise failed(reason, stderr=fetched.stderr)
            head = await git("-C", repo, "rev-parse", "--verify", "--quiet", f"{_REF}^{{commit}}")
            commit = head.stdout.decode().strip()
            if head.code != 0 or not commit:
                raise failed(R.GIT_FAILED, stderr=head.stderr)
            found = await git(
                "-C", repo, "cat-file", "--batch-check", stdin=f"{commit}:{path}\n".encode()
            )
            fields = found.stdout.decode(errors="replace").split()
            if found.code != 0 or len(fields) != 3:
                raise failed(R.PATH_NOT_FOUND, commit)
            oid, kind, size = fields
            if kind != "blob":
                raise failed(R.NOT_A_FILE, commit)
            if int(size) > self._max_document:
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

    def _environment(self, home: str, credentials: Credentials | None) -> dict[str, str]:
        config = [
            ("protocol.allow", "never"),
            ("protocol.https.allow", "always"),
            ("http.followRedirects", "false"),
            ("credential.helper", ""),
            ("fetch.unpackLimit", "1"),
            ("transfer.unpackLimit", "1"),
            ("gc.auto", "0"),
            ("maintenance.auto", "false"),
        ]
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


def _largest_file(directory: str) -> int:
    sizes = (
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(directory)
        for name in names
    )
    return max(sizes, default=0)


def _file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:  # in the child, before exec: a pack larger than this cannot be written
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)

    return apply


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
