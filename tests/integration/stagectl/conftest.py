"""Fixtures live in modules of their own so tests can import their helpers too: the release
stack (release_stack.py) on the pipelines stack of the compiler's tests; the serving stand-in
and a stage controller that deploys (test_deploy.py); inference_auth's database role."""

from tests.integration.inference_auth.conftest import reader_url
from tests.integration.stagectl.release_stack import aws_credentials, controller, release_stack
from tests.integration.stagectl.test_deploy import deploying, serving

__all__ = ["aws_credentials", "controller", "deploying", "reader_url", "release_stack", "serving"]
