"""A tenant's Git remote against the platform's network, through the apiserver's routes onto the
compiler, with a real Git server (git http-backend over HTTPS) allowed by its host and port
exactly: every other spelling or port of it, and every address inside, is refused before a
byte is sent; git's own words never reach a tenant; the resolved address is the one connected
to (a name the tests' resolver answers once, and no DNS knows)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from structlog.testing import capture_logs

from compiler.gitsync import remotes as R
from compiler.gitsync.addresses import RemotePolicy
from compiler.gitsync.git_cli import GitCli
from compiler.gitsync.http_refs import RefLister
from compiler.gitsync.reach import Reach
from compiler.gitsync.remotes import Credentials, GitFailed
from sim.git_server import NAME, GitServer
from sim.ports import free_port
from tests.integration.compiler.git_stack import (
    PASSWORD,
    PATH,
    USER,
    allowed,
    git_body,
    reach,
    store_credentials,
    template,
)
from tests.integration.compiler.pipeline_stack import Stack, make_stack

RIGHT = Credentials(USER, PASSWORD)
LOOPBACK = [
    "127.1",
    "127.0.1",
    "0x7f000001",
    "0X7F.0.0.1",
    "2130706433",
    "017700000001",
    "0177.0.0.1",
    "127.0.0.2",
    "[::1]",
    "[0:0:0:0:0:0:0:1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "localhost",
    "localhost.",
    "LOCALHOST",
    "0.0.0.0",
    "0",
]


@pytest.fixture
async def other(tmp_path: Path) -> AsyncIterator[GitServer]:
    """A second Git server on another port of 127.0.0.1, never allowed."""
    root = tmp_path / "other"
    root.mkdir()
    server = await GitServer(root, {USER: PASSWORD}, public={"etl"}).start()
    server.create("etl", {PATH: template()})
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def closed_port() -> int:
    return free_port()


@pytest.fixture
async def stack(
    db: asyncpg.Pool,
    database_url: str,
    settings_factory: Any,
    git_server: GitServer,
    closed_port: int,
    tmp_path: Path,
) -> AsyncIterator[Stack]:
    """The tests' server allowed, and a port where nothing listens (an installation's Git
    server that is down)."""
    workdir = tmp_path / "git-work"
    workdir.mkdir()
    async for value in make_stack(
        db,
        database_url,
        settings_factory,
        GIT_CA_BUNDLE=str(git_server.ca_file),
        GIT_ALLOW_REMOTES=f"{allowed(git_server)},127.0.0.1:{closed_port}",
        GIT_WORKDIR=str(workdir),
        GIT_TIMEOUT=20.0,
    ):
        yield value


def body_for(url: str, *, name: str = "etl", secret: str | None = None) -> dict[str, Any]:
    definition: dict[str, Any] = {"type": "git", "repository": url, "path": PATH}
    if secret is not None:
        definition["credentials_secret"] = secret
    return {"name": name, "description": "from Git", "definition": definition}


async def test_every_other_spelling_port_or_inside_address_is_refused_before_a_byte_is_sent(
    stack: Stack, git_server: GitServer, other: GitServer
) -> None:
    git_server.public = {"etl"}
    git_server.create("etl", {PATH: template()})
    urls = [
        *(f"https://{host}:{git_server.port}/etl.git" for host in LOOPBACK),
        *(f"https://{host}:{other.port}/etl.git" for host in ["127.0.0.1", *LOOPBACK]),
        *(f"https://{host}/etl.git" for host in ["127.0.0.1", *LOOPBACK]),
        "https://169.254.169.254/latest/meta-data.git",
        "https://[fe80::1]/x.git",
        "https://10.0.0.1:6443/x.git",
        "https://192.168.1.1/x.git",
        "https://kubernetes.default.svc/api.git",
    ]
    with capture_logs() as logs:
        for url in urls:
            status, refused = await stack.call(
                "POST", "data-pipelines/validate", json=body_for(url)
            )
            assert status == 400, (url, refused)
            assert refused["details"]["git"] == {"reason": R.UNREACHABLE}, url
            assert refused["message"] == f"{url} could not be reached"
        for url in urls[:: max(len(urls) // 6, 1)]:
            status, refused = await stack.call("POST", "data-pipelines", json=body_for(url))
            assert (status, refused["details"]["git"]["reason"]) == (400, R.UNREACHABLE), url
    assert git_server.requests == []
    assert other.requests == []
    # Each was refused by the policy (not merely unanswered): the platform's log says why.
    refusals = [event for event in logs if event["event"] == "git_remote_refused"]
    assert len(refusals) >= len(urls)

    # The allowed server itself, by its exact host and port.
    url = f"https://127.0.0.1:{git_server.port}/etl.git"
    status, valid = await stack.call("POST", "data-pipelines/validate", json=body_for(url))
    assert (status, valid["valid"]) == (200, True), valid


async def test_git_connects_to_the_address_checked_and_resolves_nothing_itself(
    git_server: GitServer, tmp_path: Path
) -> None:
    """``NAME`` is in the server's certificate and in no DNS: the tests' resolver answers it
    once; a second lookup (by git, by curl) would find nothing, or somewhere else."""
    commit = git_server.create("a", {PATH: template()})
    url = f"https://{NAME}:{git_server.port}/a.git"
    answers: list[str] = []

    async def once(host: str, port: int) -> list[str]:
        answers.append(host)
        return ["127.0.0.1"] if len(answers) == 1 else ["10.9.8.7"]

    policy = RemotePolicy.of(allow=[f"{NAME}:{git_server.port}"])
    workdir = tmp_path / "work"
    workdir.mkdir()
    cli = GitCli(
        workdir=str(workdir),
        ca_bundle=str(git_server.ca_file),
        timeout=20.0,
        max_fetch_bytes=1024 * 1024,
        max_document_bytes=512 * 1024,
        reach=Reach(policy, lookup=once),
    )
    document = await cli.read(url, "main", PATH, RIGHT)
    assert (document.commit, answers) == (commit, [NAME])  # TLS checked the name it was given

    async def always(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    refs = RefLister(
        reach=Reach(policy, lookup=always), timeout=10, ca_bundle=str(git_server.ca_file)
    )
    assert await refs.head(url, "main", RIGHT) == commit

    # The same name, not allowed: what it resolves to decides, and one address inside is enough.
    git_server.requests.clear()
    for addresses in (["127.0.0.1"], ["140.82.112.3", "127.0.0.1"], ["::ffff:127.0.0.1"], []):

        async def answer(host: str, port: int, found: list[str] = addresses) -> list[str]:
            return found

        strict = Reach(RemotePolicy.of(allow=[allowed(git_server)]), lookup=answer)
        unchecked = GitCli(
            workdir=str(workdir),
            ca_bundle=str(git_server.ca_file),
            timeout=20.0,
            max_fetch_bytes=1024 * 1024,
            max_document_bytes=512 * 1024,
            reach=strict,
        )
        with pytest.raises(GitFailed) as refused:
            await unchecked.read(url, "main", PATH, RIGHT)
        assert refused.value.reason == R.UNREACHABLE
        lister = RefLister(reach=strict, timeout=10, ca_bundle=str(git_server.ca_file))
        with pytest.raises(GitFailed) as listed:
            await lister.head(url, "main", RIGHT)
        assert listed.value.reason == R.UNREACHABLE
    assert git_server.requests == []
    assert list(workdir.iterdir()) == []


async def test_the_change_check_refuses_the_same_spellings_before_a_byte_is_sent(
    git_server: GitServer,
) -> None:
    """The poller's own client (aiohttp): a pass over definitions saved before this policy."""
    commit = git_server.create("etl", {PATH: template()})
    refs = RefLister(reach=reach(git_server), timeout=10, ca_bundle=str(git_server.ca_file))
    async with refs.pooled():
        for host in LOOPBACK:
            with pytest.raises(GitFailed) as refused:
                await refs.head(f"https://{host}:{git_server.port}/etl.git", "main", RIGHT)
            assert refused.value.reason == R.UNREACHABLE, host
        assert git_server.requests == []
        assert await refs.head(git_server.repository_url("etl"), "main", RIGHT) == commit


FOREIGN = ("fatal", "error:", "curl", "rpc", "http 500", "10.1.2.3", "failed to connect", "port ")


def foreign_words(answer: Any) -> list[str]:
    text = json.dumps(answer).lower()
    return [word for word in FOREIGN if word in text]


async def test_gits_own_words_never_reach_a_tenant(
    stack: Stack, git_server: GitServer, closed_port: int
) -> None:
    await store_credentials(stack)
    git_server.create("etl", {PATH: template("1")})
    down = f"https://127.0.0.1:{closed_port}/etl.git"

    with capture_logs() as logs:
        # Validate and create: a server that is down (git says "Failed to connect ... port").
        for route in ("data-pipelines/validate", "data-pipelines"):
            status, refused = await stack.call("POST", route, json=body_for(down))
            assert (status, refused["message"]) == (400, f"{down} could not be reached"), route
            assert refused["details"]["git"] == {"reason": R.UNREACHABLE}
            assert foreign_words(refused) == []

        # Update and sync: a server whose upload-pack breaks (git quotes its answer).
        status, saved = await stack.call("POST", "data-pipelines", json=git_body(git_server, "etl"))
        assert status == 201, saved
        pipeline = saved["id"]
        git_server.refuse_fetches = True
        git_server.commit("etl", {PATH: template("2")})
        status, refused = await stack.call(
            "PUT", f"data-pipelines/{pipeline}", json=git_body(git_server, "etl")
        )
        assert status == 400, refused
        assert refused["details"]["git"]["reason"] == R.GIT_FAILED
        assert foreign_words(refused) == []
        status, synced = await stack.call("POST", f"data-pipelines/{pipeline}/sync")
        assert (status, synced["outcome"]) == (200, "failed"), synced
        assert synced["error"]["message"] == (
            f"Git could not read {PATH!r} from {git_server.repository_url('etl')} (branch 'main')"
        )
        assert foreign_words(synced) == []
        await stack.compiler.git.run_pass()
        status, detail = await stack.call("GET", f"data-pipelines/{pipeline}")
        assert detail["git"]["last_error"]["message"] == synced["error"]["message"]
        assert foreign_words(detail["git"]) == []
    rows = await stack.pool.fetch(
        "SELECT detail FROM run_actions WHERE name = $1", f"pipeline/{pipeline}"
    )
    assert rows
    assert all(foreign_words(row["detail"]) == [] for row in rows)
    # The platform keeps git's words, scrubbed, in its own log.
    details = [event["detail"] for event in logs if event["event"] == "git_read_failed"]
    assert any("failed to connect" in detail.lower() for detail in details), details
    assert any("packfile" in detail for detail in details), details
    assert all(PASSWORD not in detail for detail in details)
