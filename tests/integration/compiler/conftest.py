"""Fixtures live in modules of their own so tests can import their helpers too: moto with
authentication (moto_iam.py) and the pipelines stack (pipeline_stack.py)."""

from tests.integration.compiler.moto_iam import moto, observed, tenant, users
from tests.integration.compiler.pipeline_stack import ml_stack, stack

__all__ = ["ml_stack", "moto", "observed", "stack", "tenant", "users"]
