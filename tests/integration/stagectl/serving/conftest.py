"""moto with IAM authentication on (the compiler's tests' fixture) and the Kubernetes emulator."""

from tests.integration.compiler.moto_iam import moto, tenant

__all__ = ["moto", "tenant"]
