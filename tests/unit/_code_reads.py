"""What each deployable reads from its environment, derived from the code.

A deployable reads a variable of ``Settings`` when its own modules, or the shared modules they
import, read it as an attribute (``settings.HTTP_PORT``) or name it (``settings.require(...)``);
it reads the AWS SDK's keys when one of those modules imports the SDK. The documentation's "Used
by" column (``tests/unit/test_docs_truth.py``) and the chart's table of what each Deployment
receives (``tests/unit/chart/test_environment.py``) are both checked against this.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import grimp

from shared.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOYABLES = ("watcher", "apiserver", "compiler", "stagectl", "inference_auth")
# The AWS SDK's packages, and the credentials it reads from the environment when no other
# source gives them (the host cluster is self-managed: no IRSA, docs/iam.md).
AWS_SDK = frozenset({"boto3", "botocore", "aiobotocore", "aioboto3"})
AWS_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def _module_file(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@cache
def _graph() -> grimp.ImportGraph:
    return grimp.build_graph(*DEPLOYABLES, "shared", include_external_packages=False)


@cache
def _tree(module: str) -> ast.Module | None:
    path = _module_file(module)
    if not path.exists():  # a namespace package (shared.db.migrations holds only SQL)
        return None
    return ast.parse(path.read_text())


@cache
def modules_of(deployable: str) -> frozenset[str]:
    """The deployable's own modules and the shared modules they import."""
    graph = _graph()
    own = {m for m in graph.modules if m == deployable or m.startswith(f"{deployable}.")}
    reached = set(own)
    for module in own:
        reached |= {m for m in graph.find_upstream_modules(module) if m.startswith("shared")}
    reached.discard("shared.config")  # where the fields are declared, not read
    return frozenset(reached)


def _settings_read_in(module: str) -> set[str]:
    """Settings fields a module reads as attributes (``settings.HTTP_PORT``) or by name
    (``settings.require("ARTIFACT_BUCKET")``, ``getattr(settings, name)`` over a tuple of names)."""
    tree = _tree(module)
    if tree is None:
        return set()
    fields = set(Settings.model_fields)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in fields:
            found.add(node.attr)
        elif isinstance(node, ast.Constant) and node.value in fields:
            found.add(node.value)
    return found


def _imports_aws_sdk(module: str) -> bool:
    tree = _tree(module)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(name.split(".")[0] in AWS_SDK for name in names):
            return True
    return False


@cache
def settings_read_by() -> dict[str, set[str]]:
    """Variable → deployables whose own modules, or the shared modules they import, read it."""
    read_by: dict[str, set[str]] = {}
    for deployable in DEPLOYABLES:
        for module in modules_of(deployable):
            for name in _settings_read_in(module):
                read_by.setdefault(name, set()).add(deployable)
    return read_by


@cache
def environment_read_by() -> dict[str, set[str]]:
    """``settings_read_by`` and the AWS SDK's credentials, read by each deployable using it."""
    read_by = {name: set(deployables) for name, deployables in settings_read_by().items()}
    for deployable in DEPLOYABLES:
        if any(_imports_aws_sdk(module) for module in modules_of(deployable)):
            for name in AWS_CREDENTIALS:
                read_by.setdefault(name, set()).add(deployable)
    return read_by
