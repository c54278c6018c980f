"""Git-defined pipelines end to end: a real Git server over HTTPS with basic auth
(``git http-backend``), the apiserver's routes, the compiler with its save path and its poller,
a sim host with the data controller. What the server was asked (its request log) proves what
the poller did and did not fetch."""

from __future__ import annotations

import json
from typing import Any

from structlog.testing import capture_logs

from sim.git_server import GitServer
from tests.integration.compiler.git_stack import (
    PASSWORD,
    PATH,
    git_body,
    store_credentials,
    template,
)
from tests.integration.compiler.pipeline_stack import ESCAPING_YAML, Stack, headers


async def audit_rows(stack: Stack, pipeline_id: str) -> list[dict[str, Any]]:
    rows = await stack.pool.fetch(
        "SELECT actor, action, outcome, detail FROM run_actions WHERE name = $1 ORDER BY id",
        f"pipeline/{pipeline_id}",
    )
    return [dict(row) for row in rows]


async def test_a_git_pipeline_is_read_at_create_and_each_new_commit_becomes_a_version(
    git_stack: Stack, git_server: GitServer
) -> None:
    first = git_server.create("etl", {PATH: template("10"), "README.md": "hello"})
    await store_credentials(git_stack)

    status, saved = await git_stack.call("POST", "data-pipelines", json=git_body(git_server, "etl"))
    assert status == 201, saved
    assert (saved["version"], saved["commit"]) == (1, first)
    pipeline_id = saved["id"]
    assert len(git_server.fetches("etl")) == 1

    status, detail = await git_stack.call("GET", f"data-pipelines/{pipeline_id}")
    assert status == 200
    assert detail["definition_type"] == "git"
    assert detail["current"]["commit"] == first
    assert detail["current"]["definition"]["repository"] == git_server.repository_url("etl")
    assert detail["current"]["parameters"] == [{"name": "size", "default": "10"}]
    assert detail["git"]["last_good_commit"] == first
    assert detail["git"]["last_error"] is None

    # Nothing changed: the pass lists the branch and fetches nothing.
    listed = len(git_server.requests)
    result = await git_stack.compiler.git.run_pass()
    assert (result.checked, result.unchanged, result.updated, result.failed) == (1, 1, 0, 0)
    assert len(git_server.fetches("etl")) == 1
    assert [r.command for r in git_server.requests[listed:]] == ["advertise", "ls-refs"]
    status, versions = await git_stack.call("GET", f"data-pipelines/{pipeline_id}/versions")
    assert versions["total"] == 1

    # A commit that leaves the document as it was is read once and makes no version.
    readme = git_server.commit("etl", {"README.md": "hello again"})
    result = await git_stack.compiler.git.run_pass()
    assert (result.unchanged, result.updated, result.failed) == (1, 0, 0)
    assert len(git_server.fetches("etl")) == 2
    status, detail = await git_stack.call("GET", f"data-pipelines/{pipeline_id}")
    assert (detail["latest_version"], detail["git"]["last_good_commit"]) == (1, readme)
    await git_stack.compiler.git.run_pass()
    assert len(git_server.fetches("etl")) == 2

    # A commit that changes it: a new version, with its commit.
    second = git_server.commit("etl", {PATH: template("20")})
    result = await git_stack.compiler.git.run_pass()
    assert (result.updated, result.failed) == (1, 0)
    assert len(git_server.fetches("etl")) == 3
    status, detail = await git_stack.call("GET", f"data-pipelines/{pipeline_id}")
    assert (detail["current_version"], detail["current"]["commit"]) == (2, second)
    assert detail["current"]["parameters"] == [{"name": "size", "default": "20"}]
    assert detail["git"]["last_good_commit"] == second
    assert git_stack.templates() == [f"p-{pipeline_id}-v1", f"p-{pipeline_id}-v2"]
    [audit] = await audit_rows(git_stack, pipeline_id)
    assert audit["actor"] == "workflow-manager:git-sync"
    assert (audit["action"], audit["outcome"]) == ("pipeline.git_sync", "succeeded")
    assert audit["detail"]["version"] == 2
    assert audit["detail"]["commit"] == second

    # Rolled back, the pipeline stays on version 1 until the branch moves again.
    status, _ = await git_stack.call(
        "POST", f"data-pipelines/{pipeline_id}/rollback", json={"version": 1}
    )
    assert status == 200
    await git_stack.compiler.git.run_pass()
    status, detail = await git_stack.call("GET", f"data-pipelines/{pipeline_id}")
    assert (detail["current_version"], detail["latest_version"]) == (1, 2)
    assert len(git_server.fetches("etl")) == 3


async def test_the_sync_route_pulls_now_and_answers_with_the_outcome(
    git_stack: Stack, git_server: GitServer
) -> None:
    git_server.create("etl", {PATH: template()})
    await store_credentials(git_stack)
    status, saved = await git_stack.call("POST", "data-pipelines", json=git_body(git_server, "etl"))
    assert status == 201, saved
    sync = f"data-pipelines/{saved['id']}/sync"

    status, answer = await git_stack.call("POST", sync)
    assert status == 200, answer
    assert answer == {"id": saved["id"], "outcome": "unchanged", "commit": saved["commit"]}

    second = git_server.commit("etl", {PATH: template("30")})
    status, answer = await git_stack.call("POST", sync, as_=headers(actor="bob@acme"))
    assert (status, answer["outcome"], answer["commit"], answer["version"]) == (
        200,
        "updated",
        second,
        2,
    )

    git_server.commit("etl", {PATH: ESCAPING_YAML})
    status, answer = await git_stack.call("POST", sync)
    assert (status, answer["outcome"]) == (200, "failed")
    assert answer["error"]["reason"] == "refused"
    assert {v["rule"] for v in answer["error"]["violations"]} >= {"host_namespaces"}
    status, detail = await git_stack.call("GET", f"data-pipelines/{saved['id']}")
    assert detail["current_version"] == 2

    actors = [
        (row["actor"], row["detail"]["result"]) for row in await audit_rows(git_stack, saved["id"])
    ]
    assert actors == [
        ("alice@acme", "unchanged"),
        ("bob@acme", "updated"),
        ("alice@acme", "failed"),
    ]

    # Another tenant's pipeline is a missing one; writing needs pipelines.write.
    status, _ = await git_stack.call("POST", sync, as_=headers("globex"))
    assert status == 404
    status, _ = await git_stack.call(
        "POST", sync, as_=headers(permissions="pipelines.read,pipelines.run")
    )
    assert status == 403
    status, _ = await git_stack.call("POST", sync, json={"force": True})
    assert status == 400


async def test_a_create_that_cannot_read_its_document_fails_with_the_reason_and_saves_nothing(
    git_stack: Stack, git_server: GitServer
) -> None:
    git_server.create("etl", {PATH: template(), "big.yaml": "x" * (600 * 1024)})
    await store_credentials(git_stack, password="not-the-password")
    await store_credentials(git_stack, password=PASSWORD, name="good-creds")
    cases = [
        (git_body(git_server, "etl"), 400, "auth"),
        (git_body(git_server, "etl", secret="missing"), 400, "credentials"),
        (git_body(git_server, "etl", secret=None), 400, "auth"),
        (git_body(git_server, "etl", secret="good-creds", path="nope.yaml"), 400, "path_not_found"),
        (git_body(git_server, "etl", secret="good-creds", branch="dev"), 400, "branch_not_found"),
        (git_body(git_server, "nope", secret="good-creds"), 400, "repository_not_found"),
        (git_body(git_server, "etl", secret="good-creds", path="big.yaml"), 400, "too_large"),
    ]
    for body, expected, reason in cases:
        status, answer = await git_stack.call("POST", "data-pipelines", json=body)
        assert (status, answer["details"].get("git", {}).get("reason")) == (expected, reason), (
            answer
        )
        assert PASSWORD not in json.dumps(answer)
        assert "not-the-password" not in json.dumps(answer)

    git_server.commit("etl", {"escape.yaml": ESCAPING_YAML})
    body = git_body(git_server, "etl", secret="good-creds", path="escape.yaml")
    status, answer = await git_stack.call("POST", "data-pipelines", json=body)
    assert status == 422, answer

    http = git_body(git_server, "etl", secret="good-creds")
    http["definition"]["repository"] = http["definition"]["repository"].replace("https", "http")
    status, answer = await git_stack.call("POST", "data-pipelines", json=http)
    assert status == 400
    assert "https" in answer["message"]
    assert await git_stack.pool.fetchval("SELECT count(*) FROM pipelines") == 0
    assert await git_stack.pool.fetchval("SELECT count(*) FROM git_sources") == 0
    assert git_stack.templates() == []


async def test_every_broken_repository_is_a_stored_audited_error_and_the_pass_goes_on(
    git_stack: Stack, git_server: GitServer
) -> None:
    await store_credentials(git_stack)
    names = ["healthy", "password", "path", "branch", "refused", "oversized"]
    ids = {}
    for name in names:
        git_server.create(name, {PATH: template()})
        status, saved = await git_stack.call(
            "POST", "data-pipelines", json=git_body(git_server, name)
        )
        assert status == 201, saved
        ids[name] = saved["id"]

    await store_credentials(git_stack, password="rotated-elsewhere", name="wrong-creds")
    await git_stack.pool.execute(
        "UPDATE git_sources SET body = jsonb_set(body, '{definition,credentials_secret}', "
        "'\"wrong-creds\"') WHERE pipeline_id = $1",
        ids["password"],
    )
    changed = git_server.commit("healthy", {PATH: template("11")})
    git_server.commit("path", {PATH: None, "other.yaml": template()})
    git_server.commit("branch", {PATH: template("12")}, branch="other")
    _delete_branch(git_server, "branch", "main")
    git_server.commit("refused", {PATH: ESCAPING_YAML})
    git_server.commit("oversized", {PATH: template() + "#" * (600 * 1024)})

    with capture_logs() as logs:
        result = await git_stack.compiler.git.run_pass()
    assert (result.checked, result.updated, result.failed) == (6, 1, 5)
    status, healthy = await git_stack.call("GET", f"data-pipelines/{ids['healthy']}")
    assert (healthy["current_version"], healthy["current"]["commit"]) == (2, changed)

    expected = {
        "password": "auth",
        "path": "path_not_found",
        "branch": "branch_not_found",
        "refused": "refused",
        "oversized": "too_large",
    }
    for name, reason in expected.items():
        status, detail = await git_stack.call("GET", f"data-pipelines/{ids[name]}")
        assert detail["latest_version"] == 1, name
        error = detail["git"]["last_error"]
        assert error["reason"] == reason, (name, error)
        assert error["since"] is not None
        [audit] = await audit_rows(git_stack, ids[name])
        assert (audit["outcome"], audit["detail"]["reason"]) == ("failed", reason)

    # The same errors again: stored, not audited again; the refused commits are not refetched.
    fetched = len(git_server.objects())
    await git_stack.compiler.git.run_pass()
    for name in expected:
        assert len(await audit_rows(git_stack, ids[name])) == 1, (
            name,
            await audit_rows(git_stack, ids[name]),
        )
    assert len(git_server.objects()) == fetched

    everything = json.dumps([dict(event) for event in logs], default=str)
    stored = await git_stack.pool.fetch("SELECT * FROM git_sources")
    audited = await git_stack.pool.fetch("SELECT * FROM run_actions")
    for text in (everything, str([dict(r) for r in stored]), str([dict(r) for r in audited])):
        assert PASSWORD not in text
        assert "rotated-elsewhere" not in text


def _delete_branch(server: GitServer, name: str, branch: str) -> None:
    import subprocess

    subprocess.run(
        ["git", "-C", str(server.root / f"{name}.git"), "update-ref", "-d", f"refs/heads/{branch}"],
        check=True,
    )


async def test_an_unreachable_server_and_a_fix_of_the_credentials(
    git_stack: Stack, git_server: GitServer
) -> None:
    git_server.create("etl", {PATH: template()})
    await store_credentials(git_stack)
    status, saved = await git_stack.call("POST", "data-pipelines", json=git_body(git_server, "etl"))
    assert status == 201, saved

    await git_server.stop()
    await git_stack.compiler.git.run_pass()
    status, detail = await git_stack.call("GET", f"data-pipelines/{saved['id']}")
    assert detail["git"]["last_error"]["reason"] == "unreachable"
    assert detail["git"]["last_error"]["commit"] is None

    await git_server.start(port=git_server.port)
    await git_stack.compiler.git.run_pass()
    status, detail = await git_stack.call("GET", f"data-pipelines/{saved['id']}")
    assert detail["git"]["last_error"] is None
    assert detail["latest_version"] == 1
    rows = await audit_rows(git_stack, saved["id"])
    assert [row["outcome"] for row in rows] == ["failed"]
