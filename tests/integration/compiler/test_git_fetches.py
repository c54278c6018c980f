"""Fetching a Git-defined pipeline's document, through the apiserver's routes and the compiler's
poller against a real Git server (git http-backend over HTTPS): saves and the poller share one
fetch limit (GIT_FETCH_CONCURRENCY), and a repository far larger than GIT_FETCH_MAX_BYTES still
syncs its one document."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY

from sim.git_server import GitServer
from tests.integration.compiler.git_stack import (
    PATH,
    allowed,
    git_body,
    store_credentials,
    template,
)
from tests.integration.compiler.pipeline_stack import Stack, make_stack

MIB = 1024 * 1024


@pytest.fixture
async def stack(
    db: asyncpg.Pool,
    database_url: str,
    settings_factory: Any,
    git_server: GitServer,
    tmp_path: Path,
) -> AsyncIterator[Stack]:
    """One fetch at a time, of at most 1 MiB each."""
    workdir = tmp_path / "git-work"
    workdir.mkdir()
    async for value in make_stack(
        db,
        database_url,
        settings_factory,
        GIT_CA_BUNDLE=str(git_server.ca_file),
        GIT_ALLOW_REMOTES=allowed(git_server),
        GIT_WORKDIR=str(workdir),
        GIT_TIMEOUT=20.0,
        GIT_FETCH_CONCURRENCY=1,
        GIT_FETCH_MAX_BYTES=MIB,
    ):
        yield value


async def until(condition: Callable[[], bool], *, within: float = 20.0) -> None:
    """Wait for a state (polled), never for a time; fail after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(0.01)


def waiting() -> float:
    return REGISTRY.get_sample_value("wm_git_fetches_waiting") or 0.0


async def test_a_save_waits_for_the_pollers_fetch_under_one_shared_limit(
    stack: Stack, git_server: GitServer
) -> None:
    await store_credentials(stack)
    git_server.create("polled", {PATH: template("1")})
    git_server.create("saved", {PATH: template("1")})
    status, saved = await stack.call("POST", "data-pipelines", json=git_body(git_server, "polled"))
    assert status == 201, saved
    git_server.commit("polled", {PATH: template("2")})

    # The poller's fetch is held at the server; a save's fetch comes meanwhile.
    git_server.hold = asyncio.Event()
    git_server.most_fetching = 0
    polling = asyncio.create_task(stack.compiler.git.run_pass())
    await until(lambda: git_server.fetching == 1)
    saving = asyncio.create_task(
        stack.call("POST", "data-pipelines", json=git_body(git_server, "saved"))
    )
    await until(lambda: waiting() == 1 or git_server.fetching > 1)
    assert (git_server.fetching, waiting()) == (1, 1)

    git_server.hold.set()
    result = await polling
    status, created = await saving
    assert (result.updated, status) == (1, 201), created
    assert git_server.most_fetching == 1
    assert waiting() == 0


async def test_a_repository_whose_other_files_exceed_the_limit_still_syncs_its_document(
    stack: Stack, git_server: GitServer
) -> None:
    """4 MiB of incompressible files beside the document, against a 1 MiB fetch limit."""
    await store_credentials(stack)
    large = {f"data/part-{index}.bin": os.urandom(MIB) for index in range(4)}
    first = git_server.create("large", {**large, PATH: template("1")})
    status, saved = await stack.call("POST", "data-pipelines", json=git_body(git_server, "large"))
    assert status == 201, saved
    assert saved["commit"] == first

    git_server.commit("large", {"data/part-4.bin": os.urandom(MIB)})
    second = git_server.commit("large", {PATH: template("2")})
    result = await stack.compiler.git.run_pass()
    assert (result.updated, result.failed) == (1, 0)
    status, detail = await stack.call("GET", f"data-pipelines/{saved['id']}")
    assert (detail["current_version"], detail["current"]["commit"]) == (2, second)
    assert detail["git"]["last_error"] is None

    # The document itself over the limit stays a too_large sync error about that commit.
    third = git_server.commit("large", {PATH: os.urandom(2 * MIB)})
    result = await stack.compiler.git.run_pass()
    assert result.failed == 1
    status, detail = await stack.call("GET", f"data-pipelines/{saved['id']}")
    assert (detail["git"]["last_error"]["reason"], detail["current_version"]) == ("too_large", 2)
    assert detail["git"]["last_error"]["commit"] == third
