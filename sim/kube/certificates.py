"""TLS for the emulated API servers: one test CA per process (trustme), a serving certificate
per cluster, and client certificates it signs (accepted as credentials, like a real API server's
client CA). Production kubeconfigs carry ``certificate-authority-data``; serving TLS makes every
test and the demo take that path too."""

from __future__ import annotations

import base64
import datetime
import functools
import ssl

import trustme

__all__ = ["ca_data", "client_context", "issue_client_cert", "server_context", "test_ca"]


@functools.cache
def test_ca() -> trustme.CA:
    """The CA of this process's emulators (made on first use, never written to disk)."""
    return trustme.CA(organization_name="workflow-manager sim")


def ca_data(ca: trustme.CA) -> str:
    """The CA as a kubeconfig's ``certificate-authority-data`` (base64 of the PEM)."""
    return base64.b64encode(ca.cert_pem.bytes()).decode()


def server_context(
    ca: trustme.CA,
    hosts: tuple[str, ...],
    *,
    not_after: datetime.datetime | None = None,
) -> ssl.SSLContext:
    """A serving context for `hosts`, asking for (not requiring) a client certificate of `ca`.

    `not_after` in the past serves an expired certificate (the error tests).
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*hosts, not_after=not_after).configure_cert(context)
    ca.configure_trust(context)
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


def _san_safe(user: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "-._") else "-" for c in user) or "u"


def issue_client_cert(ca: trustme.CA, user: str) -> tuple[str, str]:
    """(client-certificate-data, client-key-data) for a kubeconfig user named `user`."""
    # The API server reads the user from the subject's CN; the SAN is there because
    # cryptography 51 refuses a certificate with an empty SubjectAlternativeName, which is what
    # trustme writes when given no identity.
    leaf = ca.issue_cert(f"{_san_safe(user)}@users.sim.invalid", common_name=user)
    chain = b"".join(blob.bytes() for blob in leaf.cert_chain_pems)
    return base64.b64encode(chain).decode(), base64.b64encode(leaf.private_key_pem.bytes()).decode()


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    """For plain aiohttp clients in tests: trusts `ca` alone."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context
