"""gitsync.http_refs and gitsync.git_cli against a real Git server (git http-backend over HTTPS
with basic auth): the change check, told apart by what the server was asked, and the read of a
document with git, by what git was started with."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from compiler.gitsync import remotes as R
from compiler.gitsync.git_cli import GitCli
from compiler.gitsync.http_refs import RefLister
from compiler.gitsync.remotes import Credentials, GitFailed
from shared.errors import DependencyDown
from sim.git_server import GitServer
from tests.integration.compiler.git_stack import PASSWORD, USER, reach

RIGHT = Credentials(USER, PASSWORD)


def lister(server: GitServer) -> RefLister:
    return RefLister(reach=reach(server), timeout=10, ca_bundle=str(server.ca_file))


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
    refs = RefLister(
        reach=reach(git_server), timeout=10
    )  # the system's CAs: the test CA is not among them
    with pytest.raises(GitFailed) as untrusted:
        await refs.head(git_server.repository_url("a"), "main", RIGHT)
    assert untrusted.value.reason == R.UNREACHABLE
    with pytest.raises(GitFailed) as missing:
        await lister(git_server).head(git_server.repository_url("nope"), "main", RIGHT)
    assert missing.value.reason == R.REPOSITORY_NOT_FOUND
    with pytest.raises(GitFailed) as dumb:
        await lister(git_server).head(f"{git_server.url}/not-a-repository", "main", RIGHT)
    assert dumb.value.reason in (R.REPOSITORY_NOT_FOUND, R.PROTOCOL)


def cli(server: GitServer, workdir: Path, **options: Any) -> GitCli:
    values: dict[str, Any] = {
        "workdir": str(workdir),
        "ca_bundle": str(server.ca_file),
        "timeout": 20.0,
        "max_fetch_bytes": 1024 * 1024,
        "max_document_bytes": 512 * 1024,
        "reach": reach(server),
        **options,
    }
    return GitCli(**values)


async def test_git_gets_the_credentials_in_its_environment_only_and_leaves_nothing_behind(
    git_server: GitServer, tmp_path: Path
) -> None:
    """A stand-in ``git`` records every argument list and environment it is started with, then
    runs the real one."""
    commit = git_server.create("a", {"p/etl.yaml": "kind: WorkflowTemplate\n"})
    seen = tmp_path / "seen.jsonl"
    recorder = tmp_path / "git"
    recorder.write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        f"open({str(seen)!r}, 'a').write(json.dumps([sys.argv, dict(os.environ)]) + '\\n')\n"
        f"os.execv({shutil.which('git')!r}, ['git', *sys.argv[1:]])\n"
    )
    recorder.chmod(0o755)
    workdir = tmp_path / "work"
    workdir.mkdir()
    git = cli(git_server, workdir, executable=str(recorder))
    document = await git.read(git_server.repository_url("a"), "main", "p/etl.yaml", RIGHT)
    assert (document.commit, document.text) == (commit, "kind: WorkflowTemplate\n")
    runs = [json.loads(line) for line in seen.read_text().splitlines()]
    assert len(runs) >= 4  # init, fetch, rev-parse, cat-file (twice)
    header = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    for argv, environment in runs:
        assert all(PASSWORD not in arg and header not in arg for arg in argv)
        assert "GIT_SSL_CAINFO" not in environment  # nothing inherited from ours
    fetch_environment = next(env for argv, env in runs if "fetch" in argv)
    assert f"Authorization: Basic {header}" in fetch_environment.values()
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("v2", [True, False])
async def test_a_repository_far_larger_than_the_limit_still_yields_its_one_document(
    git_server: GitServer, tmp_path: Path, v2: bool
) -> None:
    """Its other files (8 MiB, incompressible) exceed the 1 MiB fetch limit eight times over:
    only the commit, its trees and the one blob are fetched (protocol v2, or v0 from a server
    that lets a client ask for an object by its id)."""
    git_server.protocol_v2 = v2
    files: dict[str, str | bytes] = {
        f"data/blob-{index}.bin": os.urandom(1024 * 1024) for index in range(8)
    }
    commit = git_server.create("big", {**files, "etl.yaml": "x: 1\n", "dir/a.yaml": "a: 1\n"})
    workdir = tmp_path / "work"
    workdir.mkdir()
    git = cli(git_server, workdir)
    document = await git.read(git_server.repository_url("big"), "main", "etl.yaml", RIGHT)
    assert (document.commit, document.text) == (commit, "x: 1\n")
    if v2:  # the branch once (v0 negotiates over several requests, and asks again)
        assert len(git_server.fetches("big")) == 1
    assert list(workdir.iterdir()) == []

    # What is not one file at that path is still told apart.
    for path, reason in (
        ("etl.yaml/x", R.PATH_NOT_FOUND),
        ("dir", R.NOT_A_FILE),
        ("dir/a.yam*", R.PATH_NOT_FOUND),  # a path, never a pattern
        ("data/blob-0.bin", R.TOO_LARGE),  # the document itself is over its own limit
    ):
        with pytest.raises(GitFailed) as refused:
            await git.read(git_server.repository_url("big"), "main", path, RIGHT)
        assert (refused.value.reason, refused.value.commit) == (reason, commit), path
    assert list(workdir.iterdir()) == []


async def test_a_server_that_ignores_the_filter_is_stopped_at_the_limit_and_too_large(
    git_server: GitServer, tmp_path: Path
) -> None:
    git_server.filters = False
    git_server.create("big", {"etl.yaml": "x: 1\n", "blob.bin": os.urandom(2 * 1024 * 1024)})
    workdir = tmp_path / "work"
    workdir.mkdir()
    with pytest.raises(GitFailed) as refused:
        await cli(git_server, workdir).read(
            git_server.repository_url("big"), "main", "etl.yaml", RIGHT
        )
    assert refused.value.reason == R.TOO_LARGE
    assert "1048576 bytes" in refused.value.message
    assert list(workdir.iterdir()) == []
    wider = cli(git_server, workdir, max_fetch_bytes=8 * 1024 * 1024)
    document = await wider.read(git_server.repository_url("big"), "main", "etl.yaml", RIGHT)
    assert document.text == "x: 1\n"


async def test_a_git_too_old_to_be_pinned_reads_nothing(
    git_server: GitServer, tmp_path: Path
) -> None:
    """git before 2.37 ignores http.curloptResolve without a word and would resolve again."""
    git_server.create("a", {"etl.yaml": "x: 1\n"})
    old = tmp_path / "git"
    old.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = version ]; then echo "git version 2.30.2"; exit 0; fi\n'
        f'exec {shutil.which("git")} "$@"\n'
    )
    old.chmod(0o755)
    workdir = tmp_path / "work"
    workdir.mkdir()
    with pytest.raises(DependencyDown) as down:
        await cli(git_server, workdir, executable=str(old)).read(
            git_server.repository_url("a"), "main", "etl.yaml", RIGHT
        )
    assert "2.37" in down.value.message
    assert git_server.requests == []
