"""Fixtures live in modules of their own so tests can import their helpers too: moto with
authentication (moto_iam.py), the pipelines stack (pipeline_stack.py) and Git sync's server and
stack (git_stack.py)."""

from tests.integration.compiler.git_stack import git_server, git_stack
from tests.integration.compiler.moto_iam import moto, observed, tenant, users
from tests.integration.compiler.pipeline_stack import ml_stack, stack

__all__ = ["git_server", "git_stack", "ml_stack", "moto", "observed", "stack", "tenant", "users"]
