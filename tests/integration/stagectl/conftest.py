"""Fixtures live in modules of their own so tests can import their helpers too: the release
stack (release_stack.py) on the pipelines stack of the compiler's tests."""

from tests.integration.stagectl.release_stack import aws_credentials, controller, release_stack

__all__ = ["aws_credentials", "controller", "release_stack"]
