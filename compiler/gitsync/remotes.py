"""What a Git sync may do and say: credentials, failures and their sentences, scrubbing.
Purely computational.

A failure is ``GitFailed`` (a 400 when a save or a sync is asked for, a stored error when the
poller finds it) with a ``reason`` a program can act on and a sentence a tenant can: which
repository, branch, path or commit, never a credential. Whatever text comes from elsewhere (git's
own error output, a server's) goes through ``scrub`` first, which removes URL userinfo and every
credential value it was given, in plain and in the base64 form of a Basic authorisation.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from shared.errors import Invalid

# What a stored error's reason may be (docs/pipeline-spec.md, "Git").
CREDENTIALS: Final = "credentials"  # the data secret is missing or has no password
AUTH: Final = "auth"  # the server refused the credentials (401/403)
REPOSITORY_NOT_FOUND: Final = "repository_not_found"
UNREACHABLE: Final = "unreachable"  # DNS, connection, TLS, timeout
BRANCH_NOT_FOUND: Final = "branch_not_found"
PATH_NOT_FOUND: Final = "path_not_found"
NOT_A_FILE: Final = "not_a_file"
TOO_LARGE: Final = "too_large"  # the document, or what a fetch brought
REFUSED: Final = "refused"  # the document is no pipeline we accept (400/422 of a save)
PROTOCOL: Final = "protocol"  # the server does not speak Git's smart HTTP as it should
UNAVAILABLE: Final = "unavailable"  # our own dependencies (Kubernetes, PostgreSQL)
GIT_FAILED: Final = "git_failed"

USERNAME_KEYS: Final = ("username",)
PASSWORD_KEYS: Final = ("password", "token")
DEFAULT_USERNAME: Final = "git"  # hosts that take a token with any user name (GitHub, GitLab)
_USERINFO: Final = re.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^/@\s]*@")
_DETAIL_CHARS: Final = 300
# The oldest git that pins its connection to an address (http.curloptResolve).
MIN_GIT: Final = (2, 37)
_GIT_VERSION: Final = re.compile(r"^git version (\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class Credentials:
    """Basic authentication for one repository; ``repr`` never shows the password."""

    username: str
    password: str = field(repr=False)

    def secrets(self) -> tuple[str, ...]:
        """Every form in which these credentials could leak into a text."""
        pair = f"{self.username}:{self.password}".encode()
        return (self.password, base64.b64encode(pair).decode())


class GitFailed(Invalid):
    """A repository, branch, path or document that could not be used (400)."""

    def __init__(self, reason: str, message: str, *, commit: str | None = None) -> None:
        details: dict[str, object] = {"git": {"reason": reason}}
        if commit is not None:
            details["git"] = {"reason": reason, "commit": commit}
        super().__init__(message, details=details)
        self.reason = reason
        self.commit = commit


def credentials_from(values: Mapping[str, str], secret: str) -> Credentials:
    """The credentials a data secret holds: ``username`` (default ``git``) and ``password`` (or
    ``token``)."""
    password = next((values[key] for key in PASSWORD_KEYS if values.get(key)), None)
    if password is None:
        raise GitFailed(
            CREDENTIALS,
            f"data secret {secret!r} has no 'password' or 'token' key for Git",
        )
    username = next((values[key] for key in USERNAME_KEYS if values.get(key)), DEFAULT_USERNAME)
    return Credentials(username, password)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without URL userinfo or any of ``secrets``."""
    text = _USERINFO.sub(r"\1", text)
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def detail(stderr: str, secrets: Iterable[str] = ()) -> str:
    """The last meaningful line of git's error output, scrubbed and shortened."""
    lines = [line.strip() for line in scrub(stderr, secrets).splitlines() if line.strip()]
    chosen = next(
        (line for line in reversed(lines) if line.startswith(("fatal:", "error:"))),
        lines[-1] if lines else "",
    )
    return chosen[:_DETAIL_CHARS]


_STDERR_RULES: Final = (
    (AUTH, ("authentication failed", "could not read username", "could not read password",
            "http 401", "http 403", "returned error: 401", "returned error: 403")),
    (BRANCH_NOT_FOUND, ("couldn't find remote ref",)),
    (REPOSITORY_NOT_FOUND, ("repository not found", "not found", "returned error: 404")),
    (UNREACHABLE, ("could not resolve host", "failed to connect", "connection refused",
                   "timed out", "unable to access", "ssl", "certificate", "couldn't connect",
                   "operation too slow", "connection reset")),
)  # fmt: skip


def classify(stderr: str) -> str:
    """The reason behind a failed ``git`` command, from its error output."""
    text = stderr.lower()
    for reason, needles in _STDERR_RULES:
        if any(needle in text for needle in needles):
            return reason
    return GIT_FAILED


def sentence(
    reason: str,
    *,
    repository: str,
    branch: str,
    path: str,
    commit: str | None,
    credentials: bool = True,
) -> str:
    """What a tenant reads for ``reason``: what failed, about what, and what to check."""
    at = f" at commit {commit[:12]}" if commit else ""
    if reason == AUTH and not credentials:
        return f"{repository} asks for credentials: name a data secret in credentials_secret"
    return {
        AUTH: f"{repository} refused the credentials: check the data secret's username and "
        "password (or token) and their access to the repository",
        REPOSITORY_NOT_FOUND: f"{repository} is not a Git repository this server serves",
        UNREACHABLE: f"{repository} could not be reached",
        BRANCH_NOT_FOUND: f"{repository} has no branch {branch!r}",
        PATH_NOT_FOUND: f"{repository} has no file {path!r} on branch {branch!r}{at}",
        NOT_A_FILE: f"{path!r} in {repository}{at} is not a file",
        PROTOCOL: f"{repository} did not answer as a Git smart-HTTP server",
    }.get(reason, f"Git could not read {path!r} from {repository} (branch {branch!r}){at}")


def git_version_ok(output: str) -> bool:
    """Whether ``git version``'s output names a git at least ``MIN_GIT`` (an older one ignores
    ``http.curloptResolve`` without a word, and would resolve the host again itself)."""
    match = _GIT_VERSION.match(output.strip())
    return match is not None and (int(match.group(1)), int(match.group(2))) >= MIN_GIT
