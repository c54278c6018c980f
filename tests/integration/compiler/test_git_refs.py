"""gitsync.http_refs: the change check against a real Git server (git http-backend over HTTPS
with basic auth), told apart by what the server was asked."""

from __future__ import annotations

import pytest

from compiler.gitsync import remotes as R
from compiler.gitsync.http_refs import RefLister
from compiler.gitsync.remotes import Credentials, GitFailed
from sim.git_server import GitServer
from tests.integration.compiler.git_stack import PASSWORD, USER

RIGHT = Credentials(USER, PASSWORD)


def lister(server: GitServer) -> RefLister:
    return RefLister(timeout=10, ca_bundle=str(server.ca_file))


async def test_a_pass_asks_ls_refs_at_once_of_a_host_it_knows_speaks_v2(
    git_server: GitServer,
) -> None:
    first = git_server.create("a", {"x": "1"})
    second = git_server.create("b", {"x": "2"}, branch="trunk")
    refs = lister(git_server)
    async with refs.pooled():
        assert await refs.head(git_server.repository_url("a"), "main", RIGHT) == first
        assert await refs.head(git_server.repository_url("b"), "trunk", RIGHT) == second
        with pytest.raises(GitFailed) as refused:
            await refs.head(git_server.repository_url("b"), "trunk", Credentials(USER, "nope"))
        assert refused.value.reason == R.AUTH
        with pytest.raises(GitFailed) as missing:
            await refs.head(git_server.repository_url("b"), "main", RIGHT)
        assert missing.value.reason == R.BRANCH_NOT_FOUND
    assert [r.command for r in git_server.requests] == ["advertise", *["ls-refs"] * 4]
    assert [r.status for r in git_server.requests] == [200, 200, 200, 401, 200]

    # Outside a pass, every check discovers again.
    git_server.requests.clear()
    assert await refs.head(git_server.repository_url("a"), "main", RIGHT) == first
    assert [r.command for r in git_server.requests] == ["advertise", "ls-refs"]


async def test_a_v0_server_lists_every_ref_in_one_answer(git_server: GitServer) -> None:
    git_server.protocol_v2 = False
    first = git_server.create("a", {"x": "1"})
    git_server.commit("a", {"x": "2"}, branch="dev")
    refs = lister(git_server)
    async with refs.pooled():
        assert await refs.head(git_server.repository_url("a"), "main", RIGHT) == first
        assert await refs.head(git_server.repository_url("a"), "main", RIGHT) == first
    assert [r.command for r in git_server.requests] == ["advertise", "advertise"]


async def test_what_is_not_a_git_server_is_a_protocol_or_reach_error(
    git_server: GitServer,
) -> None:
    refs = RefLister(timeout=10)  # the system's CAs: the test CA is not among them
    with pytest.raises(GitFailed) as untrusted:
        await refs.head(git_server.repository_url("a"), "main", RIGHT)
    assert untrusted.value.reason == R.UNREACHABLE
    with pytest.raises(GitFailed) as missing:
        await lister(git_server).head(git_server.repository_url("nope"), "main", RIGHT)
    assert missing.value.reason == R.REPOSITORY_NOT_FOUND
    with pytest.raises(GitFailed) as dumb:
        await lister(git_server).head(f"{git_server.url}/not-a-repository", "main", RIGHT)
    assert dumb.value.reason in (R.REPOSITORY_NOT_FOUND, R.PROTOCOL)
