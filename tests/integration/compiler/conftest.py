"""The moto-with-authentication fixtures live in moto_iam.py so tests can import its helpers too."""

from tests.integration.compiler.moto_iam import moto, observed, tenant, users

__all__ = ["moto", "observed", "tenant", "users"]
