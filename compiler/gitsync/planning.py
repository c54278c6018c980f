"""What a Git sync does with what it found. Purely computational.

A check lists the branch's head (cheap) and fetches only when that commit is news:

- the head is ``last_good_commit``: nothing to do, and nothing is wrong any more;
- the head is ``last_seen_commit`` and the stored error is about that commit (its document was
  refused, missing, too large) or there is none: the poller leaves it alone until a new commit;
  a sync asked for by a person (``manual``) judges it again, since what made it fail may have
  been fixed elsewhere (a data secret created, a limit raised);
- anything else is fetched. An error that named no commit (bad credentials, an unreachable host)
  never stops the next check.
"""

from __future__ import annotations

from typing import Final

from compiler.gitsync import remotes as R

# Failures that are about the document at a commit, not about reaching it: they hold until the
# branch moves, so the commit is marked seen.
ABOUT_THE_DOCUMENT: Final = frozenset({R.PATH_NOT_FOUND, R.NOT_A_FILE, R.TOO_LARGE, R.REFUSED})


def unchanged(
    head: str,
    *,
    good: str | None,
    seen: str | None,
    error: str | None,
    error_commit: str | None,
    manual: bool,
) -> bool:
    """Whether a check that found ``head`` stops there (no fetch, no version)."""
    if head == good:
        return True
    if manual:
        return False
    return head == seen and (error is None or error_commit == seen)


def failed_at(reason: str, commit: str | None, head: str | None) -> str | None:
    """The commit a failure is about: its own, or the head when the failure is the
    document's (a fetch too large to finish names no commit, yet the head's tree is the cause)."""
    if commit is not None:
        return commit
    return head if reason in ABOUT_THE_DOCUMENT else None
