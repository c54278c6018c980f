"""shared.pipelines.GitDefinition: only https repositories, no credentials in the URL, branch
and path names git cannot mistake for options or walk out of the repository with."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import Invalid
from shared.pipelines import GitDefinition, parse_body


def body(**definition: Any) -> dict[str, Any]:
    base = {"type": "git", "repository": "https://git.example/acme/etl.git", "path": "etl.yaml"}
    return {"name": "etl", "definition": {**base, **definition}}


def test_a_git_definition_is_accepted_with_defaults() -> None:
    parsed = parse_body(body(credentials_secret="git-creds")).definition
    assert isinstance(parsed, GitDefinition)
    assert (parsed.branch, parsed.credentials_secret) == ("main", "git-creds")
    for branch in ("main", "release/1.2", "feat_x-y", "v1.0"):
        assert parse_body(body(branch=branch)).definition.branch == branch  # type: ignore[union-attr]
    assert parse_body(body(repository="https://git.example:8443/a")).definition


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repository", "http://git.example/a.git"),
        ("repository", "file:///srv/repos/a.git"),
        ("repository", "ssh://git@git.example/a.git"),
        ("repository", "git@git.example:a.git"),
        ("repository", "https://user:pw@git.example/a.git"),
        ("repository", "https://token@git.example/a.git"),
        ("repository", "https://git.example/a.git?x=1"),
        ("repository", "https://git.example/a.git#main"),
        ("repository", "https:///a.git"),
        ("repository", "https://git.example:port/a"),
        ("repository", "https://git.example/a b"),
        ("repository", "-uhttps://x"),
        ("branch", "-upload-pack=evil"),
        ("branch", "a..b"),
        ("branch", "a b"),
        ("branch", "a:b"),
        ("branch", "x.lock"),
        ("branch", "/x"),
        ("branch", "x/"),
        ("branch", "@"),
        ("branch", "x@{1}"),
        ("path", "../etc/passwd"),
        ("path", "/etc/passwd"),
        ("path", "a//b"),
        ("path", "a/./b"),
        ("path", "a\\b"),
        ("path", "dir/"),
        ("path", "a\nb"),
        ("credentials_secret", "Not_A_Name"),
        ("credentials_secret", ""),
    ],
)
def test_what_could_leak_escape_or_inject_is_refused_naming_the_field(
    field: str, value: str
) -> None:
    with pytest.raises(Invalid) as refused:
        parse_body(body(**{field: value}))
    assert refused.value.details["errors"][0]["field"] == f"definition.git.{field}"
    assert "pw" not in refused.value.message or field != "repository"


@given(st.text(max_size=60))
def test_every_accepted_repository_is_https_without_userinfo(text: str) -> None:
    try:
        definition = parse_body(body(repository=text)).definition
    except Invalid:
        return
    parts = urlsplit(definition.repository)  # type: ignore[union-attr]
    assert parts.scheme == "https"
    assert "@" not in parts.netloc
    assert parts.hostname


@given(st.text(max_size=40))
def test_no_accepted_branch_or_path_can_be_taken_for_an_option_or_leave_the_tree(
    text: str,
) -> None:
    for field in ("branch", "path"):
        try:
            parse_body(body(**{field: text}))
        except Invalid:
            continue
        assert not text.startswith("-") or field == "path"
        assert ".." not in text.split("/")
        assert not text.startswith("/")
        assert all(33 <= ord(c) <= 126 for c in text)
