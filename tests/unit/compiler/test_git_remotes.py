"""gitsync.remotes and gitsync.planning: credentials, failures, scrubbing, and when a check
stops at the head, without I/O."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compiler.gitsync import planning
from compiler.gitsync import remotes as R
from compiler.gitsync.remotes import Credentials, GitFailed

URL = "https://git.example/acme/etl.git"


def test_credentials_take_a_password_or_a_token_and_default_the_user() -> None:
    assert R.credentials_from({"username": "bot", "password": "pw"}, "s") == Credentials(
        "bot", "pw"
    )
    assert R.credentials_from({"token": "ghp_x"}, "s") == Credentials("git", "ghp_x")
    with pytest.raises(GitFailed) as missing:
        R.credentials_from({"username": "bot"}, "creds")
    assert missing.value.reason == R.CREDENTIALS
    assert "'creds'" in missing.value.message
    assert missing.value.status == 400
    assert "pw" not in repr(Credentials("bot", "pw"))


def test_scrub_removes_userinfo_and_every_form_of_the_credentials() -> None:
    credentials = Credentials("bot", "hunter2-long")
    header = base64.b64encode(b"bot:hunter2-long").decode()
    text = (
        f"fatal: unable to access 'https://bot:hunter2-long@git.example/x.git/': "
        f"Authorization: Basic {header} hunter2-long"
    )
    scrubbed = R.scrub(text, credentials.secrets())
    assert "hunter2-long" not in scrubbed
    assert header not in scrubbed
    assert "bot:" not in scrubbed
    assert "https://git.example/x.git/" in scrubbed


@given(st.text(min_size=4, max_size=40).filter(lambda s: s.strip() == s and ":" not in s))
def test_scrubbed_git_output_never_holds_the_password(password: str) -> None:
    credentials = Credentials("user", password)
    stderr = f"error: {password}\nfatal: https://user:{password}@host/r.git/ {password}{password}"
    assert password not in R.detail(stderr, credentials.secrets())


@pytest.mark.parametrize(
    ("stderr", "reason"),
    [
        ("fatal: Authentication failed for 'https://h/r.git/'", R.AUTH),
        ("fatal: could not read Username for 'https://h': terminal prompts disabled", R.AUTH),
        ("fatal: repository 'https://h/r.git/' not found", R.REPOSITORY_NOT_FOUND),
        ("fatal: couldn't find remote ref refs/heads/dev", R.BRANCH_NOT_FOUND),
        ("fatal: unable to access 'https://h/': Could not resolve host: h", R.UNREACHABLE),
        (
            "fatal: unable to access 'https://h/': server certificate verification failed",
            R.UNREACHABLE,
        ),
        ("fatal: timed out", R.UNREACHABLE),
        ("fatal: something else", R.GIT_FAILED),
    ],
)
def test_git_errors_are_classified(stderr: str, reason: str) -> None:
    assert R.classify(stderr) == reason


def test_sentences_name_what_failed_and_what_to_check() -> None:
    def say(reason: str, **extra: object) -> str:
        args: dict[str, object] = {
            "repository": URL,
            "branch": "main",
            "path": "p.yaml",
            "commit": "a" * 40,
            **extra,
        }
        return R.sentence(reason, **args)  # type: ignore[arg-type]

    assert "has no branch 'main'" in say(R.BRANCH_NOT_FOUND)
    assert "'p.yaml'" in say(R.PATH_NOT_FOUND)
    assert "aaaaaaaaaaaa" in say(R.PATH_NOT_FOUND)
    assert "refused the credentials" in say(R.AUTH)
    assert "credentials_secret" in say(R.AUTH, credentials=False)
    failed = GitFailed(R.PATH_NOT_FOUND, "x", commit="c")
    assert failed.details == {"git": {"reason": R.PATH_NOT_FOUND, "commit": "c"}}


GOOD, SEEN, NEW = "g" * 40, "s" * 40, "n" * 40


@pytest.mark.parametrize(
    ("head", "seen", "error", "error_commit", "manual", "stops"),
    [
        (GOOD, GOOD, None, None, False, True),  # nothing new
        (GOOD, SEEN, "refused", SEEN, True, True),  # the branch went back to the good commit
        (NEW, GOOD, None, None, False, False),  # a new commit
        (SEEN, SEEN, "refused", SEEN, False, True),  # a refused commit is not fetched again
        (SEEN, SEEN, "refused", SEEN, True, False),  # unless someone asks
        (SEEN, SEEN, "auth failed", None, False, False),  # an error about no commit: re-judge
        (NEW, GOOD, "unreachable", None, False, False),
    ],
)
def test_a_check_stops_at_the_head_only_when_it_is_nothing_new(
    head: str, seen: str, error: str | None, error_commit: str | None, manual: bool, stops: bool
) -> None:
    assert (
        planning.unchanged(
            head, good=GOOD, seen=seen, error=error, error_commit=error_commit, manual=manual
        )
        is stops
    )


def test_a_failure_about_the_document_is_about_the_head_it_was_read_at() -> None:
    assert planning.failed_at(R.TOO_LARGE, None, NEW) == NEW
    assert planning.failed_at(R.PATH_NOT_FOUND, SEEN, NEW) == SEEN
    assert planning.failed_at(R.AUTH, None, NEW) is None
    assert planning.failed_at(R.UNREACHABLE, None, None) is None


@pytest.mark.parametrize(
    ("output", "ok"),
    [
        ("git version 2.39.5\n", True),
        ("git version 2.37.0", True),
        ("git version 3.0.1", True),
        ("git version 2.36.6", False),
        ("git version 2.9.5", False),
        ("git version 1.99.0", False),
        ("", False),
        ("hub version 2.14", False),
    ],
)
def test_git_must_be_new_enough_to_be_pinned(output: str, ok: bool) -> None:
    assert R.git_version_ok(output) is ok
